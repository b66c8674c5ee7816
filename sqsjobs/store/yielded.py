"""The note a serialized job's record gets when the job gives up its place in its key (sans-I/O).

A serialize key's jobs start in enqueue order (docs/flow-control-routing.md, "Serialize keys"),
however long one of them waits, except after three waits: a wait on a token, a wait longer than its
message lives, and one that spends the receives left under the queue's redrive limit. Such a job
then starts after later jobs of its key, and its record says so: ``order_yielded`` holds when and
why, which ``sqsjobs jobs get`` shows. The note rides on the write the wait makes anyway when there
is one (a token wait's sleep), else it is one write of its own (1 write unit), only then.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqsjobs.job import JobStatus
from sqsjobs.store.codec import av_s
from sqsjobs.store.conditions import OneOf
from sqsjobs.store.write import Write

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.store.conditions import AV

#: The record's attribute (kept in ``Job.extra``: no index projects it, no transition reads it).
ORDER_YIELDED = "order_yielded"


def note(reason: str, now: float) -> tuple[tuple[tuple[str, str], ...], Mapping[str, AV]]:
    """The assignment of the note, for ``Write.also_set``: ``<UTC time> <reason>``."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return ((ORDER_YIELDED, ":order_yielded"),), {":order_yielded": av_s(f"{stamp} {reason}")}


def yielded(table: str, job_id: str, *, reason: str, now: float) -> Write:
    """The note alone, on a job still waiting to start (a finished or running job's note would mislead)."""
    sets, values = note(reason, now)
    return Write(table, {"id": av_s(job_id)}, sets, values=values).guard(
        "waiting",
        OneOf("status", (":queued", ":retry")),
        {":queued": av_s(JobStatus.QUEUED), ":retry": av_s(JobStatus.RETRY_SCHEDULED)},
    )
