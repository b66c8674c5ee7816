"""`sqsjobs jobs retry ID --payload FILE` and `sqsjobs dlq replay ... --payload FILE` on MiniStack.

The story: ``mail.send`` jobs died, and the fix deployed (``jobs_app.register(strict=True)``) needs
a subject their payloads lack, so a plain retry is refused. The operator retries them with a
corrected payload instead.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sqsjobs import IdempotencyConflict, JobStatus
from sqsjobs.cli.common import EXIT_PARTIAL, EXIT_REFUSED, EXIT_USAGE
from sqsjobs.cli.main import cli
from sqsjobs.ops._common import actor
from sqsjobs.store import operator
from sqsjobs.store.codec import canonical_json, payload_hash
from sqsjobs.testing import all_finished, work_until
from tests.cli import jobs_app
from tests.cli.conftest import APP_PATH, new_app
from tests.integration.helpers import depth, queue_url, receive_dlq, send_raw, sqs_call

FIXED = {"to": "user0@example.com", "subject": "Welcome"}


def dlq_copy(app, job_id: str) -> dict:
    """The job's message in the mail DLQ (each receive hides what it returns, so the next one goes on)."""
    for _ in range(5):
        for m in receive_dlq(app, "mail"):
            if json.loads(m["Body"])["id"] == job_id:
                return m
    raise AssertionError(f"no DLQ message for {job_id}")


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.fixture
def deploy(fresh):
    """Dead mail jobs (one enqueued with an idempotency key), and the fixed deploy that refuses them."""
    w = fresh(mails=2, perm=False, extra=False)
    keyed = w.app.enqueue("mail.send", {"to": "keyed@example.com"}, idempotency_key="welcome-42")
    work_until(w.app, all_finished(w.app, [keyed]))
    w.dead_value.append(keyed)
    fixed = new_app(w.endpoint, name=w.app.name, strict=True)
    yield w, fixed
    fixed.close()


def test_a_corrected_payload_replaces_the_job_s_own_keeping_its_id_and_key(deploy, tmp_path):
    w, fixed = deploy
    job_id = w.dead_value[-1]
    before = w.app.get(job_id)
    assert w.cli("jobs", "retry", job_id, app=fixed).code == EXIT_REFUSED  # its own payload lacks a subject
    path = tmp_path / "fixed.json"
    path.write_text(json.dumps({"to": "keyed@example.com", "subject": "Welcome"}))

    # WHEN the operator retries it with a payload the fixed handler accepts
    run = w.cli("jobs", "retry", job_id, "--payload", str(path), "--json", app=fixed)

    # THEN it is queued again under the same id and idempotency key, with the new payload's hash,
    # size and version in its record, in the same write as the requeue
    assert run.code == 0, run.err
    new = {"to": "keyed@example.com", "subject": "Welcome"}
    assert run.json["payload_hash"] == payload_hash("mail.send", 1, new)
    job = w.app.get(job_id)
    assert (job.id, job.status, job.attempt, job.idempotency_key) == (
        job_id,
        JobStatus.QUEUED,
        0,
        "welcome-42",
    )
    assert (job.payload, job.payload_hash, job.payload_version) == (new, run.json["payload_hash"], 1)
    assert job.payload_size == len(canonical_json(new)) != before.payload_size
    # AND the audit entry records the change: who, when, the old and the new hash
    (entry,) = w.cli("jobs", "get", job_id, "--json").json["audit"]
    assert (entry["action"], entry["from"], entry["by"]) == ("retry", "dead", actor())
    assert entry["at"]
    assert (entry["old_payload_hash"], entry["new_payload_hash"]) == (before.payload_hash, job.payload_hash)
    assert (entry["old_payload_version"], entry["new_payload_version"]) == (1, 1)
    assert "→" in w.cli("jobs", "get", job_id, app=fixed).out  # the human view shows it too

    # WHEN the job runs, the fixed handler gets the new payload
    runs = jobs_app.RUNS[job_id]
    work_until(fixed, all_finished(fixed, [job_id]))
    assert (fixed.get(job_id).status, fixed.get(job_id).result) == (JobStatus.SUCCEEDED, "sent Welcome")
    assert jobs_app.RUNS[job_id] == runs + 1

    # AND a later enqueue with the same key: the old payload conflicts, the new one is the same job
    with pytest.raises(IdempotencyConflict, match="welcome-42"):
        w.app.enqueue("mail.send", {"to": "keyed@example.com"}, idempotency_key="welcome-42")
    assert fixed.enqueue("mail.send", new, idempotency_key="welcome-42") == job_id


