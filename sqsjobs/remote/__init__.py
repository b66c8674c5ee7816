"""External job types run by HTTP workers in any language: the lease protocol (docs/http-workers.md).

``lease`` is the sealed lease a worker holds; ``server`` the four operations (lease, heartbeat,
complete, fail) over the kernel a Python worker runs; the routes are ``sqsjobs.api.lease_routes``.
"""
