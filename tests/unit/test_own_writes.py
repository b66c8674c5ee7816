"""Recognising a refused write as the caller's own earlier try (lost answer, botocore retry)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqsjobs.errors import StoreError
from sqsjobs.job import Job, JobStatus
from sqsjobs.store import requests as rq

NOW = 1_700_000_000.5


def _refused(item):
    return StoreError("refused", code="ConditionalCheckFailedException", response={"Item": item})


def _claimed_item(owner: str, started: str) -> dict:
    return {
        "id": {"S": "j1"},
        "type": {"S": "t"},
        "queue": {"S": "default"},
        "status": {"S": "running"},
        "attempt": {"N": "1"},
        "max_attempts": {"N": "3"},
        "lease_owner": {"S": owner},
        "lease_epoch": {"N": "1"},
        "lease_expires": {"N": "1700000005.5"},
        "started_at": {"N": started},
        "updated_at": {"N": started},
        "run_at": {"N": "1699999999"},
        "created_at": {"N": "1699999999"},
    }


def test_a_claim_refused_by_its_own_first_try_is_ours():
    params = rq.claim("tbl", "j1", owner="w1", now=NOW, lease_s=5)
    # DynamoDB hands numbers back normalised; "1700000000.50" and "1700000000.5" are the same value.
    job = rq.own_claim(params, _refused(_claimed_item("w1", "1700000000.50")))
    assert job is not None and (job.id, job.lease_owner, job.lease_epoch) == ("j1", "w1", 1)


def test_an_earlier_claim_by_the_same_worker_or_any_other_owner_is_not_ours():
    params = rq.claim("tbl", "j1", owner="w1", now=NOW, lease_s=5)
    assert rq.own_claim(params, _refused(_claimed_item("w1", "1699999990.1"))) is None  # a duplicate message
    assert rq.own_claim(params, _refused(_claimed_item("w2", "1700000000.5"))) is None
    assert rq.own_claim(params, StoreError("throttled", code="ThrottlingException")) is None
    assert rq.own_claim(params, _refused(None)) is None  # no record


def _job(epoch: int = 2) -> Job:
    t = datetime.fromtimestamp(NOW - 10, UTC)
    return Job(
        id="j1", type="t", queue="default", status=JobStatus.RUNNING, payload={}, payload_version=1,
        attempt=2, max_attempts=3, run_at=t, created_at=t, updated_at=t, started_at=t,
        lease_owner="w1", lease_epoch=epoch,
    )  # fmt: skip


def test_a_fenced_write_refused_by_its_own_first_try_was_written():
    params = rq.complete("tbl", _job(), owner="w1", now=NOW, result=None, retention_s=60)
    landed = {
        "id": {"S": "j1"},
        "status": {"S": "succeeded"},
        "lease_epoch": {"N": "2"},
        "updated_at": {"N": "1700000000.5"},
    }
    assert rq.already_written(params, _refused(landed))


def test_a_fenced_write_refused_by_someone_else_was_not_written():
    job = _job()
    for params in (
        rq.complete("tbl", job, owner="w1", now=NOW, result=None, retention_s=60),
        rq.release("tbl", job, owner="w1", now=NOW),
    ):
        rescued = {
            "id": {"S": "j1"},
            "status": {"S": "running"},
            "lease_epoch": {"N": "3"},
            "updated_at": {"N": "1700000000.5"},
        }
        later = {
            "id": {"S": "j1"},
            "status": {"S": "succeeded"},
            "lease_epoch": {"N": "2"},
            "updated_at": {"N": "1700000001"},
        }
        assert not rq.already_written(params, _refused(rescued))
        assert not rq.already_written(params, _refused(later))
        assert not rq.already_written(params, _refused(None))
        assert not rq.already_written(params, StoreError("throttled", code="ThrottlingException"))
