"""`sqsjobs jobs get|list|cancel|retry`, `stats` and `enqueue` on MiniStack.

Listings, counts and lookups read the ``ledger`` (records in every state, written as the store writes
them, no worker); the job's history, cancel, retry and enqueue use the ``world`` a worker run produced.
"""

from __future__ import annotations

import json
from dataclasses import replace

from sqsjobs import JobStatus
from sqsjobs.cli.common import EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_USAGE
from sqsjobs.ops._common import iso
from sqsjobs.ops.inspect import ListQuery, list_flow
from sqsjobs.ops.stats import stats_flow
from sqsjobs.store.codec import payload_hash
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


def test_an_unknown_id_is_one_line_and_exit_3(ledger):
    run = ledger.cli("jobs", "get", "no-such-job")
    assert run.code == EXIT_NOT_FOUND
    assert "no job with id 'no-such-job'" in _one_error_line(run.err)


# ── jobs list: dead jobs from the attention index ───────────────────────────────────────────
def test_dead_jobs_come_from_the_attention_index_newest_finished_first(ledger):
    # WHEN an operator lists dead jobs
    page = ledger.cli("jobs", "list", "--status", "dead", "--json").json

    # THEN the 32 dead shards of the attention index serve them, merged newest first, in one page
    assert page["index"] == "attention"
    assert [j["id"] for j in page["jobs"]] == ledger.dead
    assert [j["at"] for j in page["jobs"]] == [iso(ledger.at[i]) for i in ledger.dead]
    assert page["next_cursor"] is None and page["since"] is None

    # AND other filters narrow it, --since on the finished time
    mail = ledger.cli("jobs", "list", "--status", "dead", "--queue", "mail", "--json").json
    assert [j["id"] for j in mail["jobs"]] == [ledger.dead[0], ledger.dead[2], ledger.dead[3]]
    flaky = ledger.cli("jobs", "list", "--status", "dead", "--type", "orders.flaky", "--json").json
    assert [j["id"] for j in flaky["jobs"]] == [ledger.dead[1]]
    recent = ledger.cli("jobs", "list", "--status", "dead", "--since", "1h", "--json").json
    assert [j["id"] for j in recent["jobs"]] == ledger.dead[:3]

    human = ledger.cli("jobs", "list", "--status", "dead")
    assert human.code == 0
    assert all(i in human.out for i in ledger.dead) and "attempts exhausted (2/2)" in human.out
    assert "finished" in human.out and "32 dead shards" in human.out


def test_dead_jobs_page_over_the_shards_without_repeats_or_gaps(ledger):
    # GIVEN one dead job per page
    seen, cursor = [], None
    for _ in range(10):
        args = ["jobs", "list", "--status", "dead", "--limit", "1", "--json"]
        page = ledger.cli(*args, *(["--cursor", cursor] if cursor else [])).json
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    # THEN the pages together are the one-page listing, in its order
    assert seen == ledger.dead


# ── jobs list: everything else scans the table within a window ──────────────────────────────
def test_listings_by_status_scan_the_table_within_the_last_day(ledger):
    def ids(*args: str) -> list[str]:
        page = ledger.cli("jobs", "list", *args, "--json").json
        assert page["index"] == "scan" and page["next_cursor"] is None
        times = [j["at"] for j in page["jobs"]]
        assert times == sorted(times, reverse=True)  # newest updated first
        return [j["id"] for j in page["jobs"]]

    # WHEN an operator lists by status, THEN each status comes from a scan, updated in the last 24 h
    assert set(ids("--status", "succeeded")) == set(ledger.succeeded)
    assert set(ids("--status", "queued")) == {ledger.waiting, ledger.held}  # held: no message yet
    assert set(ids("--status", "running")) == {ledger.running, ledger.stuck}
    assert ids("--status", "retry_scheduled") == [ledger.retrying]
    assert ids("--status", "cancelled") == [ledger.cancelled]
    # AND --since widens or narrows the window on updated_at
    assert set(ids("--status", "succeeded", "--since", "3d")) == {*ledger.succeeded, ledger.old}
    assert ids("--status", "running", "--since", "5m") == [ledger.running]
    assert ids("--status", "succeeded", "--type", "orders.flaky") == [ledger.succeeded[-1]]


