"""The Node reference worker (clients/node) from outside: real ``node`` processes against a served API on MiniStack.

A Python worker process serves ``py.caption`` beside them; the Node workers write one JSON line per
run event into ``<tmp>/<job id>.node`` (clients/node/examples/thumbnails.js), which the tests read.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from sqsjobs import JobStatus, Notify
from sqsjobs.notify.sender import secret_env
from tests.api.helpers import serving
from tests.integration.helpers import kill_group, wait_until, worker_process
from tests.remote.receiver import receiving

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "clients" / "node"
TOKEN = "test-token-node-worker"
SECRET = "whsec_" + base64.b64encode(b"service a signs its webhooks with me").decode()
NODE = shutil.which("node")


@pytest.fixture
def api_url(app):
    with serving(app, token=TOKEN, lease_key="node-tests-" + "k" * 24) as url:
        yield url


def node() -> str:
    assert NODE, "node (>= 20) is not on PATH: the Node reference worker's tests need it"
    return NODE


def node_env(api_url: str, **env: str) -> dict[str, str]:
    return {**os.environ, "SQSJOBS_API_URL": api_url, "SQSJOBS_API_TOKEN": TOKEN, **env}


def node_worker(api_url: str, tmp_path: Path, worker_id: str, **env: str) -> subprocess.Popen[bytes]:
    """``node examples/thumbnails.js`` in a session of its own; its log lines go to ``<tmp>/<worker_id>.log``."""
    with open(tmp_path / f"{worker_id}.log", "ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [node(), str(CLIENT / "examples" / "thumbnails.js")],
            env=node_env(api_url, SQSJOBS_WORKER_ID=worker_id, SQSJOBS_WAIT_S="2", **env),
            stdout=log,
            stderr=log,
            start_new_session=True,
        )


def runs(tmp_path: Path, job_id: str) -> list[dict]:
    path = tmp_path / f"{job_id}.node"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def thumbnail(app, tmp_path: Path, mode: str = "ok") -> str:
    return app.enqueue(
        "render.thumbnail", {"url": "s3://in/a.png", "width": 64, "mode": mode, "runs_dir": str(tmp_path)}
    )


def test_the_node_test_suite_passes_against_the_served_api(api_url):
    done = subprocess.run(
        [node(), "--test", "test/"],
        cwd=CLIENT,
        env=node_env(api_url),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "# pass 5" in done.stdout and "# fail 0" in done.stdout, done.stdout[-2000:]


def test_the_node_worker_type_checks():
    tsc = CLIENT / "node_modules" / ".bin" / "tsc"
    assert tsc.exists(), "run `make clients/node/node_modules/.bin/tsc` (npm ci in clients/node)"
    done = subprocess.run([str(tsc), "-p", str(CLIENT)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr


def test_node_and_python_workers_serve_their_own_types_and_chains_cross_between_them(app, api_url, tmp_path):
    nodejs = node_worker(api_url, tmp_path, "node-a")
    python = worker_process(app, "tests.apps.polyglot:app", concurrency=2)
    try:
        alone = thumbnail(app, tmp_path)
        caption = {"runs_dir": str(tmp_path), "title": "cat"}
        node_first = app.chains.start([("render.thumbnail", _thumb(tmp_path)), ("py.caption", caption)])
        python_first = app.chains.start([("py.caption", caption), ("render.thumbnail", _thumb(tmp_path))])
        for chain_id in (node_first, python_first):
            wait_until(lambda c=chain_id: app.chains.get(c).status == "succeeded", 90, "chain succeeded")
        wait_until(lambda: app.get(alone).status is JobStatus.SUCCEEDED, 30, "the Node job succeeded")
    finally:
        kill_group(nodejs, python)
    # the Node job ran once, in the node process
    assert [(r["event"], r["pid"]) for r in runs(tmp_path, alone)] == [
        ("start", nodejs.pid),
        ("done", nodejs.pid),
    ]
    assert app.get(alone).result == {"thumbnail": "s3://in/a.png@64", "previous": None}
    # Node, then Python: the Python step saw the Node step's result
    first, second = app.chains.get(node_first).steps
    assert [e["event"] for e in runs(tmp_path, first.job_id)] == ["start", "done"]
    [python_run] = [json.loads(line) for line in (tmp_path / second.job_id).read_text().splitlines()]
    assert python_run["pid"] == python.pid
    assert python_run["previous"] == {"thumbnail": "s3://in/a.png@64", "previous": None}
    assert app.get(second.job_id).result == {"caption": "cat: s3://in/a.png@64"}
    # Python, then Node: the Node step saw the Python step's result
    first, second = app.chains.get(python_first).steps
    assert app.get(second.job_id).result["previous"] == {"caption": "cat: None"}


def _thumb(tmp_path: Path, mode: str = "ok") -> dict:
    return {"url": "s3://in/a.png", "width": 64, "mode": mode, "runs_dir": str(tmp_path)}


def test_a_node_worker_killed_mid_job_is_rescued_and_the_job_runs_once_to_completion(app, api_url, tmp_path):
    job_id = thumbnail(app, tmp_path, mode="hang-once")
    first = node_worker(api_url, tmp_path, "node-doomed")
    try:
        wait_until(lambda: runs(tmp_path, job_id), 30, "the first run started")
    finally:
        kill_group(first)  # SIGKILL mid-job: no fail, no heartbeat again
    rescuer = node_worker(api_url, tmp_path, "node-rescuer")
    try:
        wait_until(lambda: app.get(job_id).status is JobStatus.SUCCEEDED, 60, "the job succeeded elsewhere")
    finally:
        kill_group(rescuer)
    events = [(r["attempt"], r["event"], r["pid"]) for r in runs(tmp_path, job_id)]
    assert events == [(1, "start", first.pid), (2, "start", rescuer.pid), (2, "done", rescuer.pid)]
    assert app.get(job_id).attempt == 2


def test_a_cancel_reaches_the_node_handlers_abort_signal(app, api_url, tmp_path):
    job_id = thumbnail(app, tmp_path, mode="hang")
    worker = node_worker(api_url, tmp_path, "node-cancel")
    try:
        wait_until(lambda: runs(tmp_path, job_id), 30, "the run started")
        app.cancel(job_id)
        wait_until(lambda: app.get(job_id).status is JobStatus.CANCELLED, 30, "the job cancelled")
    finally:
        kill_group(worker)
    [start, aborted] = runs(tmp_path, job_id)
    assert (start["event"], aborted["event"]) == ("start", "aborted")
    assert "cancel requested" in aborted["reason"]


def test_a_node_job_failing_twice_follows_its_types_backoff_and_one_failing_permanently_is_dead(
    app, api_url, tmp_path
):
    flaky = thumbnail(app, tmp_path, mode="fail:2")
    doomed = thumbnail(app, tmp_path, mode="permanent")
    worker = node_worker(api_url, tmp_path, "node-flaky")
    try:
        wait_until(lambda: app.get(flaky).status is JobStatus.SUCCEEDED, 60, "the flaky job succeeded")
        wait_until(lambda: app.get(doomed).status is JobStatus.DEAD, 60, "the doomed job dead")
    finally:
        kill_group(worker)
    starts = [r["at"] for r in runs(tmp_path, flaky) if r["event"] == "start"]
    ends = [r["at"] for r in runs(tmp_path, flaky) if r["event"] == "failed"]
    assert len(starts) == 3 and len(ends) == 2
    # the type's backoff (1 s, then 2 s, no jitter): no attempt starts sooner than it allows
    assert starts[1] - ends[0] >= 1.0 - 0.05 and starts[2] - ends[1] >= 2.0 - 0.05, (starts, ends)
    record = app.get(flaky)
    assert [h.error for h in record.history if h.outcome == "retry"] == [
        "TypeError: flaky render 1",
        "TypeError: flaky render 2",
    ]
    dead = app.get(doomed)
    assert (dead.reason, dead.last_error.error_class, dead.last_error.message) == (
        "permanent error",
        "PermanentError",
        "not a PNG",
    )
    assert "PermanentError: not a PNG" in dead.last_error.traceback
    assert [r["event"] for r in runs(tmp_path, doomed)] == ["start", "failed"]


def test_sigterm_lets_the_running_job_finish_then_the_worker_exits(app, api_url, tmp_path):
    job_id = thumbnail(app, tmp_path, mode="slow:3")
    worker = node_worker(api_url, tmp_path, "node-drain")
    try:
        wait_until(lambda: runs(tmp_path, job_id), 30, "the run started")
        os.killpg(worker.pid, signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        kill_group(worker)
    assert [r["event"] for r in runs(tmp_path, job_id)] == ["start", "done"]
    assert app.get(job_id).status is JobStatus.SUCCEEDED


def test_service_a_enqueues_with_notify_service_b_runs_it_in_node_and_the_webhook_hears(
    app, api_url, tmp_path
):
    with receiving() as (url, received):
        job_id = app.enqueue(
            "render.thumbnail",
            {"url": "s3://in/cat.png", "width": 256},
            notify=Notify(url=url, secret="service-a"),
        )
        nodejs = node_worker(api_url, tmp_path, "node-b")
        # the delivery runs in a Python worker of service A (the Node fleet runs render.* only)
        python = worker_process(
            app,
            "tests.apps.polyglot:app",
            concurrency=2,
            SQSJOBS_WEBHOOK_ALLOW="127.0.0.1",
            **{secret_env("service-a"): SECRET},
        )
        try:
            wait_until(lambda: received.accepted(), 60, "the webhook heard")
        finally:
            kill_group(nodejs, python)
    [(headers, body, answered)] = next(iter(received.by_id().values()))
    assert answered == 200
    assert Webhook(SECRET).verify(body, headers)["data"] == {
        "id": job_id,
        "type": "render.thumbnail",
        "status": "succeeded",
        "attempt": 1,
        "result": {"thumbnail": "s3://in/cat.png@256", "previous": None},
        "result_ref": None,
        "error": None,
        "tenant": None,
        "parent_id": None,
        "root_id": job_id,
        "chain": None,
    }
