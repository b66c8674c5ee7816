"""Batches: ordinary jobs grouped under a batch record and told once when every item is done (docs/workflows-batches.md).

Every feature folder has the same parts: ``plugin`` (what the kernel sees: the ``FinishHook``
through which an item's finish counts on its batch, and the sweep pass that repairs a completion a
crash cut short), ``records`` (its items in the jobs table: sans-I/O builders of their writes and
reads) and ``namespace`` (what the App offers: ``app.batches``, the model and the producer's
flows). ``completion`` is the batch's own: seal, check, complete exactly once, cancel.
"""
