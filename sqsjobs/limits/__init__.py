"""Flow control: fleet-wide concurrency and rate limits, circuit breakers, pause and resume.

``declarations`` (what ``app.limit`` declares), ``store`` (the items and their writes), ``gate``
(the check before the claim, and the finish hook that gives slots back), ``ops`` (pause, resume
and the state the CLI shows). docs/flow-control-limits.md explains each guarantee and its cost.
"""
