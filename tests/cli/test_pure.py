"""The pure parts of the operator tools: durations, cursors, DLQ message decoding and filters."""

from __future__ import annotations

import pytest

from sqsjobs.envelope import DLQ_ERROR_CLASS, DLQ_JOB_ID, DLQ_REASON, Envelope
from sqsjobs.ops._common import parse_duration
from sqsjobs.ops.dlq import DlqFilter, decode
from sqsjobs.ops.inspect import CursorError, decode_cursor, encode_cursor


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("7d", 604_800), ("1.5h", 5400)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "yesterday", "-5m", "5 minutes", "1y"])
def test_bad_durations_say_the_accepted_form(text):
    with pytest.raises(ValueError, match="like 90s, 15m, 2h or 7d"):
        parse_duration(text)


def test_a_cursor_round_trips_and_refuses_other_listings():
    positions = [{"id": {"S": "a"}, "queue": {"S": "mail"}, "created_at": {"N": "1.5"}}, "done"]
    cursor = encode_cursor("by_queue", positions)
    assert decode_cursor(cursor, "by_queue", 2) == positions
    for index, n in (("by_status", 2), ("by_queue", 1)):
        with pytest.raises(CursorError):
            decode_cursor(cursor, index, n)
    with pytest.raises(CursorError):
        decode_cursor("not-a-cursor!!", "by_queue", 2)


def _message(body, attrs=None):
    return {
        "MessageId": "m-1",
        "ReceiptHandle": "r-1",
        "Body": body,
        "Attributes": {"SentTimestamp": "1800000000000", "ApproximateReceiveCount": "3"},
        "MessageAttributes": {k: {"DataType": "String", "StringValue": v} for k, v in (attrs or {}).items()},
    }


def test_decode_reads_the_reason_and_the_job_from_a_dead_letter():
    m = decode(
        "mail",
        "url",
        _message(
            Envelope("j-1", "mail.send").to_body(),
            {DLQ_REASON: "permanent error", DLQ_ERROR_CLASS: "PermanentError", DLQ_JOB_ID: "j-1"},
        ),
    )
    assert (m.job_id, m.job_type, m.reason, m.error_class, m.sent_at) == (
        "j-1",
        "mail.send",
        "permanent error",
        "PermanentError",
        1_800_000_000.0,
    )
    assert not m.malformed
    assert DlqFilter(error_classes=frozenset({"PermanentError"})).matches(m)
    assert not DlqFilter(types=frozenset({"orders.ok"})).matches(m)
    assert DlqFilter(job_ids=frozenset({"m-1"})).matches(m)
    assert not DlqFilter(since=1_800_000_001.0).matches(m)


def test_decode_flags_bodies_that_are_not_ours_and_redrive_moves():
    assert decode("q", "url", _message("hello")).malformed.startswith("message body is not JSON")
    moved = decode("q", "url", _message(Envelope("j-2", "t").to_body()))
    assert "redrive policy" in moved.reason and moved.job_id == "j-2"
