"""`sqsjobs dlq list|show|replay` on dead-lettered jobs a worker run produced (MiniStack)."""

from __future__ import annotations

import pytest

from sqsjobs import JobStatus
from sqsjobs.cli.common import EXIT_NOT_FOUND, EXIT_PARTIAL, EXIT_REFUSED
from sqsjobs.ops.dlq import DlqFilter
from sqsjobs.ops.replay import replay_flow
from sqsjobs.ops.requeue import requeue_flow
from sqsjobs.store import operator
from sqsjobs.testing import all_finished, work_until
from tests.cli import jobs_app
from tests.cli.conftest import new_app
from tests.integration.helpers import depth, queue_url, sqs_call


def audit(app, job_id):
    return operator.audit_entries(app.get(job_id))


# ── reading ──────────────────────────────────────────────────────────────────────────────────
def test_list_shows_each_message_with_its_reason_and_leaves_them_in_place(world):
    data = world.cli("dlq", "list", "--json").json["messages"]
    assert {m["job_id"] for m in data} == set(world.dead)
    by_job = {m["job_id"]: m for m in data}
    assert by_job[world.dead_perm]["reason"] == "permanent error"
    assert by_job[world.dead_perm]["error_class"] == "PermanentError"
    assert by_job[world.dead_value[0]]["reason"] == "attempts exhausted (2/2)"
    assert {m["record_status"] for m in data} == {"dead"}
    assert {m["queue"] for m in data} == {"mail"}

    value = world.cli("dlq", "list", "--error-class", "ValueError", "--json").json["messages"]
    assert {m["job_id"] for m in value} == set(world.dead_value)
    assert world.cli("dlq", "list", "--type", "orders.ok", "--json").json["messages"] == []
    assert len(world.cli("dlq", "list", "--since", "1h", "--json").json["messages"]) == 3

    human = world.cli("dlq", "list")
    assert human.code == 0 and "attempts exhausted (2/2)" in human.out and "3 message(s)" in human.out
    # Reading hid nothing for good: every message is visible again.
    assert depth(world.app, "mail", dlq=True) == {"visible": 3, "in_flight": 0, "delayed": 0}


def test_show_finds_a_message_by_job_or_message_id(world):
    shown = world.cli("dlq", "show", world.dead_perm, "--json").json
    assert shown["message"]["job_id"] == world.dead_perm
    assert shown["job"]["status"] == "dead"
    assert "PermanentError" in shown["job"]["last_error"]["traceback"]

    by_message = world.cli("dlq", "show", shown["message"]["message_id"], "--json").json
    assert by_message["message"]["job_id"] == world.dead_perm

    human = world.cli("dlq", "show", world.dead_perm)
    assert human.code == 0 and "mailbox perm@example.com is gone" in human.out

    missing = world.cli("dlq", "show", "nothing-like-this")
    assert missing.code == EXIT_NOT_FOUND and missing.err.strip().startswith("error: no DLQ message")
    assert depth(world.app, "mail", dlq=True)["visible"] == 3


def test_a_dry_run_changes_nothing(world):
    run = world.cli("dlq", "replay", "--dry-run", "--json")
    assert run.code == 0, run.err
    assert run.json["counts"]["would_replay"] == 3
    assert {i["job_id"] for i in run.json["items"]} == set(world.dead)

    for job_id in world.dead:
        assert world.app.get(job_id).status is JobStatus.DEAD
        assert audit(world.app, job_id) == []
    assert depth(world.app, "mail", dlq=True) == {"visible": 3, "in_flight": 0, "delayed": 0}
    human = world.cli("dlq", "replay", "--dry-run")
    assert "[dry run] would replay 3" in human.out


# ── replaying ────────────────────────────────────────────────────────────────────────────────
def test_a_filtered_replay_requeues_exactly_that_set_and_they_then_succeed(fresh):
    w = fresh(mails=2, perm=True, extra=False)
    jobs_app.BROKEN["mail"] = False  # the fix is deployed

    run = w.cli("dlq", "replay", "--error-class", "ValueError", "--rate", "50", "--json")
    assert run.code == 0, run.err
    assert run.json["counts"]["replayed"] == 2
    assert {i["job_id"] for i in run.json["items"] if i["outcome"] == "replayed"} == set(w.dead_value)
    assert run.json["unmatched"] == 1

    for job_id in w.dead_value:
        job = w.app.get(job_id)
        assert (job.status, job.attempt, job.idempotency_key) == (JobStatus.QUEUED, 0, None)
        entries = audit(w.app, job_id)
        assert [(e["action"], e["from"], e["reason"]) for e in entries] == [
            ("replay", "dead", "attempts exhausted (2/2)")
        ]
        assert entries[0]["message_id"]
    assert w.app.get(w.dead_perm).status is JobStatus.DEAD
    assert depth(w.app, "mail", dlq=True)["visible"] == 1  # only the unmatched one

    runs_before = {j: jobs_app.RUNS[j] for j in w.dead_value}
    work_until(w.app, all_finished(w.app, w.dead_value))
    for job_id in w.dead_value:
        assert w.app.get(job_id).status is JobStatus.SUCCEEDED
        assert jobs_app.RUNS[job_id] == runs_before[job_id] + 1


