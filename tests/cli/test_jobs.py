"""`sqsjobs jobs get|list|cancel|retry`, `stats` and `enqueue` on data a worker run produced (MiniStack)."""

from __future__ import annotations

import json

from sqsjobs import JobStatus
from sqsjobs.cli.common import EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_USAGE
from sqsjobs.testing import all_finished, work_until
from tests.cli import jobs_app


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ── jobs get ─────────────────────────────────────────────────────────────────────────────────
def test_get_shows_a_retried_job_with_its_history(world):
    data = world.cli("jobs", "get", world.flaky, "--json").json
    assert data["status"] == "succeeded"
    assert (data["attempt"], data["max_attempts"]) == (2, 3)
    assert [h["outcome"] for h in data["history"]] == ["retry", "succeeded"]
    assert data["last_error"]["class"] == "RuntimeError"
    assert data["result"] == "second time lucky"

    human = world.cli("jobs", "get", world.flaky)
    assert human.code == 0
    assert "succeeded" in human.out and "attempts" in human.out
    assert "RuntimeError: transient glitch" in human.out


def test_get_says_why_a_job_died_with_the_traceback(world):
    data = world.cli("jobs", "get", world.dead_value[0], "--json").json
    assert data["status"] == "dead"
    assert data["reason"] == "attempts exhausted (2/2)"
    assert data["last_error"]["class"] == "ValueError"
    assert 'raise ValueError(f"smtp refused' in data["last_error"]["traceback"]

    human = world.cli("jobs", "get", world.dead_perm).out
    assert "permanent error" in human and "PermanentError: mailbox perm@example.com is gone" in human


def test_an_unknown_id_is_one_line_and_exit_3(world):
    run = world.cli("jobs", "get", "no-such-job")
    assert run.code == EXIT_NOT_FOUND
    assert "no job with id 'no-such-job'" in _one_error_line(run.err)


# ── jobs list ────────────────────────────────────────────────────────────────────────────────
def test_list_by_status_comes_from_the_status_index_newest_first(world):
    page = world.cli("jobs", "list", "--status", "dead", "--json").json
    assert page["index"] == "by_status"
    assert {j["id"] for j in page["jobs"]} == set(world.dead)
    times = [j["at"] for j in page["jobs"]]
    assert times == sorted(times, reverse=True)
    assert page["next_cursor"] is None

    queued = world.cli("jobs", "list", "--status", "queued", "--json").json
    assert [j["id"] for j in queued["jobs"]] == [world.waiting]

    human = world.cli("jobs", "list", "--status", "dead")
    assert human.code == 0
    assert all(i in human.out for i in world.dead) and "attempts exhausted (2/2)" in human.out


def test_list_by_type_queue_and_tenant_uses_their_indexes(world):
    by_type = world.cli("jobs", "list", "--type", "orders.ok", "--json").json
    assert by_type["index"] == "by_type"
    assert {j["id"] for j in by_type["jobs"]} == {*world.ok, world.waiting}

    by_queue = world.cli("jobs", "list", "--queue", "mail", "--json").json
    assert by_queue["index"] == "by_queue"
    assert {j["id"] for j in by_queue["jobs"]} == set(world.dead)
    assert {j["status"] for j in by_queue["jobs"]} == {"dead"}

    by_tenant = world.cli("jobs", "list", "--tenant", "acme", "--json").json
    assert by_tenant["index"] == "by_tenant"
    assert [j["id"] for j in by_tenant["jobs"]] == [world.tenant_job]

    both = world.cli("jobs", "list", "--status", "succeeded", "--type", "orders.flaky", "--json").json
    assert [j["id"] for j in both["jobs"]] == [world.flaky]


def test_list_pages_with_a_cursor_without_repeats_or_gaps(world):
    everything = world.cli("jobs", "list", "--json").json
    all_ids = [j["id"] for j in everything["jobs"]]
    assert set(all_ids) == {*world.ok, world.flaky, *world.dead, world.waiting}
    created = [j["created_at"] for j in everything["jobs"]]
    assert created == sorted(created, reverse=True)

    seen, cursor, pages = [], None, 0
    while True:
        args = ["jobs", "list", "--limit", "3", "--json"] + (["--cursor", cursor] if cursor else [])
        page = world.cli(*args).json
        seen += [j["id"] for j in page["jobs"]]
        pages += 1
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == all_ids
    assert pages == 3

    first = world.cli("jobs", "list", "--limit", "3")
    assert "more: --cursor" in first.out