def test_a_stale_message_with_the_old_payload_is_refused_and_never_runs_the_handler(deploy, tmp_path):
    w, fixed = deploy
    job_id = w.dead_value[0]
    # GIVEN the job's dead-lettered message (the old payload), read from the DLQ
    copy = dlq_copy(w.app, job_id)
    path = tmp_path / "fixed.json"
    path.write_text(json.dumps(FIXED))
    assert w.cli("jobs", "retry", job_id, "--payload", str(path), app=fixed).code == 0
    # AND the retry's hint (the new payload) held aside, so the stale message meets the queued job first
    # (a long poll, as long as SQS allows: a short one may answer with nothing although the message is
    # there, and a message a stopped worker's last long poll took comes back after the visibility timeout)
    (hint,) = sqs_call(
        w.app, "receive_message", QueueUrl=queue_url(w.app, "mail"), VisibilityTimeout=60, WaitTimeSeconds=20
    )["Messages"]
    assert json.loads(hint["Body"])["hash"] == payload_hash("mail.send", 1, FIXED)

    # WHEN the old message is copied straight into the queue and a worker runs until it is gone
    send_raw(w.app, copy["Body"], queue="mail")
    runs = jobs_app.RUNS[job_id]
    work_until(fixed, lambda: depth(fixed, "mail") == {"visible": 0, "in_flight": 1, "delayed": 0})

    # THEN its claim was refused (its payload hash is not the record's) and it was dropped: the job
    # is still queued, the handler never ran (had it run, the fixed handler would have killed the job
    # for its old payload), nothing new was dead-lettered
    job = fixed.get(job_id)
    assert (job.status, job.attempt) == (JobStatus.QUEUED, 0)
    assert jobs_app.RUNS[job_id] == runs
    assert sum(depth(fixed, "mail", dlq=True).values()) == 3

    # WHEN the hint comes back, THEN the job runs once, with the new payload
    sqs_call(
        w.app,
        "change_message_visibility",
        QueueUrl=queue_url(w.app, "mail"),
        ReceiptHandle=hint["ReceiptHandle"],
        VisibilityTimeout=0,
    )
    work_until(fixed, all_finished(fixed, [job_id]))
    job = fixed.get(job_id)
    assert (job.status, job.result, job.attempt) == (JobStatus.SUCCEEDED, "sent Welcome", 1)
    assert jobs_app.RUNS[job_id] == runs + 1


def test_a_payload_the_handler_refuses_changes_nothing(deploy, tmp_path):
    w, fixed = deploy
    job_id = w.dead_value[0]
    before = w.app.get(job_id)

    # WHEN the new payload (from stdin) still lacks the subject, or is no JSON at all, or is missing
    runner = CliRunner()
    argv = ["jobs", "retry", job_id, "--payload", "-", "--app", APP_PATH, "--endpoint-url", w.endpoint]
    jobs_app.current = fixed
    invalid = runner.invoke(cli, argv, input='{"to": "user0@example.com"}', env={"COLUMNS": "250"})
    not_json = runner.invoke(cli, argv, input="{nope", env={"COLUMNS": "250"})
    missing = w.cli("jobs", "retry", job_id, "--payload", str(tmp_path / "absent.json"), app=fixed)

    # THEN each is one clear line and a usage exit...
    assert invalid.exit_code == EXIT_USAGE
    line = one_error_line(invalid.stderr)
    assert f"job {job_id} cannot be retried: the new payload is refused" in line and "subject" in line
    assert not_json.exit_code == EXIT_USAGE and "not a readable JSON file" in one_error_line(not_json.stderr)
    assert missing.code == EXIT_USAGE and "absent.json" in one_error_line(missing.err)
    # ...and the record is as it was: dead, its payload and hash, no audit entry
    after = w.app.get(job_id)
    assert (after.status, after.payload, after.payload_hash) == (
        JobStatus.DEAD,
        before.payload,
        before.payload_hash,
    )
    assert operator.audit_entries(after) == []


