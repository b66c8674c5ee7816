"""Recognising a refused write as the caller's own earlier try (lost answer, botocore retry).

Only values no other request can produce count (docs/lifecycle.md): the claim's random token, a write's
random nonce. A second claim by the same worker in the same millisecond — two copies of one message
in one receive batch — sets the same owner, time and epoch, and must still not pass for the first.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqsjobs.envelope import Envelope
from sqsjobs.errors import StoreError
from sqsjobs.job import Job, JobStatus
from sqsjobs.store import codec, job_store, requests, runs

NOW = 1_700_000_000.5


def _refused(item):
    return StoreError("refused", code="ConditionalCheckFailedException", response={"Item": item})


def _claim(token: str, *, owner: str = "w1", now: float = NOW) -> dict:
    return runs.claim(
        "tbl",
        Envelope("j1", "t"),
        owner=owner,
        token=token,
        message_id="m1",
        now=now,
        lease_s=5,
        max_attempts=3,
    )


def _as_landed(params: dict) -> dict:
    """The item a claim leaves behind, as ALL_OLD hands it to a refused retry."""
    values = params.all_values()
    return {
        "id": {"S": "j1"},
        "type": {"S": "t"},
        "queue": {"S": "default"},
        "status": values[":running"],
        "attempt": {"N": "1"},
        "max_attempts": values[":max"],
        "lease_owner": values[":owner"],
        "claim_token": values[":token"],
        "lease_epoch": {"N": "1"},
        "lease_expires": values[":expires"],
        "started_at": values[":now"],
        "updated_at": values[":now"],
        "run_at": {"N": "1699999999"},
        "created_at": {"N": "1699999999"},
    }


def test_a_claim_refused_by_its_own_first_try_is_ours():
    params = _claim("token-a")
    job = job_store.own_claim(params, _refused(_as_landed(params)))
    assert job is not None and (job.id, job.lease_owner, job.claim_token) == ("j1", "w1", "token-a")


def test_a_second_claim_by_the_same_worker_in_the_same_millisecond_is_not_ours():
    # GIVEN two copies of one message claimed by one worker at the same instant
    first, second = _claim(codec.nonce()), _claim(codec.nonce())
    # WHEN the first lands and the second is refused by it
    refused = _refused(_as_landed(first))
    # THEN only the first claim owns the job (the second copy must not run the handler)
    assert job_store.own_claim(first, refused) is not None
    assert job_store.own_claim(second, refused) is None


def test_other_refusals_are_not_ours():
    params = _claim("token-a")
    assert job_store.own_claim(params, _refused(_as_landed(_claim("token-b", owner="w2")))) is None
    assert job_store.own_claim(params, StoreError("throttled", code="ThrottlingException")) is None
    assert job_store.own_claim(params, _refused(None)) is None  # no record


def _job(token: str = "token-a") -> Job:
    t = datetime.fromtimestamp(NOW - 10, UTC)
    return Job(
        id="j1",
        type="t",
        queue="default",
        status=JobStatus.RUNNING,
        payload={},
        payload_version=1,
        attempt=2,
        max_attempts=3,
        run_at=t,
        created_at=t,
        updated_at=t,
        started_at=t,
        lease_owner="w1",
        lease_epoch=2,
        claim_token=token,
    )


def _after(params: dict, status: str) -> dict:
    values = params.all_values()
    return {
        "id": {"S": "j1"},
        "status": {"S": status},
        "claim_token": values[":token"],
        "wid": values[":wid"],
    }


def test_a_fenced_write_refused_by_its_own_first_try_was_written():
    params = runs.complete("tbl", _job(), owner="w1", now=NOW, result=None, retention_s=60)
    assert job_store.already_written(params, _refused(_after(params, "succeeded")))


def test_a_fenced_write_refused_by_anything_else_was_not_written():
    job = _job()
    for params in (
        runs.complete("tbl", job, owner="w1", now=NOW, result=None, retention_s=60),
        requests.release("tbl", job, owner="w1", now=NOW),
    ):
        # the same request built again (same owner, time, epoch) writes another nonce
        twin = runs.complete("tbl", job, owner="w1", now=NOW, result=None, retention_s=60)
        rescued = {"id": {"S": "j1"}, "status": {"S": "running"}, "claim_token": {"S": "token-b"}}
        assert not job_store.already_written(params, _refused(_after(twin, "succeeded")))
        assert not job_store.already_written(params, _refused(rescued))
        assert not job_store.already_written(params, _refused(None))
        assert not job_store.already_written(params, StoreError("throttled", code="ThrottlingException"))
