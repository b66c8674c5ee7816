"""Small helpers shared by the integration tests: raw SQS access and queue inspection."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from sqsjobs import App
from sqsjobs._aws import Call, one
from sqsjobs.transport.queues import dlq_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs.runtime.worker import Worker


def worker_env(app: App, **env: str) -> dict[str, str]:
    """The environment of a worker (or producer) process on ``app``'s endpoint, with its short timings."""
    return {
        **os.environ,
        "TEST_APP_NAME": app.name,
        "SQSJOBS_ENDPOINT_URL": str(app.settings.endpoint_url),
        "SQSJOBS_LEASE_S": str(app.settings.lease_s),
        "SQSJOBS_VISIBILITY_TIMEOUT_S": str(app.settings.visibility_timeout_s),
        "SQSJOBS_RECEIVE_WAIT_S": "1",
        **env,
    }


def worker_process(
    app: App, app_path: str, *, concurrency: int = 4, queues: str | None = None, **env: str
) -> subprocess.Popen[bytes]:
    """A real ``sqsjobs worker`` process of ``app_path`` on ``app``'s endpoint, in a session of its own."""
    argv = [sys.executable, "-m", "sqsjobs", "worker", "--app", app_path, "--concurrency", str(concurrency)]
    return subprocess.Popen(
        argv + (["--queues", queues] if queues else []),
        env=worker_env(app, **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def kill_group(*procs: subprocess.Popen[bytes]) -> None:
    """SIGKILL each process's session (the worker and anything it started), as a crash would."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def job_write_units(app: App, worker: Worker, part: str | None = None) -> float:
    """The write units ``app`` consumed, less its in-process worker's registry item (a cost per worker
    process, not per job: docs/operations.md, "Workers"). Needs ``measure_capacity``."""
    registry = sum(u for p, u in worker.presence.capacity.items() if part is None or p == part)
    return app.requests.units("write", part) - registry


def sqs_call(app: App, operation: str, **params: Any) -> Any:
    return app.run(one(Call("sqs", operation, params)))


def queue_url(app: App, queue: str = "default", dlq: bool = False) -> str:
    urls = app.run(app.queue_urls.flow([queue]))
    return str(urls[dlq_key(queue) if dlq else queue])


def depth(app: App, queue: str = "default", dlq: bool = False) -> dict[str, int]:
    attrs = sqs_call(
        app,
        "get_queue_attributes",
        QueueUrl=queue_url(app, queue, dlq),
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return {
        "visible": int(attrs["ApproximateNumberOfMessages"]),
        "in_flight": int(attrs["ApproximateNumberOfMessagesNotVisible"]),
        "delayed": int(attrs["ApproximateNumberOfMessagesDelayed"]),
    }


def send_raw(app: App, body: str, queue: str = "default") -> None:
    sqs_call(app, "send_message", QueueUrl=queue_url(app, queue), MessageBody=body)


def receive_dlq(app: App, queue: str = "default", n: int = 10) -> list[dict[str, Any]]:
    response = sqs_call(
        app,
        "receive_message",
        QueueUrl=queue_url(app, queue, dlq=True),
        MaxNumberOfMessages=n,
        WaitTimeSeconds=1,
        MessageAttributeNames=["All"],
        VisibilityTimeout=30,
    )
    return list(response.get("Messages", []))


def attr(message: dict[str, Any], name: str) -> str:
    return str(message["MessageAttributes"][name]["StringValue"])


#: The longest pause between two polls of ``wait_until`` (reached after 4 s of waiting).
LONG_WAIT_EVERY_S = 0.2


def wait_until(
    condition: Callable[[], object], timeout_s: float, what: str, *, every_s: float = 0.05
) -> float:
    """Poll ``condition`` until it is true; fail naming ``what`` after ``timeout_s``.

    Returns the wait. Polls every ``every_s`` at first, then every twentieth of the time waited so
    far, up to ``LONG_WAIT_EVERY_S``: a wait is seen at most 5 % (and 0.2 s) late. Each poll is an
    emulator request or two (about 2 ms of CPU, client and server), and the suite's long waits —
    60 s retentions, leases, sweeps — polled 20 times a second while the suite is CPU-bound.
    A condition that reads many records polls less often (``every_s``) so the emulator serves the
    workers, not the test.
    """
    began = time.monotonic()
    while not condition():
        waited = time.monotonic() - began
        assert waited < timeout_s, f"{what}: not within {timeout_s} s"
        time.sleep(max(every_s, min(LONG_WAIT_EVERY_S, waited / 20)))
    return time.monotonic() - began


def copy_messages(app: App, expected: int, copies: int) -> list[dict[str, Any]]:
    """Send ``copies`` extra copies of each of the queue's ``expected`` messages straight into it, as
    SQS may deliver them; the originals are made visible again at once. Returns the originals."""
    url = queue_url(app)
    originals: list[dict[str, Any]] = []
    while len(originals) < expected:
        originals += sqs_call(
            app,
            "receive_message",
            QueueUrl=url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=30,
            WaitTimeSeconds=20,
        ).get("Messages", [])
    bodies = [m["Body"] for m in originals for _ in range(copies)]
    for i in range(0, len(bodies), 10):
        entries = [{"Id": str(n), "MessageBody": body} for n, body in enumerate(bodies[i : i + 10])]
        sqs_call(app, "send_message_batch", QueueUrl=url, Entries=entries)
    show_again(app, url, originals)
    return originals


def show_again(app: App, url: str, messages: list[dict[str, Any]], after_s: int = 0) -> None:
    """Make received ``messages`` visible again (``after_s`` from now)."""
    for m in messages:
        sqs_call(
            app,
            "change_message_visibility",
            QueueUrl=url,
            ReceiptHandle=m["ReceiptHandle"],
            VisibilityTimeout=after_s,
        )


#: Worker and sweeper settings for a job that outlives its message: queues that keep a message
#: 60 s (SQS's least) and a sweeper that looks every 2 s.
SHORT_RETENTION = {
    "SQSJOBS_MESSAGE_RETENTION_S": "60",
    "SQSJOBS_SWEEP_INTERVAL_S": "2",
    "SQSJOBS_STALE_AFTER_S": "5",
}


def short_retention_app(ministack_url: str, make_app: Callable[..., App], handlers: App) -> App:
    """A provisioned App with ``handlers``' types whose queues keep a message 60 s."""
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2, message_retention_s=60)
    app.registry.include(handlers.registry)
    app.provision()
    return app


def spawn(app: App, app_path: str, *argv: str, **env: str) -> subprocess.Popen[bytes]:
    """A real ``sqsjobs <argv> --app app_path`` process on ``app``'s endpoint, in a session of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", *argv, "--app", app_path],
        env=worker_env(app, **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def held_item(app: App, job_id: str) -> dict[str, Any]:
    """The job's record once no message is left for it (a held record's witness is its attention entry)."""
    wait_until(lambda: depth(app) == {"visible": 0, "in_flight": 0, "delayed": 0}, 30, "message deleted")
    return dict(
        app.clients.boto3.get("dynamodb").get_item(
            TableName=app.settings.table_name, Key={"id": {"S": job_id}}, ConsistentRead=True
        )["Item"]
    )
