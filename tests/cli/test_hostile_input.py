"""The CLI, as a process of its own, over input it cannot read and ids that name no job.

A DLQ holding a body of 100,000 nested arrays among good dead jobs: ``sqsjobs dlq list``, ``show``
and ``replay`` finish, handle the good messages and report the bad one by message id and reason.
An id naming one of the table's own items that is not a job is "not found" (exit 3), and the item
is left as it was (that matrix runs the CLI in process, as the rest of tests/cli does).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sqsjobs import JobStatus
from sqsjobs.cli.common import EXIT_NOT_FOUND, EXIT_PARTIAL
from tests.api.test_hostile_input import DEEP_BODY, scan, write_items_that_are_not_jobs
from tests.integration.helpers import queue_url, sqs_call, worker_env

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.cli.jobs_app:app"


def sqsjobs(world, *args: str) -> subprocess.CompletedProcess[str]:
    """``sqsjobs <args>`` in a process of its own, on ``world``'s table and queues."""
    settings = world.app.settings
    env = worker_env(world.app, SQSJOBS_TABLE=settings.table_name, SQSJOBS_QUEUE_PREFIX=settings.queue_prefix)
    return subprocess.run(
        [sys.executable, "-m", "sqsjobs", *args, "--app", APP],
        cwd=ROOT,
        env=env | {"COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def ok(run: subprocess.CompletedProcess[str], code: int = 0) -> subprocess.CompletedProcess[str]:
    assert run.returncode == code and "Traceback" not in run.stderr, (run.returncode, run.stderr[-2000:])
    return run


def test_dlq_commands_handle_the_good_messages_and_report_the_100000_deep_one(fresh):
    # GIVEN two jobs a worker dead-lettered, and beside them a body no JSON parser can nest
    world = fresh(mails=2, perm=False, extra=False)
    dlq = queue_url(world.app, "mail", dlq=True)
    bad = str(sqs_call(world.app, "send_message", QueueUrl=dlq, MessageBody=DEEP_BODY)["MessageId"])

    # WHEN the DLQ is listed: every message, the bad one with why it cannot be read
    listed = {
        m["message_id"]: m for m in json.loads(ok(sqsjobs(world, "dlq", "list", "--json")).stdout)["messages"]
    }
    assert {m["job_id"] for m in listed.values() if m["job_id"]} == set(world.dead_value)
    assert "nests deeper than 128 levels" in listed[bad]["malformed"]
    human = ok(sqsjobs(world, "dlq", "list")).stdout
    assert bad in human and "nests deeper than 128 levels" in human and "3 message(s)" in human
    ok(sqsjobs(world, "dlq", "list", "--group-by", "error"))
    shown = json.loads(ok(sqsjobs(world, "dlq", "show", bad, "--json")).stdout)
    assert shown["message"]["message_id"] == bad and shown["job"] is None

    # WHEN it is replayed, first as a dry run
    # (exit 5, "partial": a replay that left a message in the DLQ, with its reason)
    dry = json.loads(ok(sqsjobs(world, "dlq", "replay", "--dry-run", "--json"), EXIT_PARTIAL).stdout)
    assert dry["counts"]["would_replay"] == 2
    done = json.loads(ok(sqsjobs(world, "dlq", "replay", "--json"), EXIT_PARTIAL).stdout)
    # THEN the good jobs are queued again, the bad message is reported and stays in the DLQ
    assert done["counts"]["replayed"] == 2 and done["counts"]["skipped"] == 1
    [skipped] = [i for i in done["items"] if i["outcome"] == "skipped"]
    assert skipped["message_id"] == bad and "nests deeper than 128 levels" in skipped["reason"]
    assert {world.app.get(job_id).status for job_id in world.dead_value} == {JobStatus.QUEUED}
    left = json.loads(ok(sqsjobs(world, "dlq", "list", "--json")).stdout)["messages"]
    assert [m["message_id"] for m in left] == [bad]


def test_jobs_commands_answer_not_found_for_an_item_that_is_not_a_job(fresh):
    # GIVEN a table holding a breaker, a pause, a batch, a chain and a worker beside its jobs
    world = fresh(mails=1, perm=False, extra=False)
    items = write_items_that_are_not_jobs(world.app)
    for item_id in items:
        for command in ("get", "cancel", "retry"):
            # WHEN a command names one of them as a job
            run = world.cli("jobs", command, item_id)  # in process: 15 processes would take a minute
            # THEN it is "not found", in one line (``invoke`` fails the test on any traceback)
            assert run.code == EXIT_NOT_FOUND, (item_id, command, run.code, run.err)
            assert run.err.startswith(f"error: no job with id {item_id!r}"), run.err
    # ... and nothing was written to them
    after = scan(world.app)
    assert {i: after[i] for i in items} == items
