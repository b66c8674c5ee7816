"""``bench/idle_trace.py``: the steps of one idle job add up to its total, each from the right exchange."""

from __future__ import annotations

from bench.harness import IDLE_GAP_S, IDLE_JITTER_S, idle_gaps
from bench.idle_trace import STEPS, summary, timeline
from bench.proxy import Exchange

T0 = 1000.0


def _ex(
    action: str, received: float, answered: float, *, latency: float = 0.010, delivered: bool = False
) -> Exchange:
    service = "dynamodb" if action in ("PutItem", "UpdateItem") else "sqs"
    return Exchange(
        service,
        action,
        T0 + received,
        T0 + received + latency,
        T0 + answered,
        T0 + answered + 0.0001,
        delivered,
    )


def test_the_steps_of_a_job_add_up_to_its_enqueue_to_start_time() -> None:
    exchanges = [
        # The long poll that delivers the job reached the emulator 303 ms before the message did.
        _ex("ReceiveMessage", -0.300, 0.112, delivered=True),
        _ex("SendMessageBatch", 0.001, 0.013),
        _ex("PutItem", 0.015, 0.027),
        _ex("ReceiveMessage", 0.1135, 20.0),  # the next poll
        _ex("UpdateItem", 0.114, 0.126),  # the claim
        _ex("UpdateItem", 0.130, 0.142),  # the completion: not part of the chain
    ]
    job = {"seq": 1, "t0": T0, "started": T0 + 0.1275, "call_s": 0.0272}
    row = timeline(job, exchanges, claims=True)
    steps = [float(row[s]) for s in STEPS]  # type: ignore[arg-type]
    assert round(sum(steps), 2) == row["total"] == 127.5
    assert steps == [1.0, 12.0, 99.0, 0.1, 1.9, 12.1, 1.4]
    assert (row["put_after_send"], row["put"], row["repoll"], row["off_tick"]) == (1.9, 12.1, 1.4, 28.5)
    # The poll's fourth check after the send was due 97 ms after it (303 ms into the poll): 2 ms late.
    assert row["tick_excess"] == 2.0
    assert row["poll_waiting"] is True and row["put_before_claim"] is True


def test_a_peer_has_no_claim_step() -> None:
    exchanges = [_ex("ReceiveMessage", -0.100, 0.050, delivered=True), _ex("SendMessage", 0.001, 0.012)]
    row = timeline({"seq": 1, "t0": T0, "started": T0 + 0.052, "call_s": 0.0121}, exchanges, claims=False)
    assert row["claim"] is None and row["to_claim"] is None
    assert round(row["to_handler"], 1) == 1.9  # type: ignore[arg-type]
    assert summary([row])["total"]["p50"] == 52.0


def test_idle_gaps_cover_the_poll_tick_evenly() -> None:
    gaps = idle_gaps(20, seed=7)
    assert gaps != sorted(gaps)  # shuffled
    slices = sorted(int((g - IDLE_GAP_S) / IDLE_JITTER_S * 20) for g in gaps)
    assert slices == list(range(20))  # one pause in each twentieth of the jitter
    assert idle_gaps(20, seed=7) == gaps  # repeatable
