"""The pure parts of the operator tools: durations, cursors, DLQ message decoding and filters."""

from __future__ import annotations

import pytest

from sqsjobs.envelope import DLQ_ERROR_CLASS, DLQ_JOB_ID, DLQ_REASON, Envelope
from sqsjobs.job import JobStatus
from sqsjobs.ops._common import parse_duration
from sqsjobs.ops.dlq import DlqFilter
from sqsjobs.ops.inspect import (
    DEFAULT_SCAN_WINDOW_S,
    CursorError,
    ListQuery,
    decode_cursor,
    encode_cursor,
    plan,
)
from sqsjobs.transport.dead_letters import decode


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


def test_a_cursor_round_trips_with_its_window_and_refuses_other_listings():
    positions = [{"id": {"S": "a"}, "attn": {"S": "dead#07"}, "due": {"N": "1.5"}}, "done"]
    cursor = encode_cursor("dead|mail", positions, 1_800_000_000.0)
    assert decode_cursor(cursor, "dead|mail", 2) == (positions, 1_800_000_000.0)
    for listing, n in (("dead|orders", 2), ("dead|mail", 1), ("scan|mail", 2)):
        with pytest.raises(CursorError):
            decode_cursor(cursor, listing, n)
    for junk in ("not-a-cursor!!", "", encode_cursor("dead|mail", positions)[:-4]):
        with pytest.raises(CursorError):
            decode_cursor(junk, "dead|mail", 2)


def test_each_listing_has_its_own_cursor_identity():
    now = 1_800_000_000.0
    dead = plan(ListQuery(status=JobStatus.DEAD, queue="mail"), now)
    assert (dead.index, dead.since, len(dead.partitions)) == ("attention", None, 32)
    assert dead.filters == {"status": "dead", "queue": "mail"}
    scan = plan(ListQuery(queue="mail"), now)
    assert (scan.index, scan.since, scan.partitions) == ("scan", now - DEFAULT_SCAN_WINDOW_S, [])
    keys = {
        plan(q, now).key
        for q in (
            ListQuery(status=JobStatus.DEAD, queue="mail"),
            ListQuery(status=JobStatus.DEAD),
            ListQuery(queue="mail"),
            ListQuery(queue="mail", since_s=3600),
            ListQuery(type="mail"),
            ListQuery(),
        )
    }
    assert len(keys) == 6


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
