"""The error signature dead jobs are grouped by: what varies per job goes, the reason stays."""

from __future__ import annotations

import pytest

from sqsjobs.ops.signatures import MAX_CHARS, normalise, signature


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("smtp refused ann@example.com", "smtp refused bob.smith+x@mail.example.org"),
        ("order 8812 not found", "order 9034 not found"),
        ("job 3f2c9a1b7d8e4f60a1b2c3d4e5f60718 failed", "job 0a9b8c7d6e5f40312233445566778899 failed"),
        ("user 123e4567-e89b-12d3-a456-426614174000 gone", "user 00000000-0000-4000-8000-000000000000 gone"),
        ("GET https://api.example.com/v1/orders/88?x=1 timed out", "GET http://10.0.0.7/health timed out"),
        ("connect to 10.1.2.3:5432 refused", "connect to 192.168.0.9:6432 refused"),
        ("took 3.5s, limit 2s", "took 12s, limit 2.25s"),
        ("retry   in\n 10 s", "retry in 7 s"),
    ],
)
def test_messages_that_differ_only_in_what_a_handler_filled_in_share_a_signature(one, other):
    assert signature("ValueError", one) == signature("ValueError", other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("smtp refused ann@example.com", "smtp timed out ann@example.com"),
        ("'user_id'", "'order_id'"),  # a KeyError's key is the reason
        ("api v2 refused", "api v3 refused"),  # a digit inside a word is part of the word
        ("deadbeef", "cafebabe"),  # words made of hex letters stay words
    ],
)
def test_messages_that_differ_in_their_reason_do_not(one, other):
    assert signature("KeyError", one) != signature("KeyError", other)


def test_the_class_is_part_of_the_signature_and_an_empty_message_is_the_class_alone():
    assert signature("ValueError", "bad 1") != signature("TypeError", "bad 1")
    assert signature("TimeoutError", "  ") == "TimeoutError"
    assert signature("ValueError", "order 5 not found") == "ValueError: order <n> not found"


def test_a_huge_message_yields_a_bounded_key():
    text = normalise("x" * 10_000 + " " + "word " * 1_000)
    assert len(text) == MAX_CHARS and text.endswith("…")
