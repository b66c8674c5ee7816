"""Wait tokens attacked from outside: a real worker process, answers over HTTP from another process,
``app.tokens.complete``, and a token nobody answers (MiniStack).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from bench.proxy import Pending
from sqsjobs import JobStatus
from sqsjobs.errors import TokenExpired, TokenNotFound
from tests.api.helpers import serving
from tests.apps import stepped
from tests.integration.helpers import kill_group, wait_until, worker_env, worker_process
from tests.integration.holding import HoldFirst

pytestmark = pytest.mark.slow

APP = "tests.apps.stepped:app"


def calls(runs_dir: Path, job_id: str, step: str) -> int:
    path = runs_dir / f"{job_id}.{step}"
    return len(path.read_text().splitlines()) if path.exists() else 0


def token_of(runs_dir: Path, job_id: str) -> str | None:
    path = runs_dir / f"{job_id}.token"
    return path.read_text() if path.exists() else None


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(stepped.app.registry)
    app.provision()
    return app


def sweeper_process(app) -> subprocess.Popen[bytes]:
    """``sqsjobs sweep`` every second: the witness of a record held asleep on its token."""
    return subprocess.Popen(
        [sys.executable, "-m", "sqsjobs", "sweep", "--app", APP],
        env=worker_env(app, SQSJOBS_SWEEP_INTERVAL_S="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _asleep_on_its_token(app, tmp_path, job_id) -> str:
    wait_until(
        lambda: token_of(tmp_path, job_id) and app.get(job_id).status is JobStatus.QUEUED, 30, "waiting"
    )
    return str(token_of(tmp_path, job_id))


def test_a_job_waiting_on_a_token_is_woken_by_an_http_post_from_another_process(app, tmp_path):
    # GIVEN a worker and an order waiting for its approval (no slot held: the job is queued)
    job_id = app.enqueue("approval", {"runs_dir": str(tmp_path), "timeout_s": 120})
    proc = worker_process(app, APP, concurrency=2)
    try:
        token = _asleep_on_its_token(app, tmp_path, job_id)
        with serving(app, token="s3cret") as url:
            # WHEN another process posts the decision (the second post changes nothing)
            post = textwrap.dedent(f"""
                import httpx, sys
                for decision in ("approved", "rejected"):
                    r = httpx.post({url!r} + "/tokens/{token}", json={{"value": decision}},
                                   headers={{"Authorization": "Bearer s3cret"}})
                    print(r.status_code, r.json()["result"])
                r = httpx.post({url!r} + "/tokens/{token}", json={{"value": 1}})
                print(r.status_code)
                r = httpx.post({url!r} + "/tokens/{job_id}.t9", json={{"value": 1}},
                               headers={{"Authorization": "Bearer s3cret"}})
                print(r.status_code)
            """)
            out = subprocess.run(
                [sys.executable, "-c", post], capture_output=True, text=True, timeout=60, env=worker_env(app)
            )
            assert out.stdout.splitlines() == ["200 answered", "200 already answered", "401", "404"], (
                out.stderr
            )
            # THEN the job wakes with the first answer and ships, on its one attempt
            wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 30, "shipped")
    finally:
        kill_group(proc)
    job = app.get(job_id)
    assert (job.result, job.attempt) == ({"decision": "approved"}, 1)
    assert (calls(tmp_path, job_id, "charge"), calls(tmp_path, job_id, "ship")) == (1, 1)


def test_app_tokens_complete_wakes_the_job_fail_fails_it_and_an_unknown_token_is_not_found(app, tmp_path):
    job_id = app.enqueue("approval", {"runs_dir": str(tmp_path), "timeout_s": 120})
    refused = app.enqueue("approval", {"runs_dir": str(tmp_path), "timeout_s": 120})
    proc = worker_process(app, APP, concurrency=2)
    try:
        token = _asleep_on_its_token(app, tmp_path, job_id)
        assert app.tokens.fail(_asleep_on_its_token(app, tmp_path, refused), "card declined") == "answered"
        assert app.tokens.complete(token, {"by": "ops"}) == "answered"
        assert app.tokens.complete(token, {"by": "someone else"}) == "already answered"
        with pytest.raises(TokenNotFound):
            app.tokens.complete(f"{job_id}.t2", 1)
        with pytest.raises(TokenNotFound):
            app.tokens.complete("no-such-token", 1)
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 30, "shipped")
        wait_until(lambda: app.get(refused).status is JobStatus.DEAD, 30, "failed")
    finally:
        kill_group(proc)
    assert app.get(job_id).result == {"decision": {"by": "ops"}}
    error = app.get(refused).last_error
    assert error is not None and (error.error_class, error.message) == ("TokenFailed", "card declined")
    assert calls(tmp_path, job_id, "charge") == 1


def test_a_token_nobody_answers_times_out_in_the_job_and_refuses_a_late_answer(app, tmp_path):
    # GIVEN a job waiting on a 4 s token, a worker and a sweeper (the held record's witness)
    job_id = app.enqueue("approval", {"runs_dir": str(tmp_path), "timeout_s": 4})
    sweeper = sweeper_process(app)
    proc = worker_process(app, APP, concurrency=2)
    try:
        token = _asleep_on_its_token(app, tmp_path, job_id)
        # WHEN nobody answers: THEN the wait raises TokenTimeout in the job (its one attempt: dead)
        wait_until(lambda: app.get(job_id).status is JobStatus.DEAD, 60, "timed out")
    finally:
        kill_group(proc, sweeper)
    job = app.get(job_id)
    assert job.last_error is not None and job.last_error.error_class == "TokenTimeout"
    assert calls(tmp_path, job_id, "ship") == 0
    with pytest.raises(TokenExpired):
        app.tokens.complete(token, "too late")


def waits_on_a_token(pending: Pending, body: str) -> bool:
    """The worker's write that puts a job to sleep on a token (``steps/records.sleep``).

    It names the token's answer attribute (``tok:<n>``) and the ``queued`` status, alone
    (``UpdateItem``) or in a batch of PartiQL statements.
    """
    return "tok:" in body and "queued" in body


def test_a_token_answered_as_its_job_begins_to_wait_runs_the_job_on_at_once_on_its_one_attempt(
    ministack_url, make_app, tmp_path
):
    # Leases and visibility far longer than the test's wait: a run left to its lease would not be
    # rescued in time (and, with its one attempt used, would end dead).
    app = make_app(ministack_url, lease_s=60.0, visibility_timeout_s=60)
    app.registry.include(stepped.app.registry)
    app.provision()
    job_id = app.enqueue("approval", {"runs_dir": str(tmp_path), "timeout_s": 120})
    with HoldFirst(ministack_url, waits_on_a_token) as proxy:
        proc = worker_process(app, APP, SQSJOBS_ENDPOINT_URL=proxy.url)
        try:
            # GIVEN the job has read that its token is unanswered and is about to wait for it ...
            assert proxy.held.wait(30), "the job never began to wait"
            # WHEN the answer lands first, and only then the job's wait reaches DynamoDB
            assert app.tokens.complete(str(token_of(tmp_path, job_id)), {"by": "ops"}) == "answered"
            proxy.release.set()
            # THEN the wait is refused, and the job runs on at once with the answer, on its one attempt
            wait_until(lambda: app.get(job_id).status.terminal, 30, "the job's end")
        finally:
            kill_group(proc)
    job = app.get(job_id)
    assert (job.status, job.result, job.attempt) == (JobStatus.SUCCEEDED, {"decision": {"by": "ops"}}, 1)
    assert (calls(tmp_path, job_id, "charge"), calls(tmp_path, job_id, "ship")) == (1, 1)


def path_of(runs_dir: Path, job_id: str) -> str:
    return (runs_dir / f"{job_id}.path").read_text()


def test_a_token_s_own_url_answers_it_without_credentials_and_nothing_else(app, tmp_path):
    # GIVEN an API that wants a bearer token, a worker, and an order asleep on its approval token,
    # whose URL the job handed out (as an email to service B would carry it)
    job_id = app.enqueue("approval", {"runs_dir": str(tmp_path), "timeout_s": 120})
    other = app.enqueue("approval", {"runs_dir": str(tmp_path), "timeout_s": 120})
    proc = worker_process(app, APP, concurrency=2)
    try:
        token = _asleep_on_its_token(app, tmp_path, job_id)
        other_token = _asleep_on_its_token(app, tmp_path, other)
        path, other_path = path_of(tmp_path, job_id), path_of(tmp_path, other)
        key = path.split("key=", 1)[1]
        with serving(app, token="s3cret") as url:
            # WHEN service B, with no credentials, posts to altered URLs, then to the real one, twice
            tampered = key[:-1] + ("A" if key[-1] != "A" else "B")
            other_key = other_path.split("key=", 1)[1]
            with httpx.Client(base_url=url, timeout=30, verify=False) as http:
                refused = [
                    http.post(f"/tokens/{token}/answer", params={"key": tampered}, json={"value": "x"}),
                    http.post(f"/tokens/{token}/answer", params={"key": other_key}, json={"value": "x"}),
                    http.post(f"/tokens/{other_token}/answer", params={"key": key}, json={"value": "x"}),
                    http.post(f"/tokens/{job_id}.t9/answer", params={"key": key}, json={"value": "x"}),
                    http.post(f"/tokens/{token}/answer", json={"value": "x"}),
                    http.post(
                        f"/tokens/{token}", json={"value": "x"}
                    ),  # the credentialed route still wants one
                ]
                answered = [http.post(path, json={"value": d}) for d in ("approved", "rejected")]
                # ... and a reader of the job sees the token, never its key
                record = http.get(f"/jobs/{job_id}", headers={"Authorization": "Bearer s3cret"}).json()

            # THEN every altered URL is refused as no such token, telling nothing; the real one answers
            assert [r.status_code for r in refused] == [404, 404, 404, 404, 422, 401], [
                r.text for r in refused
            ]
            assert not any(key in r.text for r in refused), [r.text for r in refused]
            # (a wrong key and a token that does not exist read alike: nothing to probe with)
            details = {r.json()["detail"].split(":")[0] for r in refused[:4]}
            assert details == {"no such token, or not its key"}, details
            assert [(r.status_code, r.json()["result"]) for r in answered] == [
                (200, "answered"),
                (200, "already answered"),
            ]
            steps = {s["name"]: s["result"] for s in record["steps"]}
            assert steps["token-1"]["id"] == token and "key" not in steps["token-1"], steps
            assert key not in str(record)
            # ... the job wakes with the first answer; the other job still waits for its own
            wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 30, "shipped")
            assert app.get(job_id).result == {"decision": "approved"}
            assert app.get(other).status is JobStatus.QUEUED
    finally:
        kill_group(proc)


def test_a_token_s_url_expires_with_its_wait(app, tmp_path):
    # GIVEN a job waiting on a token for 3 s, whose URL nobody used in time (a sweeper: the held
    # record's witness, which brings the job back at its timeout)
    job_id = app.enqueue("approval", {"runs_dir": str(tmp_path), "timeout_s": 3})
    sweeper = sweeper_process(app)
    proc = worker_process(app, APP, concurrency=2)
    try:
        wait_until(lambda: (tmp_path / f"{job_id}.path").exists(), 30, "the token's URL")
        path = path_of(tmp_path, job_id)
        wait_until(lambda: app.get(job_id).status.terminal, 60, "the wait's timeout")
        with serving(app, token="s3cret") as url:
            late = httpx.post(url + path, json={"value": "approved"}, timeout=30, verify=False)
    finally:
        kill_group(proc, sweeper)
    # THEN the late answer is refused (its timeout passed) and the job ended on its timeout
    assert late.status_code == 409, late.text
    assert app.get(job_id).status is JobStatus.DEAD
