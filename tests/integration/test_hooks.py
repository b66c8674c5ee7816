"""Per-type hooks from outside: one hook run per transition across SIGKILL and copied messages (MiniStack).

Hooks (``on_succeeded``/``on_dead``) are jobs written in the finish's own transaction. Real worker
processes run the jobs; every message is copied twice; the first worker is SIGKILLed the moment the
first finish lands (sometimes between its finish and its hook's message: the sweeper's pass then
sends that message). Each hook run appends a line to a file named after the job that ended.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sqsjobs import ConfigurationError, Hooks, JobStatus, sweep_once
from tests.integration.helpers import depth, kill_group, wait_until, worker_process
from tests.integration.test_events import copy_every_message
from tests.integration.test_waiting import closing

pytestmark = pytest.mark.slow

APP = "tests.apps.hooked:app"


@pytest.fixture
def app(ministack_url, make_app, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_RUNS_DIR", str(tmp_path))
    from tests.apps import hooked

    made = make_app(ministack_url)
    made.registry = hooked.app.registry
    made.provision()
    return made


def runs(tmp_path) -> dict[str, list[str]]:
    return {p.name: p.read_text().splitlines() for p in tmp_path.iterdir()}


def test_each_end_runs_its_hook_once_across_sigkill_and_copied_messages(app, tmp_path):
    # GIVEN jobs that succeed and jobs that die, every message copied twice
    ok = [app.enqueue("work", {"n": n}) for n in range(10)]
    dead = [app.enqueue("fail", {"what": f"thing {n}"}) for n in range(5)]
    copy_every_message(app)
    # WHEN a worker is SIGKILLed the moment the first finish lands, and another runs the rest
    env = {"TEST_RUNS_DIR": str(tmp_path)}
    first = worker_process(app, APP, concurrency=4, **env)
    second = None
    try:
        deadline = time.monotonic() + 60
        while not any(app.get(j, load_result=False).status.terminal for j in ok + dead):
            assert time.monotonic() < deadline, "no job finished"
        kill_group(first)
        second = worker_process(app, APP, concurrency=4, **env)
        finals = {j: app.wait(j, timeout=90) for j in ok + dead}
        # The sweeper's later pass: a hook whose message the killed worker never sent is sent now
        # (its record's pending entry is due ``stale_after_s`` after the finish).
        later = app.clock.now() + app.settings.stale_after_s + 1
        asyncio.run(closing(app, sweep_once(app, now=later)))
        wait_until(lambda: len(runs(tmp_path)) == len(finals), 90, "a hook run for every ended job")
        wait_until(lambda: sum(depth(app).values()) == 0, 90, "the queue drained (copies and hook jobs)")
    finally:
        kill_group(first, *([second] if second else []))
    # THEN each ended job had exactly one hook run, the one its end names, with the error's class
    assert {j: job.status for j, job in finals.items()} == {
        **dict.fromkeys(ok, JobStatus.SUCCEEDED),
        **dict.fromkeys(dead, JobStatus.DEAD),
    }
    seen = runs(tmp_path)
    assert {j: seen[j] for j in ok} == {j: ["after_ok succeeded None"] for j in ok}
    assert {j: seen[j] for j in dead} == {j: ["after_dead dead PermanentError"] for j in dead}


def test_a_hook_naming_no_registered_type_fails_when_the_worker_starts(ministack_url, make_app):
    app = make_app(ministack_url)

    @app.job("work", hooks=Hooks(on_dead="nobody"))
    def work(payload: dict, ctx) -> None: ...

    with pytest.raises(ConfigurationError, match="nobody"):
        _ = app.kernel