def test_a_filtered_dlq_replay_gives_every_matched_job_the_payload(deploy, tmp_path):
    w, fixed = deploy
    chosen, other = w.dead_value[0], w.dead_value[1]
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(FIXED))
    bad.write_text('{"to": "user0@example.com"}')
    hashes = {j: w.app.get(j).payload_hash for j in w.dead_value}

    # An unfiltered replay would give one payload to every dead job of every type: refused
    unfiltered = w.cli("dlq", "replay", "--payload", str(good), app=fixed)
    assert unfiltered.code == EXIT_USAGE and "--job-id or --type" in one_error_line(unfiltered.err)

    # A dry run shows what would change, and changes nothing
    dry = w.cli("dlq", "replay", "--job-id", chosen, "--payload", str(good), "--dry-run", "--json", app=fixed)
    assert dry.code == 0, dry.err
    (item,) = dry.json["items"]
    new_hash = payload_hash("mail.send", 1, FIXED)
    assert item["outcome"] == "would_replay"
    assert item["reason"] == f"payload version 1 → 1, hash {hashes[chosen][:12]} → {new_hash[:12]}"
    human = w.cli("dlq", "replay", "--job-id", chosen, "--payload", str(good), "--dry-run", app=fixed)
    assert "would replay 1" in human.out and new_hash[:12] in human.out

    # A payload the handler refuses is skipped with the reason
    refused = w.cli("dlq", "replay", "--job-id", chosen, "--payload", str(bad), "--json", app=fixed)
    assert refused.code == EXIT_PARTIAL
    assert "the new payload is refused" in refused.json["items"][0]["reason"]
    assert {w.app.get(j).payload_hash for j in w.dead_value} == set(hashes.values())
    assert {w.app.get(j).status for j in w.dead_value} == {JobStatus.DEAD}
    assert depth(w.app, "mail", dlq=True)["visible"] == 3

    # WHEN the replay runs, only the chosen job is requeued with the new payload, audited
    run = w.cli("dlq", "replay", "--job-id", chosen, "--payload", str(good), "--json", app=fixed)
    assert run.code == 0, run.err
    assert run.json["counts"]["replayed"] == 1
    job = w.app.get(chosen)
    assert (job.status, job.payload, job.payload_hash) == (JobStatus.QUEUED, FIXED, new_hash)
    (entry,) = operator.audit_entries(job)
    assert (entry["action"], entry["old_payload_hash"], entry["new_payload_hash"]) == (
        "replay",
        hashes[chosen],
        new_hash,
    )
    assert entry["message_id"]
    assert (w.app.get(other).status, w.app.get(other).payload_hash) == (JobStatus.DEAD, hashes[other])
    assert depth(w.app, "mail", dlq=True)["visible"] == 2

    # THEN it runs with that payload
    work_until(fixed, all_finished(fixed, [chosen]))
    assert (fixed.get(chosen).status, fixed.get(chosen).result) == (JobStatus.SUCCEEDED, "sent Welcome")


def test_a_job_cancelled_while_it_waited_runs_with_the_new_payload_without_its_own_message(fresh, tmp_path):
    # GIVEN a job cancelled before any worker saw it: only its own (delayed) message has its payload
    w = fresh(mails=0, perm=False, extra=False)
    job_id = w.app.enqueue("orders.ok", {"order_id": "o-typo"}, delay=600)
    w.app.cancel(job_id)
    path = tmp_path / "order.json"
    path.write_text('{"order_id": "o-fixed"}')

    # WHEN it is retried with a corrected payload
    assert w.cli("jobs", "retry", job_id, "--payload", str(path)).code == 0

    # THEN a hint with the new payload runs it now (its own message, which would be refused, is not waited for)
    work_until(w.app, all_finished(w.app, [job_id]))
    assert (w.app.get(job_id).status, w.app.get(job_id).result) == (JobStatus.SUCCEEDED, {"order": "o-fixed"})
