"""The dashboard's HTML, pure: every untrusted value comes out as text, markup built here stays markup."""

from __future__ import annotations

from sqsjobs.api import dashboard_views as views
from sqsjobs.ops.inspect import JobRow
from sqsjobs.ops.replay import ReplayItem, ReplaySummary
from sqsjobs.ops.worker_views import WorkerInfo, WorkerStatus

EVIL = '<script>alert(1)</script>"\' onmouseover="x"'


def row(job_id: str = "j1", reason: str = EVIL, job_type: str = EVIL) -> JobRow:
    return JobRow(job_id, "dead", job_type, "default", None, 3, 3, 1.0, 2.0, reason)


def test_a_reason_error_and_type_that_are_markup_are_shown_as_text():
    # GIVEN a dead job whose reason, type and error are all markup
    out = views.dead_panel([row()], {"j1": {"class": EVIL, "message": EVIL}}, now=10.0, more=False)
    # THEN none of it is markup on the page, and the text is all there
    assert "<script>" not in out and 'onmouseover="x"' not in out
    assert out.count("&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27; onmouseover=&quot;x&quot;") == 4


def test_a_job_id_that_is_markup_cannot_break_out_of_its_link_or_form():
    out = views.dead_panel([row(job_id='"><script>x</script>')], {}, now=10.0, more=False)
    assert "<script>" not in out
    # the id is percent-encoded in URLs and escaped in text
    assert 'href="/ui/jobs/%22%3E%3Cscript%3Ex%3C%2Fscript%3E"' in out
    assert 'action="/ui/jobs/%22%3E%3Cscript%3Ex%3C%2Fscript%3E/retry"' in out


def test_markup_built_by_the_views_is_not_escaped_twice():
    assert views.h(views.Html("<b>x</b>")) == "<b>x</b>"
    assert views.join(["<b>", views.Html("<i>")]) == "&lt;b&gt;<i>"
    assert views.status_badge("<x>") == '<span class="status unknown">&lt;x&gt;</span>'


def test_the_job_page_escapes_payload_traceback_and_history():
    data = {
        "id": "j1",
        "type": "t",
        "queue": "q",
        "status": "dead",
        "attempt": 1,
        "max_attempts": 1,
        "reason": EVIL,
        "payload": {"html": EVIL},
        "payload_version": 1,
        "payload_size": 10,
        "last_error": {"class": EVIL, "message": EVIL, "traceback": EVIL},
        "history": [
            {
                "attempt": 1,
                "outcome": "dead",
                "started_at": None,
                "finished_at": None,
                "worker": EVIL,
                "error": EVIL,
            }
        ],
        "audit": [{"action": "replay", "by": EVIL}],
        "parent_id": "p1",
        "root_id": None,
    }
    out = views.job_page_body(data, now=0.0)
    assert "<script>" not in out and 'onmouseover="x"' not in out
    assert 'href="/ui/jobs/p1"' in out  # the parent id links to its page; no batch tree yet
    assert "retry this job" in out


def test_the_workers_panel_renders_the_registry_or_says_it_is_missing():
    assert "worker registry not available" in views.workers_panel(None, now=0.0)
    w = WorkerInfo(
        id="w1",
        host=EVIL,
        pid=42,
        version="0.1.0",
        queues=("default",),
        job_types=("fragile",),
        concurrency=8,
        started_at=100.0,
        last_seen=190.0,
        status=WorkerStatus.LIVE,
        running=("job-1",),
        running_count=3,
        interval_s=30.0,
        expires_at=380.0,
        refreshes=3,
    )
    out = views.workers_panel([w], now=200.0)
    assert "<script>" not in out
    assert '<span class="status live">live</span>' in out and 'href="/ui/jobs/job-1"' in out
    assert "+2" in out  # two more running jobs than the registry lists by id
    assert "10 s ago" in out and "fragile" in out
    assert "No worker has registered" in views.workers_panel([], now=0.0)


def test_the_confirmation_carries_only_the_ids_the_dry_run_would_replay():
    summary = ReplaySummary(
        dry_run=True,
        items=[
            ReplayItem("m1", "default", "a", "t", "would_replay"),
            ReplayItem("m2", "default", "b", "t", "skipped", "unknown type"),
        ],
    )
    out = views.replay_confirm(summary, {"type": "t", "queue": "", "since": ""}, limit=200)
    assert '<input type="hidden" name="job_id" value="a">' in out
    assert 'value="b"' not in out
    assert '<input type="hidden" name="type" value="t">' in out and 'name="queue"' not in out
    empty = views.replay_confirm(ReplaySummary(dry_run=True), {}, limit=200)
    assert "confirm-replay" not in empty and "No message in the DLQs matches" in empty
