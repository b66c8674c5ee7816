"""Flow control: fleet-wide concurrency and rate limits, circuit breakers, pause and resume, expiry.

``declarations`` (what ``app.limit`` declares), ``store`` (the items and their writes), ``gate``
(the check before the claim, and the finish hook that gives slots back), ``ops`` (pause, resume
and the state the CLI shows), ``expiry`` (the claim guarded by a job's deadline). docs/flow-control-limits.md and
docs/flow-control-expiry.md explain each guarantee and its cost.
"""
