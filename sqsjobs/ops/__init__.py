"""Operator operations behind ``sqsjobs jobs|dlq|stats|doctor``, usable from Python too.

Each operation is a sans-I/O flow (see ``sqsjobs._aws``) that ``App.run`` drives with boto3 or
``App.arun`` with aiobotocore, returning plain dataclasses the CLI renders as tables or JSON:

- ``inspect``: one job's record, and listings: dead jobs from the ``attention`` index, the rest by a
  bounded Scan.
- ``requeue``: the ``replay`` transition (dead | cancelled → queued) with its audit entry.
- ``dlq``: reading dead-letter queues without losing messages (SQS has no peek).
- ``replay``: DLQ replay keyed by job id, safe to interrupt and re-run.
- ``stats``: queue depths and per-type counts from one capped Scan, and the workers by status.
- ``workers``: the ECS worker registry (live, draining, silent; what each runs now).
- ``doctor``: the deployed resources checked against the App (and an old table layout recognised).
"""

from __future__ import annotations
