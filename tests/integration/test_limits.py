"""Flow control, attacked from outside: real worker processes on MiniStack, a run log, kill -9.

Evidence comes from outside the workers: the run log the handlers of tests/apps/limited.py append
to (the record's ``started_at``, which for a gated job is the instant the gate admitted it, and the
handler's own start and end), the records read over HTTP, and the workers' JSON log lines (each
deferral is one ``job deferred`` line). No sweeper runs: a slot held by a killed worker must come
back by its lease alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from sqsjobs import JobStatus
from tests.apps import limited
from tests.integration import helpers
from tests.integration.helpers import worker_env

pytestmark = pytest.mark.slow

APP = "tests.apps.limited:app"


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=4.0, visibility_timeout_s=4)
    app.registry.include(limited.app.registry)  # the handlers the worker processes load
    app.limits.include(limited.app.limits)
    app.provision()
    return app


class Workers:
    """Worker processes of the limited app, each logging to its own file."""

    def __init__(self, app, tmp_path: Path) -> None:
        self.app, self.dir, self.procs = app, tmp_path, []

    def start(self, n: int = 1, concurrency: int = 8) -> list[subprocess.Popen[bytes]]:
        started = []
        for _ in range(n):
            with open(self.dir / f"worker{len(self.procs)}.log", "wb") as log:  # the child keeps its copy
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "sqsjobs",
                        "worker",
                        "--app",
                        APP,
                        "--concurrency",
                        str(concurrency),
                    ],
                    env=worker_env(self.app, POWERTOOLS_METRICS_DISABLED="true", SQSJOBS_LOG_LEVEL="INFO"),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.procs.append(proc)
            started.append(proc)
        return started

    def kill(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
            proc.wait(20)

    def stop(self) -> None:
        for proc in self.procs:
            self.kill(proc, signal.SIGTERM)

    def events(self, name: str) -> list[dict]:
        lines = []
        for path in sorted(self.dir.glob("worker*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{") and f'"{name}"' in line:
                    record = json.loads(line)
                    if record.get("message") == name:
                        lines.append(record)
        return lines


@pytest.fixture
def workers(app, tmp_path):
    fleet = Workers(app, tmp_path)
    yield fleet
    fleet.stop()


def run_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    keys = ("type", "job_id", "tenant", "started_at", "begun", "end", "pid", "attempt")
    rows = [dict(zip(keys, line.split(), strict=True)) for line in path.read_text().splitlines()]
    for row in rows:
        for k in ("started_at", "begun", "end"):
            row[k] = float(row[k])
    return rows


def max_overlap(rows: list[dict]) -> int:
    """The most handler runs in progress at any one instant."""
    events = sorted(
        [(r["begun"], 1) for r in rows] + [(r["end"], -1) for r in rows], key=lambda e: (e[0], e[1])
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def max_in_window(times: list[float], window_s: float = 1.0) -> int:
    """The most starts in any half-open window of ``window_s`` (sliding over every start)."""
    times = sorted(times)
    return max((sum(1 for t in times[i:] if t < s + window_s) for i, s in enumerate(times)), default=0)


def wait_until(condition, timeout_s: float, what: str) -> float:
    """The shared poll, less often: these conditions read many records."""
    return helpers.wait_until(condition, timeout_s, what, every_s=0.2)


def finished(app, ids) -> bool:
    return all(app.get(i, load_result=False).status.terminal for i in ids)


def test_a_concurrency_limit_holds_fleet_wide_over_three_workers_of_eight_slots(app, workers, tmp_path):
    # GIVEN 3 worker processes x 8 slots, and 16 jobs under concurrency=2 that take 0.4 s each
    log = tmp_path / "runs.log"
    workers.start(3, concurrency=8)
    ids = app.enqueue_many(
        [{"type": "paired", "payload": {"log": str(log), "sleep_s": 0.4}} for _ in range(16)]
    )
    # WHEN they all run
    wait_until(lambda: finished(app, ids), 120, "16 paired jobs")
    rows = run_log(log)
    # THEN each ran once, never more than 2 at any instant, and the limit was used (2 at once seen)
    assert sorted(r["job_id"] for r in rows) == sorted(ids)
    assert all(app.get(i).status is JobStatus.SUCCEEDED and app.get(i).attempt == 1 for i in ids)
    assert max_overlap(rows) == 2
    assert len({r["pid"] for r in rows}) >= 2, "the jobs ran in more than one process"
    # AND the waiting jobs were deferred, not held: no attempt was used up by waiting
    assert workers.events("job deferred"), "some jobs had to wait for a slot"


def test_a_partitioned_limit_holds_per_tenant_and_does_not_starve_a_small_tenant(app, workers, tmp_path):
    # GIVEN tenant "big" holding both its slots with two 5 s jobs, and a backlog of 28 more behind them
    log = tmp_path / "runs.log"

    def jobs(tenant: str, count: int, sleep_s: float) -> list[dict]:
        payload = {"log": str(log), "sleep_s": sleep_s}
        return [{"type": "tenanted", "payload": payload, "tenant": tenant} for _ in range(count)]

    workers.start(2, concurrency=8)
    holding = app.enqueue_many(jobs("big", 2, 5.0))
    wait_until(
        lambda: all(app.get(i).status is JobStatus.RUNNING for i in holding), 60, "big's two long jobs"
    )
    big = holding + app.enqueue_many(jobs("big", 28, 0.5))
    # WHEN tenant "small" enqueues 4 jobs after that backlog, under concurrency=2 per tenant
    t0 = time.time()
    small = app.enqueue_many(jobs("small", 4, 0.5))
    wait_until(lambda: finished(app, small), 60, "the small tenant's jobs")
    small_done = time.time()
    wait_until(lambda: finished(app, big), 180, "the big tenant's backlog")
    rows = run_log(log)
    by_tenant = defaultdict(list)
    for r in rows:
        by_tenant[r["tenant"]].append(r)
    # THEN at most 2 per tenant ran at once, and the small tenant ran beside the big one's full slots
    assert max_overlap(by_tenant["big"]) == 2
    assert max_overlap(by_tenant["small"]) <= 2
    assert max_overlap(rows) >= 3
    # AND the small tenant finished while most of the big backlog still waited (starts per 2 s shown)
    big_before = sum(1 for r in by_tenant["big"] if r["end"] <= small_done)
    timeline = Counter((r["tenant"], int((r["started_at"] - t0) // 2) * 2) for r in rows)
    print("\nstarts per tenant per 2 s:", dict(sorted(timeline.items(), key=lambda kv: (kv[0][1], kv[0][0]))))
    assert big_before < 30 / 2, f"the small tenant waited for {big_before} of the big tenant's 30 jobs"


def test_a_slot_held_by_a_killed_worker_comes_back_within_its_lease(app, workers, tmp_path):
    # GIVEN one worker running two jobs under concurrency=2 that take 30 s each: it holds both slots
    log = tmp_path / "runs.log"
    victim = workers.start(1)[0]
    long = app.enqueue_many(
        [{"type": "paired", "payload": {"log": str(log), "sleep_s": 30}} for _ in range(2)]
    )
    wait_until(
        lambda: all(app.get(i).status is JobStatus.RUNNING for i in long), 30, "both long jobs running"
    )
    short = app.enqueue_many(
        [{"type": "paired", "payload": {"log": str(log), "sleep_s": 0.1}} for _ in range(3)]
    )
    # WHEN that worker is killed with SIGKILL (no release, no finish) and a new one starts; no sweeper
    workers.kill(victim)
    killed_at = time.time()
    workers.start(1)
    # THEN every job finishes, and the first start after the kill — the two long jobs rescued, or
    # short ones: whichever of them the new worker meets first — came once the slots' leases ran out
    wait_until(lambda: finished(app, short + long), 120, "all jobs after the kill")
    assert all(app.get(i).status is JobStatus.SUCCEEDED for i in short + long)
    restarts = sorted(r["started_at"] for r in run_log(log) if r["started_at"] > killed_at)
    lease_s, visibility_s = app.settings.lease_s, app.settings.visibility_timeout_s
    assert restarts and restarts[0] - killed_at < lease_s + visibility_s + 15, restarts
    # AND the limit held throughout: never more than 2 runs at once, before or after the kill
    assert max_overlap([r for r in run_log(log) if r["started_at"] > killed_at]) <= 2


def test_a_rate_limit_spreads_starts_fleet_wide_without_busy_polling(app, workers, tmp_path):
    # GIVEN 30 jobs under rate="5/s" and 3 workers of 8 slots
    log = tmp_path / "runs.log"
    ids = app.enqueue_many([{"type": "rated", "payload": {"log": str(log)}} for _ in range(30)])
    workers.start(3, concurrency=8)
    wait_until(lambda: finished(app, ids), 120, "30 rated jobs")
    rows = run_log(log)
    starts = [r["started_at"] for r in rows]
    # THEN no 1 s window holds more than 5 starts (the record's started_at is the logged start)
    assert len(rows) == 30
    assert max_in_window(starts) <= 5, sorted(starts)
    assert max_in_window(starts) >= 4, "the limit was reached, not merely respected"
    # AND the workers did not spin: deferrals and refused writes per job stay small
    deferred = len(workers.events("job deferred"))
    print(f"\n30 jobs at 5/s over 3 workers: {deferred} deferrals, span {max(starts) - min(starts):.1f} s")
    assert deferred / len(ids) <= 6, deferred


def test_a_per_key_rate_holds_per_tenant_in_every_second_and_the_tenants_do_not_slow_each_other(
    app, workers, tmp_path
):
    # GIVEN rate="5/s" per tenant: 20 jobs for each of three hot shops, then 3 for a small one
    log = tmp_path / "runs.log"
    hot = ["shop-a", "shop-b", "shop-c"]
    requests = [
        {"type": "shop.call", "payload": {"log": str(log)}, "tenant": t} for _ in range(20) for t in hot
    ]
    ids = app.enqueue_many(requests)
    ids += app.enqueue_many([{"type": "shop.call", "payload": {"log": str(log)}, "tenant": "small"}] * 3)
    workers.start(2, concurrency=8)
    wait_until(lambda: finished(app, ids), 180, "63 jobs of four shops")
    rows = run_log(log)
    assert len(rows) == 63
    starts = defaultdict(list)
    for row in rows:  # the record's started_at: the instant the gate admitted the job
        starts[row["tenant"]].append(row["started_at"])
    # THEN no shop ever had more than 5 starts in a 1 s window, and each hot shop had several starts
    # in one (a rate per shop, not one start at a time). How close a shop comes to its 5 depends
    # on how fast a loaded machine claims, so it is printed below, not asserted.
    assert {t: max_in_window(s) <= 5 for t, s in starts.items()} == dict.fromkeys([*hot, "small"], True), (
        starts
    )
    assert all(max_in_window(starts[t]) >= 2 for t in hot), {t: max_in_window(starts[t]) for t in hot}
    # AND the shops ran side by side: more than one shop's quota in some second (one shared 5/s
    # could not), and the small shop's 3 jobs never waited behind the hot shops' 60
    every = [t for s in starts.values() for t in s]
    deferred = len(workers.events("job deferred"))
    print(
        f"\n63 jobs at 5/s per shop over 2 workers: per-shop max starts in 1 s "
        f"{ {t: max_in_window(s) for t, s in sorted(starts.items())} }, all shops {max_in_window(every)}, "
        f"span {max(every) - min(every):.1f} s, {deferred} deferrals"
    )
    assert max_in_window(every) > 5, sorted(every)
    assert max(starts["small"]) < min(max(starts[t]) for t in hot), starts


def test_a_breaker_opens_defers_without_using_attempts_then_one_probe_decides(app, workers, tmp_path):
    log, mode = tmp_path / "runs.log", tmp_path / "mode"
    mode.write_text("fail")
    workers.start(2, concurrency=4)
    # GIVEN the dependency fails: 3 failures within 30 s open the breaker (failures=3, cooldown 4 s)
    first = app.enqueue_many(
        [{"type": "crm.call", "payload": {"log": str(log), "mode": str(mode)}} for _ in range(3)]
    )
    wait_until(
        lambda: all(app.get(i).attempt >= 1 and app.get(i).status is not JobStatus.RUNNING for i in first),
        30,
        "3 failures",
    )
    wait_until(lambda: app.run(_breaker(app))["state"] == "open", 10, "the breaker opens")
    # WHEN more jobs arrive while it is open
    later = app.enqueue_many(
        [{"type": "crm.call", "payload": {"log": str(log), "mode": str(mode)}} for _ in range(4)]
    )
    time.sleep(2)
    # THEN they are deferred, not run: no attempt used, still queued
    assert all(app.get(i).attempt == 0 and app.get(i).status is JobStatus.QUEUED for i in later)
    assert any(e["reason"] == "breaker" for e in workers.events("job deferred"))
    # AND after the cooldown exactly one probe runs (a waiting job or a retry of the first ones:
    # whichever comes first); it fails, so the breaker opens again
    opened_at = _breaker_item(app)["opened_at"]
    wait_until(lambda: len(workers.events("breaker probe decided")) >= 1, 30, "a probe's verdict")
    reopened = _breaker_item(app)
    assert reopened["state"] == "open" and reopened["opened_at"] > opened_at
    probes = [r for r in run_log(log) if opened_at < r["started_at"] < reopened["opened_at"]]
    assert len(probes) == 1, probes
    # WHEN the dependency recovers, the next probe succeeds and closes it: everything runs
    mode.write_text("ok")
    everything = first + later
    wait_until(lambda: finished(app, everything), 90, "all crm jobs after recovery")
    assert app.run(_breaker(app))["state"] == "closed"
    assert all(app.get(i).status is JobStatus.SUCCEEDED for i in everything)
    # the deferred jobs used exactly one attempt each, or two for the one probe that failed
    assert sorted(app.get(i).attempt for i in later) in ([1, 1, 1, 2], [1, 1, 1, 1])


def _breaker_item(app) -> dict:
    from sqsjobs._aws import Call, one
    from sqsjobs.limits import records as limit_records

    item = app.run(
        one(
            Call(
                "dynamodb",
                "get_item",
                limit_records.get(app.settings.table_name, limit_records.breaker_id("crm"))
                | {"ConsistentRead": True},
            )
        )
    )["Item"]
    return {"state": item["state"]["S"], "opened_at": float(item["opened_at"]["N"])}


def _breaker(app):
    from sqsjobs.limits.namespace import state_flow

    state = yield from state_flow(app.settings.table_name, app.registry, app.limits, now=time.time())
    crm = next(lim for lim in state.limits if lim.name == "crm")
    return {"state": crm.breaker, "failures": crm.breaker_failures}


def test_pause_stops_starts_fleet_wide_within_seconds_and_resume_restores_them(app, workers, tmp_path):
    log = tmp_path / "runs.log"
    workers.start(2, concurrency=4)
    warm = app.enqueue("report", {"log": str(log)})
    wait_until(lambda: finished(app, [warm]), 30, "a first report")
    # WHEN the type is paused, then jobs of it are enqueued
    app.limits.pause("report", reason="maintenance")
    time.sleep(3)  # the workers' pause cache (2 s) has caught up
    ids = app.enqueue_many([{"type": "report", "payload": {"log": str(log)}} for _ in range(5)])
    time.sleep(6)
    # THEN none started: all queued, attempts untouched, deferred as paused
    assert all(app.get(i).status is JobStatus.QUEUED and app.get(i).attempt == 0 for i in ids)
    assert {e["reason"] for e in workers.events("job deferred")} == {"paused"}
    # WHEN resumed, they all run
    assert app.limits.resume("report") is True
    took = wait_until(lambda: finished(app, ids), 60, "reports after resume")
    print(f"\nresume → all 5 finished in {took:.1f} s")
    assert all(app.get(i).status is JobStatus.SUCCEEDED and app.get(i).attempt == 1 for i in ids)


def test_weights_give_a_key_value_its_share_under_a_backlog_across_two_workers(app, workers, tmp_path):
    # GIVEN a backlog of 12 jobs of tenant "vip" (weight 3) and 12 of tenant "std", one slot per tenant
    # otherwise, and two worker processes of 8 slots: far more slots than the limit allows
    log = tmp_path / "runs.log"
    jobs = [
        {"type": "weighted", "payload": {"log": str(log), "sleep_s": 0.6}, "tenant": tenant}
        for _ in range(12)
        for tenant in ("vip", "std")
    ]
    ids = app.enqueue_many(jobs)
    workers.start(2, concurrency=8)
    # WHEN they all run
    wait_until(lambda: finished(app, ids), 180, "24 weighted jobs")
    rows = run_log(log)
    by_tenant = defaultdict(list)
    for r in rows:
        by_tenant[r["tenant"]].append(r)
    # THEN each ran once; "vip" ran up to 3 at once and never more, "std" one at a time
    assert sorted(r["job_id"] for r in rows) == sorted(ids)
    assert max_overlap(by_tenant["vip"]) == 3
    assert max_overlap(by_tenant["std"]) == 1
    assert len({r["pid"] for r in rows}) == 2, "both processes ran jobs: the shares hold fleet-wide"


def test_max_age_ends_a_retrying_job_dead_with_its_reason_long_before_its_attempts(app, workers, tmp_path):
    # GIVEN a running worker (a first job shows it started), and a job that fails every attempt,
    # retried every second, max_age 8 s, 100 attempts allowed
    log = tmp_path / "runs.log"
    workers.start(1, concurrency=2)
    warm = app.enqueue("plain", {"log": str(tmp_path / "warm.log")})
    wait_until(lambda: finished(app, [warm]), 60, "the worker's first job")
    job_id = app.enqueue("aging", {"log": str(log)})
    # WHEN it runs until the policy stops it
    wait_until(lambda: finished(app, [job_id]), 60, "the aging job")
    job = app.get(job_id)
    rows = run_log(log)
    # THEN it is dead for its age, not its attempts, and no attempt started past its max age
    assert job.status is JobStatus.DEAD and job.reason == "max age exceeded", job.reason
    assert 2 <= job.attempt < 100 and len(rows) == job.attempt
    created = job.created_at.timestamp()
    assert all(r["started_at"] - created <= 8 for r in rows), [r["started_at"] - created for r in rows]
