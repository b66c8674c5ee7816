"""The one rule for waits past a message's expiry (``sqsjobs.transport.lifespan``), case by case.

The rule is pure; tests/integration/test_rearm_retention.py shows it from outside (real workers,
a 60 s retention). Here each branch: a re-arm the message outlives is kept, a young message is
re-armed to the end of its life, an old one becomes a fresh copy whose delay SQS and the retention
allow, and a new message's delay is capped by the retention.
"""

from __future__ import annotations

import pytest

from sqsjobs import Settings
from sqsjobs.delivery import DELETE, Ack, Delivery
from sqsjobs.transport import lifespan

SENT = 1_000_000.0


def settings(retention_s: int = 60, visibility_s: int = 2) -> Settings:
    return Settings(app_name="t", message_retention_s=retention_s, visibility_timeout_s=visibility_s)


def delivery(sent_at: float = SENT, queue_url: str = "https://sqs/q") -> Delivery:
    return Delivery("default", queue_url, "m", "rh", "{}", 1, sent_at)


def test_a_rearm_within_the_messages_life_is_left_as_it_is():
    ack = Ack("rearm", delay_s=50)
    assert lifespan.keep_witness(ack, delivery(), SENT + 5, settings()) is ack


@pytest.mark.parametrize("ack", [DELETE, Ack("resend", delay_s=500), Ack("release")])
def test_only_a_rearm_is_judged(ack):
    assert lifespan.keep_witness(ack, delivery(), SENT + 59, settings()) is ack


def test_a_young_message_that_cannot_wait_so_long_is_rearmed_to_the_end_of_its_life():
    # 58 s of life in all (60 s retention less a 2 s visibility timeout), 48 s of it left
    got = lifespan.keep_witness(Ack("rearm", delay_s=90), delivery(), SENT + 10, settings())
    assert got == Ack("rearm", delay_s=48)


def test_an_old_message_is_replaced_by_a_fresh_copy_delayed_by_the_wait():
    got = lifespan.keep_witness(Ack("rearm", delay_s=10), delivery(), SENT + 55, settings())
    assert got == Ack("resend", delay_s=10)


def test_a_fresh_copys_delay_never_outlives_the_copy():
    got = lifespan.keep_witness(Ack("rearm", delay_s=3_000), delivery(), SENT + 50, settings())
    assert got == Ack("resend", delay_s=58)


def test_at_the_default_retention_a_paused_job_is_resent_once_in_fourteen_days():
    s = Settings(app_name="t")
    day = 86_400.0
    assert lifespan.keep_witness(Ack("rearm", delay_s=60), delivery(), SENT + 13 * day, s).kind == "rearm"
    resent = lifespan.keep_witness(Ack("rearm", delay_s=60), delivery(), SENT + 14 * day - 40, s)
    assert resent == Ack("resend", delay_s=60)


def test_a_new_messages_delay_is_capped_by_the_retention():
    assert lifespan.delay_cap_s(settings()) == 58
    assert lifespan.delay_cap_s(Settings(app_name="t")) == 900


# ── a serialize key's head waiting in place (runtime/levels.py) ─────────────────────────────
HOUR = 3_600.0


def test_a_wait_is_marked_so_a_keys_head_can_wait_in_place_and_near_the_redrive_limit_too():
    assert lifespan.waiting(delivery(), 5, redrive=13) == Ack("rearm", delay_s=5, waits=True)
    late = Delivery("default", "https://sqs/q.fifo", "m", "rh", "{}", 10, SENT)
    assert lifespan.waiting(late, 5, redrive=13) == Ack("resend", delay_s=5, waits=True)


def test_only_a_fifo_message_holds_a_place_in_a_key():
    assert lifespan.in_key(delivery(queue_url="https://sqs/t-device.fifo"))
    assert not lifespan.in_key(delivery()) and not lifespan.in_key(None)


@pytest.mark.parametrize("kind", ["rearm", "resend"])
def test_a_waiting_head_stays_in_place_within_the_12_hour_cap_whatever_its_receive_count(kind):
    ack = Ack(kind, delay_s=60, waits=True)  # type: ignore[arg-type]
    now = SENT + 11 * HOUR
    assert lifespan.in_place(ack, now=now, received=SENT, visibility_timeout_s=30, stopping=False) is None


def test_near_the_12_hour_cap_a_waiting_head_is_let_go_still_the_head_and_a_resend_stays_one():
    now = SENT + 12 * HOUR - 100  # the wait would end within two visibility timeouts of the cap
    rearm, resend = Ack("rearm", delay_s=60, waits=True), Ack("resend", delay_s=60, waits=True)
    assert lifespan.in_place(rearm, now=now, received=SENT, visibility_timeout_s=30, stopping=False) == Ack(
        "release"
    )
    assert (
        lifespan.in_place(resend, now=now, received=SENT, visibility_timeout_s=30, stopping=False) is resend
    )


def test_a_stopping_worker_lets_its_waiting_head_go_and_any_other_ack_is_applied_as_it_is():
    wait = Ack("rearm", delay_s=1, waits=True)
    assert lifespan.in_place(wait, now=SENT, received=SENT, visibility_timeout_s=30, stopping=True) == Ack(
        "release"
    )
    retry = Ack("rearm", delay_s=60)  # a retry's backoff: the message's own re-arm keeps the group waiting
    assert lifespan.in_place(retry, now=SENT, received=SENT, visibility_timeout_s=30, stopping=False) is retry
