"""Every queue ``provision`` makes keeps its messages ``message_retention_s`` (14 days), every DLQ 14 days.

SQS's default is 4 days; a message is gone that long after its first send however often it was
re-armed, so a retry span, a pause or a backlog longer than that would leave a record saying the job
is on its way with nothing to bring it. Read back from the emulator, as an operator would.
"""

from __future__ import annotations

from sqsjobs.config import MAX_MESSAGE_RETENTION_S
from tests.integration.helpers import sqs_call

ROUTED = {"priority_queues": {"work"}, "serialized_queues": {"device"}}


def _retention_by_queue(app) -> dict[str, int]:
    urls = sqs_call(app, "list_queues", QueueNamePrefix=app.settings.queue_prefix)["QueueUrls"]
    return {
        url.rsplit("/", 1)[-1]: int(
            sqs_call(app, "get_queue_attributes", QueueUrl=url, AttributeNames=["MessageRetentionPeriod"])[
                "Attributes"
            ]["MessageRetentionPeriod"]
        )
        for url in urls
    }


def test_every_queue_level_fifo_queue_and_dlq_keeps_messages_14_days(ministack_url, make_app):
    app = make_app(ministack_url, **ROUTED)
    for queue in ("work", "device"):
        app.job(f"{queue}.run", queue=queue)(lambda ctx: None)

    app.provision(["default"])

    retention = _retention_by_queue(app)
    # default, work (+high, +low), device (+.fifo), their DLQs and device's FIFO backstop
    assert len(retention) == 10, sorted(retention)
    assert set(retention.values()) == {MAX_MESSAGE_RETENTION_S}, retention


def test_a_shorter_retention_is_the_queues_and_the_dlqs_keep_the_maximum(ministack_url, make_app):
    # GIVEN a deployment made with SQS's default retention (4 days), as provision made it before
    app = make_app(ministack_url, **ROUTED, message_retention_s=4 * 86_400)
    app.job("device.run", queue="device")(lambda ctx: None)
    app.provision()
    # WHEN it is provisioned again with a setting of one hour
    app.configure(message_retention_s=3600)
    app.provision()

    # THEN every queue a job's message travels in keeps it an hour, and every DLQ 14 days
    retention = _retention_by_queue(app)
    dlqs = {name for name in retention if "-dlq" in name}
    assert len(dlqs) == 2 and len(retention) == 4, sorted(retention)
    assert {n: r for n, r in retention.items() if n not in dlqs} == dict.fromkeys(set(retention) - dlqs, 3600)
    assert {retention[n] for n in dlqs} == {MAX_MESSAGE_RETENTION_S}