def test_an_interrupted_replay_rerun_replays_each_job_once(fresh):
    w = fresh(mails=4, perm=False, extra=False)
    jobs_app.BROKEN["mail"] = False
    dead = list(w.dead_value)

    # GIVEN a replay that crashes after two messages...
    done = []

    def crash_after_two(item):
        done.append(item)
        if len(done) == 2:
            raise RuntimeError("operator's laptop died")

    with pytest.raises(RuntimeError, match="laptop"):
        w.app.run(
            replay_flow(
                settings=w.app.settings,
                registry=w.app.registry,
                queue_urls=w.app.queue_urls,
                queues=["mail"],
                flt=DlqFilter(),
                clock=w.app.clock,
                on_item=crash_after_two,
            )
        )
    first = {i.job_id for i in done}
    assert {i.outcome for i in done} == {"replayed"}
    assert {j for j in dead if w.app.get(j).status is JobStatus.QUEUED} == first
    # ...the messages it held but had not reached are visible again at once.
    assert depth(w.app, "mail", dlq=True) == {"visible": 2, "in_flight": 0, "delayed": 0}

    # AND one more job whose requeue was written but whose DLQ copy was never deleted (a kill between the two).
    torn = next(j for j in dead if j not in first)
    w.app.run(
        requeue_flow(
            torn,
            settings=w.app.settings,
            registry=w.app.registry,
            queue_urls=w.app.queue_urls,
            action="replay",
            now=w.app.clock.now(),
        )
    )
    assert w.app.get(torn).status is JobStatus.QUEUED

    # WHEN it is re-run, first with a limit, then to the end
    limited = w.cli("dlq", "replay", "--limit", "1", "--json")
    assert limited.code == 0, limited.err
    assert limited.json["counts"]["replayed"] == 1
    rest = w.cli("dlq", "replay", "--json")
    assert rest.code == 0, rest.err

    # THEN every job was requeued exactly once, the torn one was only cleaned up, the DLQ is empty
    outcomes = [i for r in (limited.json, rest.json) for i in r["items"]]
    assert sorted(i["job_id"] for i in outcomes if i["outcome"] == "replayed") == sorted(
        j for j in dead if j not in first and j != torn
    )
    assert [i["job_id"] for i in outcomes if i["outcome"] == "stale"] == [torn]
    for job_id in dead:
        assert len(audit(w.app, job_id)) == 1
    assert depth(w.app, "mail", dlq=True) == {"visible": 0, "in_flight": 0, "delayed": 0}

    runs_before = {j: jobs_app.RUNS[j] for j in dead}
    work_until(w.app, all_finished(w.app, dead))
    assert all(jobs_app.RUNS[j] == runs_before[j] + 1 for j in dead)
    assert all(w.app.get(j).status is JobStatus.SUCCEEDED for j in dead)


def test_a_payload_that_no_longer_validates_is_skipped_with_the_reason(fresh):
    w = fresh(mails=2, perm=False, extra=False)
    # The new deploy requires a subject; the dead jobs' payloads do not have one.
    v2 = new_app(w.endpoint, name=w.app.name, strict=True)
    sqs_call(
        w.app, "send_message", QueueUrl=queue_url(w.app, "mail", dlq=True), MessageBody="not json at all"
    )

    run = w.cli("dlq", "replay", "--json", app=v2)
    assert run.code == EXIT_PARTIAL
    skipped = {i["job_id"] or "malformed": i["reason"] for i in run.json["items"]}
    assert set(skipped) == {*w.dead_value, "malformed"}
    for job_id in w.dead_value:
        assert "does not validate" in skipped[job_id] and "subject" in skipped[job_id]
        assert w.app.get(job_id).status is JobStatus.DEAD
    assert skipped["malformed"].startswith("malformed message")
    assert run.json["counts"]["replayed"] == 0
    assert depth(w.app, "mail", dlq=True)["visible"] == 3

    human = w.cli("dlq", "replay", app=v2)
    assert human.code == EXIT_PARTIAL and "skipped 3" in human.out

    refused = w.cli("jobs", "retry", w.dead_value[0], app=v2)
    assert refused.code == EXIT_REFUSED and "cannot be retried with the current code" in refused.err
    v2.close()
