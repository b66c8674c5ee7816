"""Real Scheduler fires, end to end on MiniStack: each occurrence becomes exactly one job.

MiniStack fires from a 10 s tick, deletes at() schedules with ActionAfterCompletion=DELETE, and
leaves ``<aws.scheduler.scheduled-time>`` unsubstituted, so the worker derives each occurrence
from the message's SentTimestamp. Its first ``rate(1 minute)`` fire comes 60-70 s after the
schedule is created: this test waits for exactly that one fire (and does everything else
meanwhile), which makes it the suite's slowest schedule test at about 70 s.
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime

import pytest

from sqsjobs import App, JobNotFound, JobStatus, SchedulerError
from sqsjobs import envelope as env
from sqsjobs._aws import Call, one
from sqsjobs.delivery import DELETE
from sqsjobs.runtime.execution import Execution
from sqsjobs.schedules.plugin import idempotency_key
from sqsjobs.schedules.sync import apply_flow, plan_flow
from sqsjobs.store.codec import idempotent_job_id
from sqsjobs.testing import work_until
from sqsjobs.transport import sqs
from tests.integration.helpers import depth, queue_url, send_raw, sqs_call

ROLE = "arn:aws:iam::000000000000:role/sqsjobs-scheduler"
#: MiniStack's first rate(1 minute) fire: 60 s after creation, rounded up to its 10 s tick, plus slack.
RATE_FIRE_DEADLINE_S = 90


def succeeded(app: App, job_id: str) -> bool:
    try:
        return app.get(job_id).status is JobStatus.SUCCEEDED
    except JobNotFound:
        return False


def count_jobs(app: App) -> int:
    # Job records only: a fire also writes its schedule's item (schedule#<name>, no status).
    scan = {
        "TableName": app.settings.table_name,
        "Select": "COUNT",
        "FilterExpression": "attribute_exists(#s)",
        "ExpressionAttributeNames": {"#s": "status"},
    }
    return int(app.run(one(Call("dynamodb", "scan", scan)))["Count"])


def receive_fire(app: App, deadline: float) -> sqs.Delivery:
    """Take the next fire off the queue by hand, so the test can deliver it twice."""
    url = queue_url(app)
    while time.time() < deadline:
        wait = max(1, min(20, int(deadline - time.time())))
        response = sqs_call(
            app,
            "receive_message",
            QueueUrl=url,
            MaxNumberOfMessages=1,
            WaitTimeSeconds=wait,
            VisibilityTimeout=30,
            MessageSystemAttributeNames=["All"],
        )
        for delivery in sqs.deliveries("default", url, response):
            return delivery
    raise TimeoutError("no rate fire arrived")


def test_each_scheduler_fire_becomes_exactly_one_job(ministack_url, make_app):
    app = make_app(ministack_url, scheduler_role_arn=ROLE)
    runs: list[str] = []

    @app.job("tick.run")
    def tick(payload: dict, ctx):
        runs.append(payload["which"])

    app.provision()
    once_at = datetime.fromtimestamp(math.ceil(time.time()) + 3, UTC).replace(tzinfo=None)
    app.schedule("tick.every-minute", rate="rate(1 minute)", job="tick.run", payload={"which": "rate"})
    app.schedule("tick.once", at=once_at, job="tick.run", payload={"which": "once"})
    created = time.time()
    app.run(apply_flow(app, app.run(plan_flow(app, now=app.clock.now()))))

    # 1. The one-time fire (first tick after its time) becomes a job keyed by its own time.
    once_id = idempotent_job_id(
        "tick.run", idempotency_key("tick.once", once_at.replace(tzinfo=UTC).timestamp())
    )
    work_until(app, lambda: succeeded(app, once_id), timeout_s=30)
    assert runs == ["once"]
    with pytest.raises(SchedulerError, match="ResourceNotFound"):  # ActionAfterCompletion=DELETE
        app.run(
            one(
                Call(
                    "scheduler",
                    "get_schedule",
                    {"Name": "tick.once", "GroupName": app.settings.schedule_group},
                )
            )
        )

    # 2. Scheduler delivering that fire again (at least once) makes no second job.
    send_raw(app, env.Fire("tick.once", env.SCHEDULED_TIME, "tick.run", {"which": "once"}).to_body())
    work_until(app, lambda: depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}, timeout_s=30)
    assert runs == ["once"]
    assert count_jobs(app) == 1

    # 3. The rate fire, taken by hand: a worker enqueues its job and dies before deleting the fire...
    delivery = receive_fire(app, created + RATE_FIRE_DEADLINE_S)
    fire = env.parse(delivery.body)
    assert isinstance(fire, env.Fire) and fire.schedule == "tick.every-minute"
    assert (
        fire.at == env.SCHEDULED_TIME
    )  # MiniStack leaves the placeholder: the slot comes from SentTimestamp

    async def crash_after_enqueue() -> None:
        assert await Execution(app, "crashed-worker").handle(delivery) == DELETE
        await app.aclose()

    asyncio.run(crash_after_enqueue())
    sqs_call(
        app,
        "change_message_visibility",
        QueueUrl=delivery.queue_url,
        ReceiptHandle=delivery.receipt_handle,
        VisibilityTimeout=0,
    )
    # ...so the same fire comes back to a live worker, which finds the occurrence's job already there.
    slot = math.floor(delivery.sent_at / 60) * 60
    rate_id = idempotent_job_id("tick.run", idempotency_key("tick.every-minute", slot))
    work_until(
        app,
        lambda: succeeded(app, rate_id) and depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0},
        timeout_s=30,
    )
    assert runs == ["once", "rate"]
    assert count_jobs(app) == 2
    assert (
        app.get(rate_id).idempotency_key
        == f"schedule:tick.every-minute@{datetime.fromtimestamp(slot, UTC):%Y-%m-%dT%H:%M:%SZ}"
    )
