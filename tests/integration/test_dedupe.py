"""Dedup modes under twenty enqueuer processes racing on one key, run by a real worker process (MiniStack).

Each enqueuer is its own process (``tests.apps.deduped`` forks them, one per tag, from one interpreter
that imported sqsjobs), released at once by a start file; the runs are counted from the files the
handler writes, outside the worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sqsjobs import Debounce, DedupeFor, IdempotencyConflict, JobStatus
from tests.integration.helpers import kill_group, worker_env, worker_process

pytestmark = pytest.mark.slow

TYPE = "dedupe.record"


@pytest.fixture
def app(ministack_url, make_app):
    made = make_app(ministack_url)
    made.provision()
    return made


def race(app, runs: Path, key: str, tags: list[str], *flags: str) -> list[dict[str, object]]:
    """Each tag's enqueuer process, all released at once; what each got back, in the order of ``tags``."""
    start = runs.parent / f"start-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.apps.deduped", key, *tags, "--start", str(start), *flags],
        env=worker_env(app, DEDUPE_DIR=str(runs)),
        stdout=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not all(Path(f"{start}.ready.{tag}").exists() for tag in tags):
            assert proc.poll() is None, "the enqueuers died before the start"
            assert time.monotonic() < deadline, "the enqueuers never got ready"
            time.sleep(0.05)
        start.touch()
        out = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == 0
    answers = [json.loads(line) for line in out.splitlines()]
    by_tag = {answer.pop("tag"): answer for answer in answers}
    assert len(answers) == len(by_tag) == len(tags), answers  # one answer from each enqueuer
    return [by_tag[tag] for tag in tags]


def ran(runs: Path) -> dict[str, list[dict[str, object]]]:
    """The payloads each job ran with, by job id."""
    out: dict[str, list[dict[str, object]]] = {}
    for path in sorted(runs.glob("*.*")):
        out.setdefault(path.name.split(".")[0], []).append(json.loads(path.read_text()))
    return out


def run_until_finished(app, runs: Path, job_ids: set[str], timeout_s: float = 120.0) -> None:
    """A worker process runs until every job in ``job_ids`` finished, then stops."""
    worker = worker_process(app, "tests.apps.deduped:app", concurrency=2, DEDUPE_DIR=str(runs))
    try:
        deadline = time.monotonic() + timeout_s
        while not all(app.get(j, load_result=False).status.terminal for j in job_ids):
            assert worker.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, "the jobs did not finish"
            time.sleep(0.2)
        time.sleep(1.0)  # any duplicate message still in flight gets its chance to (wrongly) run
    finally:
        worker.terminate()
        worker.wait(30)
        kill_group(worker)


