"""SQS events for the Lambda entry point, built from messages really received from the emulator.

The records have the shape the event source mapping delivers (camelCase keys, ``messageAttributes``
with ``stringValue``/``dataType``, ``attributes`` with the system attributes), so the handler is fed
real receipt handles: its visibility changes and DLQ sends act on real messages.
"""

from __future__ import annotations

import contextlib
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sqsjobs import App
from tests.integration.helpers import queue_url, sqs_call, worker_env


def host_arch() -> str:
    """This machine's architecture in Lambda's words (MiniStack runs the zip here)."""
    return {"aarch64": "arm64"}.get(platform.machine(), platform.machine())


class FakeContext:
    """The Lambda context: ``start_ms`` for the first question (the invocation start), ``then_ms`` after."""

    def __init__(self, start_ms: int = 60_000, then_ms: int | None = None) -> None:
        self._answers = [start_ms]
        self._then = start_ms if then_ms is None else then_ms
        self.aws_request_id = "req-test"
        self.function_name = "sqsjobs-test"

    def get_remaining_time_in_millis(self) -> int:
        return self._answers.pop() if self._answers else self._then


def receive(app: App, n: int, *, queue: str = "default", timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Receive exactly ``n`` messages (long-polling until they are all there)."""
    url = queue_url(app, queue)
    got: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        response = sqs_call(
            app,
            "receive_message",
            QueueUrl=url,
            MaxNumberOfMessages=min(10, n - len(got)),
            WaitTimeSeconds=1,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        for m in response.get("Messages", []):
            got[m["MessageId"]] = m
    assert len(got) == n, f"received {len(got)} of {n} messages"
    return list(got.values())


def event_from(app: App, messages: list[dict[str, Any]], *, queue: str = "default") -> dict[str, Any]:
    """Wrap received messages as the ESM would."""
    url = queue_url(app, queue)
    arn = sqs_call(app, "get_queue_attributes", QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": dict(m.get("Attributes", {})),
                "messageAttributes": {
                    name: {
                        "stringValue": value.get("StringValue"),
                        "binaryValue": value.get("BinaryValue"),
                        "stringListValues": [],
                        "binaryListValues": [],
                        "dataType": value["DataType"],
                    }
                    for name, value in m.get("MessageAttributes", {}).items()
                },
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": app.settings.region,
            }
            for m in messages
        ]
    }


def failed_ids(response: dict[str, Any]) -> set[str]:
    return {f["itemIdentifier"] for f in response["batchItemFailures"]}


def settle(app: App, event: dict[str, Any], response: dict[str, Any], *, queue: str = "default") -> None:
    """The event source mapping's part after an invocation: delete each message not reported failed.

    Without it a message the handler finished comes back after its visibility timeout, as it would
    on AWS if the function's answer were lost: a test that invokes twice would get it again.
    """
    failed = failed_ids(response)
    url = queue_url(app, queue)
    for record in event["Records"]:
        if record["messageId"] not in failed:
            sqs_call(app, "delete_message", QueueUrl=url, ReceiptHandle=record["receiptHandle"])


def log_lines(text: str) -> list[dict[str, Any]]:
    """The JSON log lines in captured output (the App's logger writes one per event to stderr)."""
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def invocation_process(
    app: App, app_path: str, event: dict[str, Any], folder: Path, *, start_ms: int = 120_000
) -> subprocess.Popen[bytes]:
    """One invocation of the real entry point (``lambda_handlers.sqs_worker``) in a process of its own.

    For a test that loses the invocation (SIGKILL its session, as Lambda ends a sandbox at its
    timeout): the event goes through ``folder/event.json``, and the response, if it returns, is
    written to ``folder/response.json``.
    """
    (folder / "event.json").write_text(json.dumps(event))
    return subprocess.Popen(
        [sys.executable, "-m", __name__, str(folder), str(start_ms)],
        env=worker_env(app, SQSJOBS_APP=app_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _invoke(folder: Path, start_ms: int) -> None:
    from sqsjobs.runtime.lambda_handlers import sqs_worker

    event = json.loads((folder / "event.json").read_text())
    response = sqs_worker(event, FakeContext(start_ms=start_ms))
    (folder / "response.json").write_text(json.dumps(response))


if __name__ == "__main__":
    _invoke(Path(sys.argv[1]), int(sys.argv[2]))