def test_listings_by_type_queue_and_tenant_scan_the_table(ledger):
    by_type = ledger.cli("jobs", "list", "--type", "orders.flaky", "--json").json
    assert by_type["index"] == "scan"
    assert {j["id"] for j in by_type["jobs"]} == {ledger.succeeded[-1], ledger.dead[1], ledger.retrying}

    by_queue = ledger.cli("jobs", "list", "--queue", "mail", "--json").json
    assert {j["id"] for j in by_queue["jobs"]} == {
        ledger.dead[0],
        ledger.dead[2],
        ledger.dead[3],
        ledger.stuck,
    }
    assert {j["queue"] for j in by_queue["jobs"]} == {"mail"}

    by_tenant = ledger.cli("jobs", "list", "--tenant", "acme", "--json").json
    assert [(j["id"], j["tenant"]) for j in by_tenant["jobs"]] == [(ledger.tenant_job, "acme")]

    human = ledger.cli("jobs", "list", "--queue", "mail")
    assert human.code == 0 and "updated" in human.out and "via a table scan" in human.out


def test_a_scan_listing_pages_with_a_cursor_without_repeats_or_gaps(ledger):
    everything = ledger.cli("jobs", "list", "--json").json
    assert {j["id"] for j in everything["jobs"]} == ledger.ids()
    assert everything["read"] == len(ledger.at)  # the scan read every record, the old one too

    for limit in (1, 2, 3, 5):
        seen, cursor, pages = [], None, 0
        while True:
            args = ["jobs", "list", "--limit", str(limit), "--json"]
            page = ledger.cli(*args, *(["--cursor", cursor] if cursor else [])).json
            assert len(page["jobs"]) <= limit
            times = [j["at"] for j in page["jobs"]]
            assert times == sorted(times, reverse=True)
            seen += [j["id"] for j in page["jobs"]]
            pages += 1
            cursor = page["next_cursor"]
            if not cursor:
                break
        assert sorted(seen) == sorted(ledger.ids()), f"limit {limit}"
        assert pages <= -(-len(seen) // limit) + 1

    first = ledger.cli("jobs", "list", "--limit", "3")
    assert "more: --cursor" in first.out


def test_a_scan_listing_reads_a_bounded_number_of_items_per_call(ledger):
    # GIVEN a listing that matches one record, and a budget of 2 items read per call
    query = ListQuery(tenant="acme", max_read=2)
    found, reads, cursor = [], [], None
    for _ in range(len(ledger.at)):
        page = ledger.app.run(list_flow(ledger.app.settings, replace(query, cursor=cursor), ledger.now))
        found += [r.id for r in page.rows]
        reads.append(page.read)
        cursor = page.next_cursor
        if not cursor:
            break
    # THEN each call reads at most 2 items (short or empty pages), and the cursor walks the whole table
    assert found == [ledger.tenant_job]
    assert max(reads) <= 2 and sum(reads) == len(ledger.at)


def test_list_rejects_bad_input_in_one_line(ledger):
    bad_since = ledger.cli("jobs", "list", "--since", "yesterday")
    assert bad_since.code == EXIT_USAGE
    assert "15m, 2h or 7d" in _one_error_line(bad_since.err)
    assert ledger.cli("jobs", "list", "--status", "bogus").code == EXIT_USAGE
    assert ledger.cli("jobs", "list", "--limit", "101").code == EXIT_USAGE

    # A cursor only continues the listing that printed it: same filters, same window
    scan = ledger.cli("jobs", "list", "--limit", "2", "--json").json["next_cursor"]
    dead = ledger.cli("jobs", "list", "--status", "dead", "--limit", "1", "--json").json["next_cursor"]
    typed = ledger.cli("jobs", "list", "--type", "orders.ok", "--limit", "1", "--json").json["next_cursor"]
    for args in (
        ("--status", "dead", "--cursor", scan),
        ("--cursor", dead),
        ("--type", "orders.flaky", "--cursor", typed),
        ("--type", "orders.ok", "--since", "2h", "--cursor", typed),
        ("--cursor", "not-a-cursor"),
    ):
        run = ledger.cli("jobs", "list", *args)
        assert run.code == EXIT_USAGE, args
        assert "does not belong to this listing" in _one_error_line(run.err)


# ── stats ────────────────────────────────────────────────────────────────────────────────────
def test_stats_counts_queues_and_types_from_one_scan(ledger):
    data = ledger.cli("stats", "--json").json
    queues = {q["queue"]: q for q in data["queues"]}
    assert (
        queues["default"]["delayed"] == 2
    )  # the jobs that wait 600 s and 300 s (a cancel leaves its message)
    assert queues["mail"]["dlq"] == 0
    types = {t["type"]: t for t in data["types"]}
    ok, flaky, mail = types["orders.ok"], types["orders.flaky"], types["mail.send"]
    # finished ones over the last hour (the job that succeeded two days ago and the dead one of 2 h are out)
    assert (ok["counts"]["succeeded"], ok["counts"]["cancelled"]) == (4, 1)
    assert (flaky["counts"]["succeeded"], flaky["counts"]["dead"]) == (1, 1)
    assert mail["counts"]["dead"] == 2
    # unfinished ones however old
    assert (ok["counts"]["queued"], ok["held"], ok["counts"]["running"]) == (2, 1, 1)
    assert (mail["counts"]["running"], mail["expired_leases"]) == (1, 1)
    assert ok["expired_leases"] == 0 and ok["oldest_due_s"] is None  # nothing due yet
    assert flaky["counts"]["retry_scheduled"] == 1 and flaky["oldest_due_s"] >= 10
    assert data["truncated"] is False

    wide = {t["type"]: t for t in ledger.cli("stats", "--window", "3d", "--json").json["types"]}
    assert wide["orders.ok"]["counts"]["succeeded"] == 5 and wide["mail.send"]["counts"]["dead"] == 3

    human = ledger.cli("stats")
    assert human.code == 0 and "mail.send" in human.out and "job types" in human.out

    watched = ledger.cli("stats", "--watch", "--count", "2", "--interval", "0.1", "--json")
    lines = watched.out.strip().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["types"] for line in lines)


