"""``python -m bench.idle_trace``: where an idle job's enqueue→handler-start time goes, step by step.

The harness's idle phase (``bench/harness.py``) gives one figure per job; this traces the same
jobs through the same proxy and splits that figure at each request the proxy sees. One clock
(``time.time()``) for all: the producer stamps the enqueue call's start into the payload, the
proxy stamps every exchange (``AwsProxy.trace``), the handler stamps its first line
(``bench/marker.py``). Only one job is in flight at a time, so the requests between one job's
enqueue and the next job's belong to it.

The chain, per job (each step ends where the next begins, so the steps add up to the total)::

  enqueue call ─▶ SendMessage at proxy ─▶ SendMessage answered ─▶ ReceiveMessage answered
     [before send]        [send]                 [wake-up]              │ [relay]
  ─▶ ReceiveMessage back at the worker ─▶ claim UpdateItem at proxy ─▶ claim answered ─▶ handler
                             [to claim]            [claim]         [to handler]

For the peers (no claim) the last three steps are one, ``to handler``. Beside the chain: the
producer's PutItem (sent after the message: it overlaps the worker's side), how long the worker
took to have a long poll waiting again after the one that delivered, and whether a poll was
already waiting when the message arrived (if not, the wake-up includes the worker's absence).

MiniStack answers a waiting ReceiveMessage by re-checking the queue every 100 ms, so ``wake-up``
is 0-100 ms (50 on average) plus the emulator's own time, for every framework alike; AWS wakes a
poll at once. The gap between jobs is spread evenly over that tick, as in the harness
(``idle_gaps``), and ``off_tick`` (the total less the wake-up) is the figure that tick leaves alone.

Run: ``make bench-venv .venv-ministack/bin/ministack`` once, then
``PYTHONPATH=. SQSJOBS_MINISTACK_BIN=$PWD/.venv-ministack/bin/ministack .venv/bin/python -m
bench.idle_trace --frameworks 'sqsjobs c32,dramatiq t8' --k 40 --latency-ms 10``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import procs
from bench.frameworks import Framework, select
from bench.harness import SETTLE_S, Bench, idle_gaps, launch

if TYPE_CHECKING:
    from collections.abc import Iterable

    from bench.proxy import Exchange

SENDS = ("SendMessage", "SendMessageBatch")
CLAIMS = ("UpdateItem", "BatchExecuteStatement")
#: MiniStack re-checks the queue for a waiting ReceiveMessage this often (``ministack/services/sqs.py``).
POLL_TICK_S = 0.1
#: The chain's steps, in order, and what each covers.
STEPS = {
    "before_send": "enqueue call start → SendMessage at the proxy (producer work before the send)",
    "send": "SendMessage at the proxy → its answer from the emulator (the added latency + the send)",
    "wake_up": "SendMessage answered → the delivering ReceiveMessage answered (emulator poll tick)",
    "relay": "ReceiveMessage answered → written back to the worker",
    "to_claim": "ReceiveMessage back → claim UpdateItem at the proxy (worker work before the claim)",
    "claim": "claim at the proxy → written back (the added latency + the emulator's UpdateItem)",
    "to_handler": "claim (peers: the receive) back → handler's first line (worker work before the run)",
}
#: Figures beside the chain.
EXTRAS = {
    "total": "enqueue call start → handler's first line",
    "off_tick": "total less wake-up: what each framework adds to the emulator's poll tick",
    "tick_excess": "wake-up less the time left on a 100 ms grid from the poll's arrival (late checks)",
    "enqueue_call": "the producer's whole enqueue call",
    "put_after_send": "SendMessage back → PutItem at the proxy (producer work between the two)",
    "put": "PutItem at the proxy → written back",
    "claim_emulator": "the emulator's own time answering the claim",
    "repoll": "the delivering ReceiveMessage back → the worker's next ReceiveMessage at the proxy",
}


def _first(exchanges: Iterable[Exchange], action: tuple[str, ...], after: float) -> Exchange | None:
    return next((e for e in exchanges if e.action in action and e.received >= after), None)


def _tick_left(receive: Exchange, send: Exchange) -> float:
    """Seconds from the send's answer to the next 100 ms check of the poll that delivered it."""
    waited = send.answered - receive.forwarded
    return (-waited) % POLL_TICK_S if waited > 0 else 0.0


