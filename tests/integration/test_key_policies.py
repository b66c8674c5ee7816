"""A dedup mode is a class: the producer's seam (``KeyPolicy``, ``KeySettler``) takes a new one unchanged.

The fitness test of the producer's seam. The four shipped modes live in ``sqsjobs/dedupe/``, and
nothing below the App names them; here an application writes two more outside sqsjobs — a window
keyed by the calendar day, and a mode that settles its jobs itself — and a real App on the embedded
moto enqueues with them through ``@app.job(dedupe=)`` and an enqueue's own ``dedupe=``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from sqsjobs import JobStatus
from sqsjobs.errors import JobNotFound
from sqsjobs.options import KeyPolicy
from sqsjobs.store.codec import idempotent_job_id
from sqsjobs.store.enqueue import KeySettler, Settled

if TYPE_CHECKING:
    from sqsjobs._aws import Flow
    from sqsjobs.store.enqueue import KeyEnv, NewJob


# ── two modes, as an application would write them ────────────────────────────────────────────
class OncePerUtcDay:
    """The first enqueue of a key on a calendar day (UTC) wins; later ones that day get its id."""

    mode = "once_per_utc_day"
    first_wins = True

    def job_id(self, job_type: str, key: str, tenant: str | None, at: float) -> str:
        day = datetime.fromtimestamp(at, UTC).date().isoformat()
        return idempotent_job_id(job_type, f"{key}@{day}", tenant)


@dataclass
class Forwarded:
    """Keys already handled elsewhere answer that system's id and write nothing; others enqueue as usual."""

    elsewhere: dict[str, str]
    asked: list[str] = field(default_factory=list)
    mode = "forwarded"
    first_wins = False

    def job_id(self, job_type: str, key: str, tenant: str | None, at: float) -> str:
        return idempotent_job_id(job_type, key, tenant)

    def settle_flow(self, job: NewJob, env: KeyEnv) -> Flow[Settled]:
        assert job.idempotency_key is not None
        self.asked.append(job.idempotency_key)
        if job.idempotency_key in self.elsewhere:
            return Settled(self.elsewhere[job.idempotency_key], write=False)
        return Settled(job.id, write=True)
        yield  # a flow: it may send requests of its own (through ``sqsjobs.store.apply``)


def test_the_modes_are_what_the_seam_checks_for():
    assert isinstance(OncePerUtcDay(), KeyPolicy) and not isinstance(OncePerUtcDay(), KeySettler)
    assert isinstance(Forwarded({}), KeySettler)
    noon, evening = (datetime(2026, 11, 29, h, tzinfo=UTC).timestamp() for h in (12, 23))
    next_day = datetime(2026, 11, 30, tzinfo=UTC).timestamp()
    once = OncePerUtcDay()
    assert once.job_id("t", "k", None, noon) == once.job_id("t", "k", None, evening)
    assert once.job_id("t", "k", None, noon) != once.job_id("t", "k", None, next_day)


def test_a_window_mode_written_outside_sqsjobs_keeps_one_job_per_key_and_day(moto_url, make_app):
    app = make_app(moto_url)

    @app.job("report.daily", dedupe=OncePerUtcDay())
    def daily(payload: dict, ctx) -> None: ...

    app.provision()
    first = app.enqueue("report.daily", {"v": 1}, idempotency_key="acme")
    # first_wins: another payload under the key that day gets the first job, not IdempotencyConflict
    again = app.enqueue("report.daily", {"v": 2}, idempotency_key="acme")
    other = app.enqueue("report.daily", {"v": 1}, idempotency_key="globex")
    assert again == first != other
    made_at = app.get(first).created_at.timestamp()  # the policy's id, by the day the job was made
    assert first == OncePerUtcDay().job_id("report.daily", "acme", None, made_at)
    assert {app.get(j).status for j in (first, other)} == {JobStatus.QUEUED}


def test_a_mode_that_settles_its_jobs_is_asked_first_and_its_answer_is_the_enqueues(moto_url, make_app):
    app = make_app(moto_url)

    @app.job("mail.send")
    def send(payload: dict, ctx) -> None: ...

    app.provision()
    forwarded = Forwarded({"legacy-7": "job-in-the-old-system"})
    kept = app.enqueue("mail.send", {"to": "a"}, idempotency_key="legacy-7", dedupe=forwarded)
    new = app.enqueue("mail.send", {"to": "b"}, idempotency_key="fresh-1", dedupe=forwarded)
    assert forwarded.asked == ["legacy-7", "fresh-1"]
    assert kept == "job-in-the-old-system"
    with pytest.raises(JobNotFound):  # write=False: nothing was written for it
        app.get(kept)
    assert app.get(new).status is JobStatus.QUEUED and new == idempotent_job_id("mail.send", "fresh-1", None)
    # in a batch of enqueues, each job is settled by its own mode, in order
    ids = app.enqueue_many(
        [
            {"type": "mail.send", "payload": {"to": "c"}, "idempotency_key": "legacy-7", "dedupe": forwarded},
            {"type": "mail.send", "payload": {"to": "d"}},
        ]
    )
    assert ids[0] == "job-in-the-old-system" and app.get(ids[1]).status is JobStatus.QUEUED
    # a mode that writes before the job cannot join a transaction, which writes the job with others
    with (
        pytest.raises(ValueError, match="forwarded is not supported in a transaction"),
        app.transaction() as tx,
    ):
        tx.enqueue("mail.send", {"to": "e"}, idempotency_key="legacy-7", dedupe=forwarded)