def test_stats_stops_reading_at_its_cap_and_says_so(ledger):
    capped = ledger.app.run(stats_flow(ledger.app.settings, ledger.app.registry, ledger.now, max_entries=3))
    assert capped.truncated is True
    assert sum(sum(t.counts.values()) for t in capped.types) <= 3


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

    # A job cancelled while it waited keeps no payload in its record (its message carries it): the
    # retry queues it again and that message, still in the queue, brings it to a worker.
    assert w.cli("jobs", "retry", job_id).code == 0
    assert w.app.get(job_id).status is JobStatus.QUEUED


def test_enqueue_takes_json_or_a_file_and_rejects_bad_input(fresh, tmp_path):
    w = fresh(mails=0, perm=False, extra=False)
    payload = tmp_path / "order.json"
    payload.write_text('{"order_id": "from-file"}')

    run = w.cli("enqueue", "orders.ok", "--payload", f"@{payload}", "--json")
    assert run.code == 0, run.err
    job = w.app.get(run.json["id"])  # the record keeps the payload's hash; its message, the payload
    assert job.payload_hash == payload_hash("orders.ok", 1, {"order_id": "from-file"})

    assert w.cli("enqueue", "orders.ok", "--payload", "{nope").code == EXIT_USAGE
    unknown = w.cli("enqueue", "nope.job", "--payload", "{}")
    assert unknown.code == EXIT_USAGE and "no handler registered" in _one_error_line(unknown.err)
    invalid = w.cli("enqueue", "orders.ok", "--payload", '{"id": 1}')
    assert invalid.code == EXIT_USAGE and "order_id" in _one_error_line(invalid.err)


def test_no_credentials_is_one_actionable_line(ledger, monkeypatch, tmp_path):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask a metadata endpoint

    run = ledger.cli("jobs", "get", ledger.running)

    assert run.code == 1
    assert "no AWS credentials found" in _one_error_line(run.err)