def timeline(
    job: dict[str, float], exchanges: list[Exchange], *, claims: bool
) -> dict[str, float | bool | None]:
    """One job's steps in ms (None where a request was not seen), from the exchanges in its window."""
    t0, started = job["t0"], job["started"]
    send = _first(exchanges, SENDS, t0)
    if send is None:
        raise RuntimeError(f"job {job['seq']}: no SendMessage seen after its enqueue call")
    receive = next(
        (
            e
            for e in exchanges
            if e.action == "ReceiveMessage" and e.delivered and e.returned >= send.received
        ),
        None,
    )
    if receive is None:
        raise RuntimeError(f"job {job['seq']}: no ReceiveMessage delivered it")
    # A claim that met other ready writes leaves with them in one BatchExecuteStatement.
    claim = _first(exchanges, CLAIMS, receive.returned) if claims else None
    put = _first(exchanges, ("PutItem",), send.received)
    repoll = _first(exchanges, ("ReceiveMessage",), receive.returned)
    after_receive = claim.returned if claim else receive.returned

    def ms(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round((b - a) * 1000, 2)

    row: dict[str, float | bool | None] = {
        "before_send": ms(t0, send.received),
        "send": ms(send.received, send.answered),
        "wake_up": ms(send.answered, receive.answered),
        "relay": ms(receive.answered, receive.returned),
        "to_claim": ms(receive.returned, claim.received) if claim else None,
        "claim": ms(claim.received, claim.returned) if claim else None,
        "to_handler": ms(after_receive, started),
        "total": ms(t0, started),
        "off_tick": round((started - t0 - (receive.answered - send.answered)) * 1000, 2),
        "tick_excess": round((receive.answered - send.answered - _tick_left(receive, send)) * 1000, 2),
        "enqueue_call": round(job["call_s"] * 1000, 2),
        "put_after_send": ms(send.returned, put.received) if put else None,
        "put": ms(put.received, put.returned) if put else None,
        "claim_emulator": ms(claim.forwarded, claim.answered) if claim else None,
        "repoll": ms(receive.returned, repoll.received) if repoll else None,
        # A long poll was at the emulator before the message was: the wake-up is the tick alone.
        "poll_waiting": receive.forwarded <= send.answered,
        # The producer's PutItem reached the emulator before the claim did (else the claim created it).
        "put_before_claim": (put.forwarded <= claim.forwarded) if put and claim else None,
    }
    return row


def trace(
    bench: Bench, fw: Framework, *, latency_ms: float, k: int, warmup: int, seq0: int
) -> list[dict[str, Any]]:
    """Start the worker, send ``warmup + k`` idle jobs one at a time, return the last ``k`` timelines."""
    run = launch(bench, fw, latency_ms=latency_ms, tag=f"t{seq0}")
    worker, worker_log, producer = run.worker, run.worker_log, run.producer
    jobs: list[dict[str, float]] = []
    try:
        bench.wait_receive((worker, worker_log))
        bench.proxy.trace(True)
        for i, gap in enumerate(idle_gaps(warmup, seed=seq0) + idle_gaps(k, seed=seq0 + 1)):
            time.sleep(gap)
            seq = seq0 + i
            answer = producer.command(f"one {seq}")
            if not bench.markers.wait(range(seq, seq + 1), timeout_s=30.0):
                raise RuntimeError(f"{fw.label}: idle job {seq} never started; see {worker_log}")
            start = bench.markers.starts[seq]
            jobs.append(
                {"seq": seq, "t0": start.enqueued_at, "started": start.started_at, "call_s": answer["call_s"]}
            )
        time.sleep(SETTLE_S)
        exchanges = bench.proxy.trace(False)
    finally:
        procs.stop(worker)
        producer.close()
    rows = []
    for i, job in enumerate(jobs):
        end = jobs[i + 1]["t0"] if i + 1 < len(jobs) else float("inf")
        # A long poll that delivers this job was sent before it: the window goes by the answer.
        window = [e for e in exchanges if e.returned >= job["t0"] and e.received < end]
        rows.append({"seq": job["seq"], **timeline(job, window, claims=fw.kind == "sqsjobs")})
    return rows[warmup:]


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """p50 / p95 / mean of every numeric step; shares of the booleans."""
    out: dict[str, dict[str, float]] = {}
    for key in [*STEPS, *EXTRAS]:
        values = sorted(float(r[key]) for r in rows if r.get(key) is not None)
        if values:
            out[key] = {
                "p50": round(statistics.median(values), 1),
                "p95": round(values[min(len(values) - 1, round(0.95 * (len(values) - 1)))], 1),
                "mean": round(statistics.fmean(values), 1),
            }
    for key in ("poll_waiting", "put_before_claim"):
        flags = [bool(r[key]) for r in rows if r.get(key) is not None]
        if flags:
            out[key] = {"share": round(sum(flags) / len(flags), 2)}
    return out


def markdown(results: dict[str, dict[str, Any]], latency_ms: float, k: int) -> str:
    """One table: steps as rows, frameworks as columns (p50 / p95 ms)."""
    labels = list(results)
    lines = [
        f"Idle enqueue→start, traced at the proxy (+{latency_ms:g} ms per request, {k} jobs each; p50 / p95 ms)",
        "",
        "| step | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for key, what in {**STEPS, **EXTRAS}.items():
        cells = []
        for label in labels:
            fig = results[label]["summary"].get(key)
            cells.append(f"{fig['p50']:g} / {fig['p95']:g}" if fig else "-")
        lines.append(f"| {key}: {what} | " + " | ".join(cells) + " |")
    for key, what in (
        ("poll_waiting", "a long poll was waiting when the message arrived"),
        ("put_before_claim", "the PutItem reached the emulator before the claim"),
    ):
        cells = [
            f"{results[label]['summary'][key]['share']:.0%}" if key in results[label]["summary"] else "-"
            for label in labels
        ]
        lines.append(f"| {key}: {what} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Trace each framework's idle jobs and print (and optionally write) the breakdown."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frameworks", default="sqsjobs c32,dramatiq t8", help="comma list of labels/kinds")
    parser.add_argument("--k", type=int, default=40, help="idle jobs traced per framework")
    parser.add_argument("--warmup", type=int, default=3, help="idle jobs sent first and not counted")
    parser.add_argument(
        "--latency-ms", type=float, default=10.0, help="per-request latency added by the proxy"
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="repeat the frameworks this many times (rotated)"
    )
    parser.add_argument("--out", help="write JSON and markdown to this path stem")
    parser.add_argument("--keep-logs", metavar="DIR", help="keep worker/producer logs in DIR")
    args = parser.parse_args(argv)

    frameworks = select(args.frameworks)
    rows: dict[str, list[dict[str, Any]]] = {f.label: [] for f in frameworks}
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="sqsjobs-idle-trace-") as tmp:
        workdir = Path(args.keep_logs or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        bench = Bench(stack, "ministack", workdir, write_units=False)
        seq = 0
        for r in range(args.rounds):
            order = frameworks[r % len(frameworks) :] + frameworks[: r % len(frameworks)]
            for fw in order:
                rows[fw.label] += trace(
                    bench, fw, latency_ms=args.latency_ms, k=args.k, warmup=args.warmup, seq0=seq
                )
                seq += args.k + args.warmup
    results = {label: {"summary": summary(r), "jobs": r} for label, r in rows.items()}
    text = markdown(results, args.latency_ms, args.k * args.rounds)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "latency_ms": args.latency_ms,
            "k": args.k,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
        out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
