"""Every way a job, a chain or a batch ends is told once: runs, chains, batches, and cancels without a run.

From outside: real worker processes on MiniStack, targets that are SQS queues read raw. A target
hears a chain's end (its last step, or the step that ended it), a batch's end (its callback's), and
a cancel by ``app.cancel``, a bulk cancel, ``app.chains.cancel`` or of a batch item — each once,
and nothing for a step that only handed over to the next one.
"""

from __future__ import annotations

import json
import time

import pytest

from sqsjobs import JobStatus, Notify
from sqsjobs.errors import ChainInvalid, InvalidTransition
from sqsjobs.ops.bulk_cancel import BulkCancel, bulk_cancel_flow
from sqsjobs.producer import JobRequest
from tests.integration.helpers import kill_group, wait_until, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.polyglot:app"


@pytest.fixture
def replies(app):
    """A queue that hears ends, and a reader that drains it."""
    sqs = app.clients.boto3.get("sqs")
    url = sqs.create_queue(QueueName=f"{app.name}-replies")["QueueUrl"]
    heard: list[dict] = []

    def read(at_least: int, within: float = 60.0) -> list[dict]:
        def enough() -> bool:
            for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
                "Messages", []
            ):
                heard.append(json.loads(m["Body"]))
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            return len(heard) >= at_least

        wait_until(enough, within, f"{at_least} ends heard")
        time.sleep(3)  # anything told twice would arrive now
        enough()
        return list(heard)

    return Notify(queue=url), read


def caption(runs_dir, title: str | None = "t") -> tuple[str, dict]:
    return ("py.caption", {"runs_dir": str(runs_dir), **({"title": title} if title else {})})


def test_a_chain_tells_its_end_once_from_the_step_that_ended_it(app, tmp_path, replies):
    target, read = replies
    done = app.chains.start([caption(tmp_path)] * 3, notify=target)
    # step 1 has no title: it raises twice (max_attempts=2) and ends the chain dead
    broken = app.chains.start([caption(tmp_path), caption(tmp_path, None), caption(tmp_path)], notify=target)
    proc = worker_process(app, APP)
    try:
        heard = read(2)
    finally:
        kill_group(proc)
    by_chain = {e["data"]["chain"]["id"]: e for e in heard}
    assert len(heard) == 2 and set(by_chain) == {done, broken}
    assert (by_chain[done]["type"], by_chain[done]["data"]["chain"]) == (
        "job.succeeded",
        {"id": done, "step": 2, "steps": 3},
    )
    assert by_chain[done]["data"]["result"] == {"caption": "t: None"}
    assert (by_chain[broken]["type"], by_chain[broken]["data"]["chain"]["step"]) == ("job.dead", 1)
    assert by_chain[broken]["data"]["error"]["type"] == "KeyError"


def test_a_chain_step_names_no_target_of_its_own(app, tmp_path):
    with pytest.raises(ChainInvalid, match=r"app\.chains\.start"):
        app.chains.start([JobRequest(*caption(tmp_path), notify={"queue": "https://q"})])


def test_a_batch_tells_its_end_when_its_callback_ends(app, tmp_path, replies):
    target, read = replies
    batch = app.batches.create("py.collect", notify=target)
    for _ in range(3):
        batch.add(*caption(tmp_path))
    batch.seal()
    proc = worker_process(app, APP)
    try:
        [event] = read(1)
    finally:
        kill_group(proc)
    assert (event["type"], event["data"]["type"], event["data"]["parent_id"]) == (
        "job.succeeded",
        "py.collect",
        batch.id,
    )
    assert event["data"]["result"]["counts"]["succeeded"] == 3


def test_every_cancel_of_a_waiting_job_is_told_once_with_the_cancel(app, tmp_path, replies):
    target, read = replies
    # no worker runs while these are cancelled: each waits, so no run and no finish can tell it
    single = app.enqueue(*caption(tmp_path), delay=600, notify=target)
    untold = app.enqueue(*caption(tmp_path), delay=600)
    bulk = [app.enqueue(*caption(tmp_path), delay=600, tenant="bulk", notify=target) for _ in range(2)]
    chain = app.chains.start([caption(tmp_path)] * 2, notify=target)
    batch = app.batches.create("py.collect")
    item = batch.add(*caption(tmp_path), notify=target)

    assert app.cancel(single) == "cancelled" and app.cancel(untold) == "cancelled"
    with pytest.raises(InvalidTransition):
        app.cancel(single)  # cancelled already: no second delivery
    report = app.run(
        bulk_cancel_flow(app.settings, app.registry, BulkCancel("py.caption", tenant="bulk"), app.clock)
    )
    assert (report.cancelled, report.skipped) == (2, {})
    assert app.chains.cancel(chain) == "cancelled"
    assert app.cancel(item) == "cancelled"

    proc = worker_process(app, APP)  # runs the deliveries (and the batch's callback)
    try:
        heard = read(5)
    finally:
        kill_group(proc)
    told = sorted(e["data"]["id"] for e in heard)
    step_0 = app.chains.get(chain).steps[0].job_id
    assert told == sorted([single, *bulk, step_0, item])
    assert {e["type"] for e in heard} == {"job.cancelled"}
    assert all(app.get(j).status is JobStatus.CANCELLED for j in [single, untold, *bulk, step_0, item])
    assert next(e for e in heard if e["data"]["id"] == step_0)["data"]["chain"] == {
        "id": chain,
        "step": 0,
        "steps": 2,
    }
