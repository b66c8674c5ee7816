"""Waiting for a job, a batch or a chain to end: reads with a growing pause, bounded per waiter.

A waiter polls the record, because nothing else in sqsjobs can tell it the job ended without a
resource per waiter (a queue, a stream reader) that would cost more than the reads. The reads are
what keep it cheap:

- the first read is strongly consistent (1 read unit), so a job enqueued a moment ago is found
  and an unknown id is ``JobNotFound`` at once;
- every later read is eventually consistent: half a read unit for an item up to 4 KB, and a job's
  record is under 1 KB. A terminal record is written once, whole, so a stale read can only be
  late (one more pause), never wrong;
- the pause between reads starts at ``FIRST_PAUSE_S`` and grows by ``GROWTH`` per read up to
  ``MAX_PAUSE_S``; the last pause is cut to the deadline and one read is made at it. So a wait
  notices the end at most ``GROWTH - 1`` of the time waited so far late, and never more than
  ``MAX_PAUSE_S``.

What a wait costs is then a function of its length only (``reads_within``): 13 reads for 20 s,
17 for 60 s, then one per ``MAX_PAUSE_S``. At list prices a read unit is a fifth of a write unit, so
a waiter's 0.5-unit reads cost less than the job's own three writes (enqueue, claim, finish)
until the wait passes ``reads_within`` of 30 reads: about 3 minutes (docs/results.md has the
measurement over 1,000 concurrent waiters).

Time: the deadline is read from ``time.monotonic`` (a wait is real time, whatever clock the App's
leases read); the pauses are ``sleep_call`` steps the driver sleeps through, so one flow serves
``App.wait`` (boto3, ``time.sleep``) and ``App.await_result`` (aioboto3, ``asyncio.sleep``). A
feature's waits (``app.chains.wait``, ``app.batches.wait``) are ``poll_flow`` over its own read.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import TYPE_CHECKING, TypeVar

from sqsjobs._aws import Call, sleep_call
from sqsjobs.errors import JobNotFound, PayloadInvalid, PayloadMissing, WaitTimeout
from sqsjobs.store import codec, requests, sealing
from sqsjobs.transport import objects

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sqsjobs._aws import Flow
    from sqsjobs.config import Settings
    from sqsjobs.job import Job

T = TypeVar("T")

#: The pause before the second read (s).
FIRST_PAUSE_S = 0.1
#: Each pause is this many times the one before.
GROWTH = 1.5
#: The longest pause between two reads (s): how late a long wait may notice the end.
MAX_PAUSE_S = 10.0
#: The longest wait an HTTP request may ask for (``GET /jobs/{id}?wait=``): API Gateway ends a
#: request at 29 s, and a client's default read timeout is often 30 s.
MAX_HTTP_WAIT_S = 20


def pauses() -> Iterator[float]:
    """The pauses between reads, in order (endless)."""
    pause = FIRST_PAUSE_S
    while True:
        yield pause
        pause = min(MAX_PAUSE_S, pause * GROWTH)


def reads_within(timeout_s: float) -> int:
    """The most reads a wait of ``timeout_s`` makes: one at the start, one after each pause, one at the deadline."""
    reads, elapsed = 1, 0.0
    for pause in pauses():
        if elapsed + pause >= timeout_s:
            return reads + 1 if timeout_s > elapsed else reads
        elapsed += pause
        reads += 1
    raise AssertionError("unreachable")  # pragma: no cover


def poll_flow(
    read: Callable[[bool], Flow[T]],
    ended: Callable[[T], bool],
    timeout_s: float,
    what: str,
    *,
    monotonic: Callable[[], float] = time.monotonic,
) -> Flow[T]:
    """Read with ``read(first)`` until ``ended`` says so, pausing between reads; ``WaitTimeout`` past ``timeout_s``."""
    start = monotonic()
    deadline = start + max(0.0, timeout_s)
    reads, first = 0, True
    schedule = pauses()
    while True:
        seen = yield from read(first)
        reads, first = reads + 1, False
        if ended(seen):
            return seen
        left = deadline - monotonic()
        if left <= 0:
            raise WaitTimeout(
                f"{what} had not ended after {timeout_s:g} s ({reads} reads)",
                last=seen,
                waited_s=monotonic() - start,
                reads=reads,
            )
        yield sleep_call(min(next(schedule), left))


def read_job_flow(
    settings: Settings, job_id: str, consistent: bool = True, *, load_result: bool = True
) -> Flow[Job]:
    """One read of the record (``App.get``'s, and each of a wait's); ``JobNotFound`` if there is none.

    A finished job's S3 result is read too, unless ``load_result`` is False; one that expired
    (``payload_object_days``) leaves ``result`` None, and ``result_ref`` still names it. An encrypted
    result is decrypted for the caller (``Job.encrypted`` says it was, so no view shows it); one this
    caller cannot decrypt (its key disabled, no ``kms:Decrypt``) stays sealed.
    """
    params = {**requests.get(settings.table_name, job_id), "ConsistentRead": consistent}
    response = yield Call("dynamodb", "get_item", params)
    item = response.get("Item")
    if not item or "type" not in item:
        raise JobNotFound(f"no job with id {job_id!r} in table {settings.table_name}")
    job = codec.job_from_item(item)
    if load_result and job.status.terminal and job.result_ref is not None:
        with contextlib.suppress(PayloadMissing):
            job = job.evolve(result=json.loads((yield from objects.get_flow(job.result_ref))))
    if load_result and codec.sealed_key(job.result) is not None:
        with contextlib.suppress(PayloadInvalid):
            opened = yield from sealing.open_result_flow(settings.table_name, job.id, job.result)
            job = job.evolve(result=json.loads(opened), encrypted=True)
    return job


def job_flow(settings: Settings, job_id: str, timeout_s: float) -> Flow[Job]:
    """The job's record once it is terminal (succeeded, dead, cancelled, expired)."""
    return poll_flow(
        lambda first: read_job_flow(settings, job_id, first),
        lambda job: job.status.terminal,
        timeout_s,
        f"job {job_id}",
    )