def test_list_rejects_bad_input_in_one_line(world):
    bad_since = world.cli("jobs", "list", "--since", "yesterday")
    assert bad_since.code == EXIT_USAGE
    assert "15m, 2h or 7d" in _one_error_line(bad_since.err)
    other = world.cli("jobs", "list", "--limit", "2", "--json").json["next_cursor"]
    bad_cursor = world.cli("jobs", "list", "--status", "dead", "--cursor", other)
    assert bad_cursor.code == EXIT_USAGE
    assert "does not belong to this listing" in _one_error_line(bad_cursor.err)
    assert world.cli("jobs", "list", "--status", "bogus").code == EXIT_USAGE
    recent = world.cli("jobs", "list", "--since", "1h", "--status", "dead", "--json").json
    assert {j["id"] for j in recent["jobs"]} == set(world.dead)


# ── stats ────────────────────────────────────────────────────────────────────────────────────
def test_stats_counts_queues_and_types(world):
    data = world.cli("stats", "--json").json
    queues = {q["queue"]: q for q in data["queues"]}
    assert queues["mail"]["dlq"] == 3
    assert queues["default"]["delayed"] == 1  # the job that waits 600 s
    assert queues["default"]["visible"] == 0
    types = {t["type"]: t for t in data["types"]}
    assert types["orders.ok"]["counts"]["succeeded"] == 3
    assert types["orders.ok"]["counts"]["queued"] == 1
    assert types["orders.ok"]["oldest_due_s"] is None  # not due yet
    assert types["orders.flaky"]["counts"]["succeeded"] == 1
    assert types["mail.send"]["counts"]["dead"] == 3
    assert all(t["expired_leases"] == 0 for t in data["types"])

    human = world.cli("stats")
    assert human.code == 0 and "mail.send" in human.out and "job types" in human.out

    watched = world.cli("stats", "--watch", "--count", "2", "--interval", "0.1", "--json")
    lines = watched.out.strip().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["types"] for line in lines)


# ── cancel, retry, enqueue (each on an app of its own) ───────────────────────────────────────
def test_retry_requeues_a_dead_job_once_with_an_audit_entry(fresh):
    w = fresh(mails=1, perm=False, extra=False)
    job_id = w.dead_value[0]
    jobs_app.BROKEN["mail"] = False

    run = w.cli("jobs", "retry", job_id, "--json")
    assert run.code == 0, run.err
    assert run.json["status"] == "queued"
    job = w.app.get(job_id)
    assert (job.status, job.attempt, job.finished_at) == (JobStatus.QUEUED, 0, None)
    audit = w.cli("jobs", "get", job_id, "--json").json["audit"]
    assert [(a["action"], a["from"]) for a in audit] == [("retry", "dead")]

    again = w.cli("jobs", "retry", job_id)
    assert again.code == EXIT_REFUSED
    assert "only cancelled or dead jobs can be retried" in _one_error_line(again.err)

    work_until(w.app, all_finished(w.app, [job_id]))
    assert w.app.get(job_id).status is JobStatus.SUCCEEDED
    assert w.cli("jobs", "retry", "no-such-job").code == EXIT_NOT_FOUND


def test_cancel_a_waiting_job_then_retry_it(fresh):
    w = fresh(mails=0, perm=False, extra=False)
    job_id = w.app.enqueue("orders.ok", {"order_id": "later"}, delay=600)

    run = w.cli("jobs", "cancel", job_id, "--json")
    assert run.json == {"id": job_id, "result": "cancelled"}
    assert w.app.get(job_id).status is JobStatus.CANCELLED

    again = w.cli("jobs", "cancel", job_id)
    assert again.code == EXIT_REFUSED and "cancelled" in _one_error_line(again.err)
    assert w.cli("jobs", "cancel", "no-such-job").code == EXIT_NOT_FOUND

    assert w.cli("jobs", "retry", job_id).code == 0
    assert w.app.get(job_id).status is JobStatus.QUEUED


def test_enqueue_takes_json_or_a_file_and_rejects_bad_input(fresh, tmp_path):
    w = fresh(mails=0, perm=False, extra=False)
    payload = tmp_path / "order.json"
    payload.write_text('{"order_id": "from-file"}')

    run = w.cli("enqueue", "orders.ok", "--payload", f"@{payload}", "--json")
    assert run.code == 0, run.err
    assert w.app.get(run.json["id"]).payload == {"order_id": "from-file"}

    assert w.cli("enqueue", "orders.ok", "--payload", "{nope").code == EXIT_USAGE
    unknown = w.cli("enqueue", "nope.job", "--payload", "{}")
    assert unknown.code == EXIT_USAGE and "no handler registered" in _one_error_line(unknown.err)
    invalid = w.cli("enqueue", "orders.ok", "--payload", '{"id": 1}')
    assert invalid.code == EXIT_USAGE and "order_id" in _one_error_line(invalid.err)


def test_no_credentials_is_one_actionable_line(world, monkeypatch, tmp_path):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask a metadata endpoint

    run = world.cli("jobs", "get", world.flaky)

    assert run.code == 1
    assert "no AWS credentials found" in _one_error_line(run.err)
