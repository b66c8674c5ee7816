"""Per-job notification: ``enqueue(..., notify=Notify(...))`` tells a webhook, a queue or a bus when the job ends.

``plugin`` writes a delivery job with the job's finish, in its transaction (as a per-type hook
is); ``sender`` is that job's handler (a Standard Webhooks POST, an SQS message, an EventBridge
event), retried by its own policy and dead-lettered when it keeps failing; ``address_guard``
refuses webhook addresses on loopback, private, link-local and metadata networks.
"""
