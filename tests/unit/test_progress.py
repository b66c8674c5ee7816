"""``ctx.progress``: bounded reports, numbered, written by the next lease renewal and read back from the record."""

from __future__ import annotations

import pytest

from sqsjobs.context import JobContext
from sqsjobs.job import MAX_PROGRESS_DATA_BYTES, MAX_PROGRESS_MESSAGE_CHARS, Progress
from sqsjobs.store import codec, enqueue, requests

NOW = 1_800_000_000.0


def _claimed_job():
    new = enqueue.NewJob(
        id="j1", type="t", queue="default", payload={}, payload_version=1, max_attempts=3, run_at=NOW, now=NOW
    )
    return codec.job_from_item(enqueue.put_job("tbl", new).item).evolve(claim_token=codec.nonce())


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ({"fraction": 1.5}, "from 0 to 1"),
        ({"fraction": -0.1}, "from 0 to 1"),
        ({"fraction": "half"}, "from 0 to 1"),
        ({"message": "x" * (MAX_PROGRESS_MESSAGE_CHARS + 1)}, "at most 500 characters"),
        ({"data": {"blob": "x" * MAX_PROGRESS_DATA_BYTES}}, "over 2048"),
        ({"data": {"when": object()}}, "must be JSON data"),
        ({"data": float("nan")}, "must be JSON data"),
    ],
)
def test_a_report_out_of_bounds_is_refused_with_what_is_wrong(report, message):
    ctx = JobContext(job=_claimed_job(), worker_id="w", deadline=NOW + 60, logger=None)
    with pytest.raises(ValueError, match=message):
        ctx.progress(**report)
    assert ctx.unwritten_progress() is None  # nothing was kept


def test_reports_are_numbered_and_only_the_latest_unwritten_one_rides_on_a_renewal():
    ctx = JobContext(job=_claimed_job(), worker_id="w", deadline=NOW + 60, logger=None)
    assert ctx.unwritten_progress() is None
    ctx.progress(fraction=0.1)
    ctx.progress(fraction=0.2, message="two", data={"n": 2})
    latest = ctx.unwritten_progress()
    assert latest == Progress(fraction=0.2, message="two", data={"n": 2}, report=2)
    ctx.progress_written(latest)
    assert ctx.unwritten_progress() is None  # the next renewal carries nothing
    ctx.progress(fraction=0.3)
    assert ctx.unwritten_progress() == Progress(fraction=0.3, report=3)


def test_the_renewal_writes_the_report_and_the_record_reads_it_back():
    job = _claimed_job()
    plain = requests.heartbeat("tbl", job, owner="w", now=NOW, lease_s=5).update_item()
    assert ":progress" not in plain["ExpressionAttributeValues"]
    report = Progress(fraction=0.5, message="half", data={"pages": 5}, report=4)
    assert report.summary() == '50%  half  {"pages": 5}'  # jobs get and the console show it so
    carried = requests.heartbeat("tbl", job, owner="w", now=NOW, lease_s=5, progress=report).update_item()
    assert "progress = :progress" in carried["UpdateExpression"]
    assert carried["ConditionExpression"] == plain["ConditionExpression"]  # fenced like any renewal
    item = {
        **enqueue.put_job(
            "tbl",
            enqueue.NewJob(
                id="j1",
                type="t",
                queue="default",
                payload={},
                payload_version=1,
                max_attempts=3,
                run_at=NOW,
                now=NOW,
            ),
        ).item,
        "progress": carried["ExpressionAttributeValues"][":progress"],
    }
    assert codec.job_from_item(item).progress == Progress(
        fraction=0.5, message="half", data={"pages": 5}, report=4, at=NOW
    )
    # a record whose progress a newer writer shaped otherwise still reads
    assert codec.job_from_item({**item, "progress": {"S": "[1, 2]"}}).progress is None
