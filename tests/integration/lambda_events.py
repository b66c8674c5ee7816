"""SQS events for the Lambda entry point, built from messages really received from the emulator.

The records have the shape the event source mapping delivers (camelCase keys, ``messageAttributes``
with ``stringValue``/``dataType``, ``attributes`` with the system attributes), so the handler is fed
real receipt handles: its visibility changes and DLQ sends act on real messages.
"""

from __future__ import annotations

import contextlib
import json
import platform
import time
from typing import Any

from sqsjobs import App
from tests.integration.helpers import queue_url, sqs_call


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


def log_lines(text: str) -> list[dict[str, Any]]:
    """The JSON log lines in captured output (the App's logger writes one per event to stderr)."""
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out
