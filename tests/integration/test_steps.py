"""Durable steps attacked from outside: real worker processes on MiniStack, kill -9, copied messages, Lambda.

Evidence comes from outside the worker: each step's function appends a line to a file of its own
(tests/apps/stepped.py), so a count of lines is a count of calls, whatever the worker believes.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from sqsjobs import JobStatus
from sqsjobs.ops.job_views import job_to_dict
from sqsjobs.runtime.lambda_sqs import LambdaWorker
from sqsjobs.steps.records import steps_of
from tests.apps import stepped
from tests.integration.helpers import (
    SHORT_RETENTION,
    copy_messages,
    held_item,
    kill_group,
    short_retention_app,
    spawn,
    wait_until,
    worker_process,
)
from tests.integration.lambda_events import FakeContext, event_from, failed_ids, receive

pytestmark = pytest.mark.slow

APP = "tests.apps.stepped:app"


def calls(runs_dir: Path, job_id: str, step: str) -> list[list[str]]:
    path = runs_dir / f"{job_id}.{step}"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(stepped.app.registry)  # the handlers the worker processes load
    app.limit("solo", concurrency=1)  # and their limit, for the Lambda adapter run in this process
    app.provision()
    return app


def test_a_five_step_job_killed_inside_step_4_resumes_elsewhere_without_running_steps_1_to_3_again(
    app, tmp_path
):
    # GIVEN two worker processes and a five-step job whose fourth step hangs on its first attempt
    job_id = app.enqueue("five_steps", {"runs_dir": str(tmp_path), "hang_s": 60})
    procs = [worker_process(app, APP), worker_process(app, APP)]
    try:
        wait_until(lambda: calls(tmp_path, job_id, "s4"), 30, "step 4 started")
        ((_, pid),) = calls(tmp_path, job_id, "s4")
        victim = next(p for p in procs if str(p.pid) == pid)
        # WHEN the worker running it is SIGKILLed inside step 4
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(10)
        # THEN the other worker finishes the job
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 60, "resumed on the survivor")
    finally:
        kill_group(*procs)
    # ... having called steps 1-3 zero more times, step 4 once more, step 5 once
    counts = {s: len(calls(tmp_path, job_id, s)) for s in ("s1", "s2", "s3", "s4", "s5")}
    assert counts == {"s1": 1, "s2": 1, "s3": 1, "s4": 2, "s5": 1}
    job = app.get(job_id)
    assert job.attempt == 2
    # ... and the results of steps 1-3 are the killed process's, replayed from the record
    assert [r["pid"] for r in job.result[:3]] == [int(pid)] * 3
    assert [r["attempt"] for r in job.result] == [1, 1, 1, 2, 2]
    # ... the record shows the five steps in order, with the attempt and duration of each
    steps = job_to_dict(job)["steps"]
    assert [(s["name"], s["attempt"]) for s in steps] == [
        ("s1", 1),
        ("s2", 1),
        ("s3", 1),
        ("s4", 2),
        ("s5", 2),
    ]
    assert all(s["duration_s"] >= 0 and s["started_at"] for s in steps)


def test_copied_messages_and_retries_never_run_a_step_twice(app, tmp_path):
    # GIVEN 20 async stepped jobs, half of which fail once after their steps, and three extra copies
    # of each message sent straight into the queue
    ids = [
        app.enqueue("async_steps", {"runs_dir": str(tmp_path), "step_s": 0.3, "fail_first": n % 2 == 0})
        for n in range(20)
    ]
    copy_messages(app, len(ids), copies=3)

    # WHEN one worker with 16 slots drains the 80 messages (and runs the retries)
    proc = worker_process(app, APP, concurrency=16)
    try:
        wait_until(lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in ids), 120, "all succeeded")
    finally:
        kill_group(proc)

    # THEN each step's function was called once per job, the retried jobs' second attempts included
    assert {(i, s): len(calls(tmp_path, i, s)) for i in ids for s in ("a1", "a2", "a3")} == {
        (i, s): 1 for i in ids for s in ("a1", "a2", "a3")
    }
    assert sorted({app.get(i).attempt for i in ids}) == [1, 2]


def test_a_step_result_over_the_inline_limit_is_kept_in_s3_and_replayed(app, tmp_path):
    job_id = app.enqueue("big_step", {"runs_dir": str(tmp_path)})
    proc = worker_process(app, APP)
    try:
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 60, "succeeded")
    finally:
        kill_group(proc)
    job = app.get(job_id)
    assert (job.attempt, job.result, len(calls(tmp_path, job_id, "blob"))) == (2, 5000, 1)
    (step,) = job_to_dict(job)["steps"]
    assert step["result"] is None and str(step["result_ref"]).startswith("s3://")


def test_a_step_name_taken_twice_in_a_run_kills_the_job_with_a_clear_error(app, tmp_path):
    job_id = app.enqueue("same_name_twice", {})
    proc = worker_process(app, APP)
    try:
        wait_until(lambda: app.get(job_id).status is JobStatus.DEAD, 60, "dead")
    finally:
        kill_group(proc)
    job = app.get(job_id)
    assert job.attempt == 1
    assert job.last_error is not None and job.last_error.error_class == "StepError"
    assert "'charge' was already taken in this run" in job.last_error.message


def test_the_same_stepped_job_through_the_lambda_adapter_replays_its_steps_on_the_next_invocation(
    app, tmp_path
):
    # GIVEN a stepped job that fails its first attempt after its three steps, and the Lambda entry point
    worker = LambdaWorker(app)
    try:
        job_id = app.enqueue("async_steps", {"runs_dir": str(tmp_path), "fail_first": True})
        # WHEN one invocation runs it (it fails: the message is reported for a retry) and a later one gets it again
        first = worker(event_from(app, receive(app, 1)), FakeContext())
        assert len(failed_ids(first)) == 1
        assert app.get(job_id).status is JobStatus.RETRY_SCHEDULED
        second = worker(event_from(app, receive(app, 1, timeout_s=30)), FakeContext())
        assert failed_ids(second) == set()
    finally:
        worker.close()
    # THEN the job succeeded with the first invocation's step results, each step's function called once
    job = app.get(job_id)
    assert (job.status, job.attempt) == (JobStatus.SUCCEEDED, 2)
    assert [r["attempt"] for r in job.result] == [1, 1, 1]
    assert [len(calls(tmp_path, job_id, s)) for s in ("a1", "a2", "a3")] == [1, 1, 1]


def test_a_sleeping_job_holds_no_slot_and_resumes_after_its_sleep_without_using_an_attempt(app, tmp_path):
    # GIVEN a worker with two slots, and two one-attempt jobs (sync and async) that sleep 3 s between two
    # steps, and one under a concurrency limit of one slot that sleeps 6 s
    sleepers = [
        app.enqueue(kind, {"runs_dir": str(tmp_path), "sleep_s": 3}) for kind in ("sleeper", "async_sleeper")
    ]
    limited = app.enqueue("solo_sleeper", {"runs_dir": str(tmp_path), "sleep_s": 6, "hold_s": 2})
    # a slot not given back would stay taken for the lease (30 s here), past the 6 s sleep
    proc = worker_process(app, APP, concurrency=2, SQSJOBS_LEASE_S="30")
    try:
        wait_until(
            lambda: all(
                calls(tmp_path, i, "before") and app.get(i).status is JobStatus.QUEUED
                for i in [*sleepers, limited]
            ),
            30,
            "all asleep",
        )
        # WHEN two jobs that can only finish together (each waits for the other to start) arrive,
        # and a job of the limited one's one-slot limit
        barriers = [app.enqueue("barrier", {"runs_dir": str(tmp_path), "of": 2}) for _ in range(2)]
        first_solo = app.enqueue("solo", {"runs_dir": str(tmp_path)})
        # THEN both run while the sleepers sleep: the sleepers hold no slot
        wait_until(
            lambda: all(app.get(b).status is JobStatus.SUCCEEDED for b in barriers), 30, "barriers done"
        )
        assert not any(calls(tmp_path, i, "after") for i in sleepers)
        # ... and the limit's one slot is free while its holder sleeps: the other job of the limit runs
        wait_until(lambda: app.get(first_solo).status is JobStatus.SUCCEEDED, 30, "the limit's other job ran")
        assert not calls(tmp_path, limited, "after")
        # ... and once awake the limited job holds the slot again: a job of the limit arriving after
        # it woke starts only once it finished
        wait_until(lambda: calls(tmp_path, limited, "after"), 60, "the limited sleeper woke")
        second_solo = app.enqueue("solo", {"runs_dir": str(tmp_path)})
        wait_until(
            lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in (limited, second_solo)),
            60,
            "the limited sleeper and the job after it done",
        )
        woken, after = app.get(limited), app.get(second_solo)
        assert woken.attempt == 1
        assert after.started_at >= woken.finished_at
        # ... and the sleepers resume at their next step and succeed on their one attempt
        wait_until(
            lambda: all(app.get(i).status is JobStatus.SUCCEEDED for i in sleepers), 60, "sleepers woke"
        )
    finally:
        kill_group(proc)
    for job_id in sleepers:
        job = app.get(job_id)
        assert job.attempt == 1
        assert [len(calls(tmp_path, job_id, s)) for s in ("before", "after")] == [1, 1]
        steps = {s["name"]: s for s in job_to_dict(job)["steps"]}
        assert list(steps) == ["before", "sleep-1", "after"]
        assert steps["sleep-1"]["duration_s"] == 3
        # the step after the sleep started no earlier than the sleep's end
        assert steps_of(job.extra)["after"].started_at >= steps["sleep-1"]["result"]["until"] - 0.01


def test_a_sleep_through_the_lambda_adapter_frees_the_invocation_and_the_next_one_resumes(app, tmp_path):
    worker = LambdaWorker(app)
    try:
        job_id = app.enqueue("async_sleeper", {"runs_dir": str(tmp_path), "sleep_s": 2})
        # WHEN an invocation reaches the sleep: the message is handed back (re-armed), the job queued
        first = worker(event_from(app, receive(app, 1)), FakeContext())
        assert len(failed_ids(first)) == 1
        assert (app.get(job_id).status, app.get(job_id).attempt) == (JobStatus.QUEUED, 0)
        # ... and a later invocation gets the message once the sleep is over
        second = worker(event_from(app, receive(app, 1, timeout_s=30)), FakeContext())
        assert failed_ids(second) == set()
    finally:
        worker.close()
    job = app.get(job_id)
    assert (job.status, job.attempt) == (JobStatus.SUCCEEDED, 1)
    assert [len(calls(tmp_path, job_id, s)) for s in ("before", "after")] == [1, 1]


def test_a_sleep_past_the_message_retention_is_held_and_the_sweeper_wakes_it(
    ministack_url, make_app, tmp_path
):
    # GIVEN queues that keep a message 60 s, and a one-attempt job that sleeps 70 s between two steps
    app = short_retention_app(ministack_url, make_app, stepped.app)
    job_id = app.enqueue("sleeper", {"runs_dir": str(tmp_path), "sleep_s": 70})
    worker = spawn(app, APP, "worker", "--concurrency", "2", **SHORT_RETENTION)
    sweeper = None
    try:
        # WHEN it falls asleep
        wait_until(
            lambda: calls(tmp_path, job_id, "before") and app.get(job_id).status is JobStatus.QUEUED,
            60,
            "asleep",
        )
        # THEN the record holds it (a held entry, its payload, the attempt given back) and no message is left
        item = held_item(app, job_id)
        assert item["attempt"]["N"] == "0" and item["attn"]["S"].startswith("held#") and "payload" in item, (
            item
        )
        # AND with a sweeper running, the job wakes when due and finishes on its one attempt
        sweeper = spawn(app, APP, "sweep", **SHORT_RETENTION)
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 150, "woke and succeeded")
    finally:
        kill_group(worker, *([sweeper] if sweeper else []))
    job = app.get(job_id)
    assert job.attempt == 1
    assert [len(calls(tmp_path, job_id, s)) for s in ("before", "after")] == [1, 1]
