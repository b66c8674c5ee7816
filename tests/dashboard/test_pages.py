"""The dashboard over real HTTP on MiniStack: what the pages show, and what they refuse.

A real worker process kills the jobs (a handler raising ``PermanentError`` with markup as its
message); the pages are read and the forms posted as a browser would, including from another
origin. The browser itself is in test_browser.py.
"""

from __future__ import annotations

import html
import http.client
from urllib.parse import urlencode, urlsplit

import pytest

from sqsjobs import JobStatus
from tests.dashboard.conftest import XSS, Served, kill_jobs, start_worker, stop_worker

pytestmark = pytest.mark.slow


def call(base: str, method: str, path: str, form: dict[str, str] | None = None, **headers: str):
    u = urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    body = urlencode(form or {}, doseq=True) if method == "POST" else None
    if body is not None:
        headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
    try:
        conn.request(method, path, body=body, headers={k.replace("_", "-"): v for k, v in headers.items()})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


@pytest.fixture
def dead(ministack_url, dash_app, tmp_path):
    """An app with two jobs killed by a real worker (stopped again), and the dashboard serving it."""
    app = dash_app(ministack_url)
    marker = tmp_path / "marker"
    marker.write_text(XSS)
    worker = start_worker(app)
    try:
        ids = kill_jobs(app, marker, 2)
    finally:
        stop_worker(worker)
    with Served(app) as served:
        yield app, served.url, ids


def test_the_overview_shows_dead_jobs_with_their_error_as_text_and_counts_them(dead):
    _, url, ids = dead
    # WHEN the overview is read
    status, headers, page = call(url, "GET", "/")
    # THEN every dead job is listed with its reason and its error, escaped: no markup of the handler survives
    assert status == 200
    for job_id in ids:
        assert f'href="/ui/jobs/{job_id}"' in page
    assert "permanent error" in page
    assert html.escape(f"PermanentError: {XSS}", quote=True) in page
    assert "<script>document.title" not in page and "<img src=x" not in page
    # AND no inline script could run even if something slipped through
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "<script>" not in page.replace('<script src="/ui/static/dashboard.js" defer></script>', "")
    # AND the counts say two fragile jobs are dead and both messages are in the DLQ
    assert '<span class="n dead">2</span>' in page
    assert "<td>default</td>" in page and '<span class="bad">2</span>' in page
    # AND the workers panel read the worker registry: the worker that killed them deregistered as
    # it stopped (a registry it cannot read is shown as such: tests/unit/test_dashboard_views.py)
    assert "No worker has registered." in page


def test_the_job_page_shows_the_record_and_unknown_ids_get_a_404(dead):
    _, url, ids = dead
    status, _, page = call(url, "GET", f"/ui/jobs/{ids[0]}")
    assert status == 200
    assert '<span class="status dead">dead</span>' in page
    assert html.escape(XSS, quote=True) in page and "<img src=x" not in page
    assert "Attempts" in page and "retry this job" in page
    # A job id that is markup is echoed as text in the 404
    status, _, page = call(url, "GET", "/ui/jobs/%3Cb%3Enope")
    assert status == 404 and "&lt;b&gt;nope" in page and "<b>" not in page


def test_state_changing_forms_refuse_another_origin_and_bad_filters(dead):
    app, url, ids = dead
    # WHEN another site makes the operator's browser post the retry form
    status, _, page = call(url, "POST", f"/ui/jobs/{ids[0]}/retry", Origin="http://evil.example")
    # THEN it is refused and the job is still dead
    assert status == 403 and "this server's own pages" in page
    status, _, _ = call(url, "POST", "/ui/replay", {"job_id": ids[0]}, Sec_Fetch_Site="cross-site")
    assert status == 403
    assert app.get(ids[0]).status is JobStatus.DEAD
    # AND a filter the flows cannot read is a 400 that says what is expected
    status, _, page = call(url, "POST", "/ui/replay/dry-run", {"since": "yesterday"})
    assert status == 400 and "expected a duration like 90s" in page
    status, _, page = call(url, "POST", "/ui/replay/dry-run", {"queue": "nope"})
    assert status == 400 and "is not one of default" in page
    # AND a confirmation without the dry run's ids replays nothing
    status, _, page = call(url, "POST", "/ui/replay", {"type": "fragile"})
    assert status == 400 and "Run the dry run first" in page
    assert {app.get(i).status for i in ids} == {JobStatus.DEAD}


def test_retry_requeues_one_dead_job_and_refuses_a_second_time(dead):
    app, url, ids = dead
    origin = url
    # WHEN the retry button of the first dead job is pressed
    status, headers, _ = call(url, "POST", f"/ui/jobs/{ids[0]}/retry", Origin=origin)
    # THEN the job is queued again, audited, and the browser is sent to its page
    assert status == 303 and headers["location"] == f"/ui/jobs/{ids[0]}?done=retried"
    job = app.get(ids[0])
    assert job.status is JobStatus.QUEUED and job.attempt == 0
    _, _, page = call(url, "GET", headers["location"])
    assert "Queued again" in page
    # AND the other dead job is untouched
    assert app.get(ids[1]).status is JobStatus.DEAD
    # AND pressing it again (a stale page) is a 409 that says why
    status, _, page = call(url, "POST", f"/ui/jobs/{ids[0]}/retry", Origin=origin)
    assert status == 409 and "only dead or cancelled jobs can be retried" in page


def test_a_dry_run_changes_nothing_and_the_confirmation_replays_only_what_it_listed(dead):
    app, url, ids = dead
    # WHEN a dry run for the fragile type is posted
    status, _, page = call(url, "POST", "/ui/replay/dry-run", {"type": "fragile"}, Origin=url)
    # THEN it lists both jobs, changes nothing, and the confirmation carries both ids
    assert status == 200 and "2 job(s) would be replayed" in page
    assert all(f'name="job_id" value="{i}"' in page for i in ids)
    assert {app.get(i).status for i in ids} == {JobStatus.DEAD}
    # WHEN only the first id is confirmed
    status, _, page = call(url, "POST", "/ui/replay", {"type": "fragile", "job_id": ids[0]}, Origin=url)
    # THEN only that job is queued again; the other stays dead, its DLQ copy left in place
    assert status == 200 and "Replayed 1 job(s)" in page
    assert app.get(ids[0]).status is JobStatus.QUEUED
    assert app.get(ids[1]).status is JobStatus.DEAD
    status, _, page = call(url, "POST", "/ui/replay/dry-run", {}, Origin=url)
    assert "1 job(s) would be replayed" in page and ids[1] in page