@pytest.fixture
def runs(tmp_path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path


def test_while_active_maps_the_key_to_the_live_job_and_makes_one_new_job_once_it_finished(app, runs):
    tags = [f"t{i}" for i in range(20)]
    # WHEN twenty processes enqueue one key at once, while no worker runs
    first = race(app, runs, "doc-1", tags, "--unique")
    # THEN they all get one job; one of them made it, the others were told it was deduplicated
    (job,) = {a["id"] for a in first}
    assert sorted(a["deduplicated"] for a in first) == [False] + [True] * 19
    assert all(a["replaced"] is None for a in first)
    # WHEN that job has run, and twenty more enqueue the key at once
    run_until_finished(app, runs, {job})
    assert app.get(job).status is JobStatus.SUCCEEDED
    second = race(app, runs, "doc-1", tags, "--unique")
    # THEN one new job, which says whose place it took
    (new,) = {a["id"] for a in second}
    assert new != job
    made = [a for a in second if not a["deduplicated"]]
    assert len(made) == 1
    assert made[0]["replaced"] == job
    run_until_finished(app, runs, {new})
    # ... and the handler ran exactly twice: once per job
    assert {k: len(v) for k, v in ran(runs).items()} == {job: 1, new: 1}


def test_throttle_keeps_the_first_payload_of_the_window_and_answers_every_later_one_with_its_id(app, runs):
    # GIVEN one enqueue of a key; WHEN nineteen processes then enqueue it at once with other payloads
    (first,) = race(app, runs, "sync-1", ["first"], "--throttle", "86400")
    later = race(app, runs, "sync-1", [f"later{i}" for i in range(19)], "--throttle", "86400")
    # ... and twenty race on another key
    racing = race(app, runs, "sync-2", [f"r{i}" for i in range(20)], "--throttle", "86400")
    # THEN every enqueue of a key got the same job, none a conflict
    assert {a["id"] for a in later} == {first["id"]}
    (other,) = {a["id"] for a in racing}
    run_until_finished(app, runs, {first["id"], other})
    # ... which ran once: the first's payload, and one of the racers' (whichever landed)
    done = ran(runs)
    assert done[first["id"]] == [{"tag": "first"}]
    assert len(done[other]) == 1
    assert done[other][0]["tag"] in {f"r{i}" for i in range(20)}
    assert set(done) == {first["id"], other}


def test_dedupe_for_is_one_job_per_window_and_another_payload_in_it_still_conflicts(app, runs):
    # WHEN twenty processes enqueue one payload under a key with a day's window
    day = ("--dedupe-for", "86400")
    got = race(app, runs, "report-1", [f"s{i}" for i in range(20)], "--payload", "same", *day)
    # THEN they all get one job; another payload under the key is still a conflict
    (job,) = {a["id"] for a in got}
    (other,) = race(app, runs, "report-1", ["other"], *day)
    assert other == {"conflict": True}
    # WHEN the window ends, the key makes a new job
    window = 10.0
    slot = int(time.time() // window)
    while int(time.time() // window) == slot:
        time.sleep(0.05)
    a = app.enqueue(TYPE, {"tag": "w"}, queue="default", idempotency_key="w", dedupe=DedupeFor(window))
    b = app.enqueue(TYPE, {"tag": "w"}, queue="default", idempotency_key="w", dedupe=DedupeFor(window))
    with pytest.raises(IdempotencyConflict):
        app.enqueue(TYPE, {"tag": "x"}, queue="default", idempotency_key="w", dedupe=DedupeFor(window))
    assert a == b
    slot = int(time.time() // window)
    while int(time.time() // window) == slot:
        time.sleep(0.05)
    c = app.enqueue(TYPE, {"tag": "w"}, queue="default", idempotency_key="w", dedupe=DedupeFor(window))
    assert c != a
    run_until_finished(app, runs, {a, c, job})
    assert {k: len(v) for k, v in ran(runs).items()} == {a: 1, c: 1, job: 1}


def test_debounce_runs_the_last_payload_of_a_burst_once_and_a_steady_stream_within_its_maximum_wait(
    app, runs
):
    # WHEN nineteen processes enqueue one key at once with a 5 s quiet period, then one more follows
    # (no worker yet: on a loaded machine the burst may outlast the quiet period, and a job that
    # started would rightly make the next enqueue a new job)
    burst = race(app, runs, "doc-9", [f"r{i}" for i in range(19)], "--debounce", "5")
    last = app.enqueue(TYPE, {"tag": "last"}, queue="default", idempotency_key="doc-9", dedupe=Debounce(5))
    worker = worker_process(app, "tests.apps.deduped:app", concurrency=2, DEDUPE_DIR=str(runs))
    try:
        # THEN one job gathered them all, and it ran once, with the last payload
        (job,) = {a["id"] for a in burst}
        assert sorted(a["deduplicated"] for a in burst) == [False] + [True] * 18
        assert last == job and last.deduplicated
        deadline = time.monotonic() + 120
        while not app.get(job, load_result=False).status.terminal:
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.2)
        assert app.get(job).status is JobStatus.SUCCEEDED
        assert ran(runs) == {job: [{"tag": "last"}]}

        # WHEN a steady stream (an enqueue every 0.5 s, quiet period 2 s, maximum wait 4 s) never goes quiet
        first_at = time.time()
        stream = app.enqueue(
            TYPE, {"tag": "s0"}, queue="default", idempotency_key="feed", dedupe=Debounce(2, max=4)
        )
        successors = []
        n = 1
        while not successors:  # until an enqueue finds the stream's job started
            assert time.monotonic() < deadline, "the stream's job never started"
            time.sleep(0.5)
            got = app.enqueue(
                TYPE, {"tag": f"s{n}"}, queue="default", idempotency_key="feed", dedupe=Debounce(2, max=4)
            )
            if got != stream:
                successors.append(got)
            n += 1
        # THEN its job was due by the maximum wait, it ran once, and that enqueue made a new job in its place
        assert app.get(stream).run_at.timestamp() <= first_at + 4 + 0.01
        assert successors[0].replaced == stream and not successors[0].deduplicated
        run_until_finished(app, runs, {stream, successors[0]})
        done = ran(runs)
        assert len(done[stream]) == len(done[successors[0]]) == 1
        assert done[successors[0]] == [{"tag": f"s{n - 1}"}]
    finally:
        worker.terminate()
        worker.wait(30)
        kill_group(worker)
