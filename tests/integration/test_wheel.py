"""The wheel as users get it: built as a release builds it, installed into a fresh virtualenv.

Nothing of the source tree may leak in: the virtualenv gets its dependencies from the package
index, the checks run outside the repository with no PYTHONPATH, and ``sqsjobs`` must import
from the virtualenv's site-packages.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.emulators import REPO_ROOT, free_port
from tests.integration.helpers import wait_until
from tests.wheels import pip_into, shared_wheel, venv_without_pip

#: Command groups (typer sub-apps) that ``sqsjobs --help`` must list.
GROUPS = ("jobs", "dlq", "schedules", "package")

CHECK = textwrap.dedent(
    """
    import importlib.resources, sys
    import sqsjobs
    assert "site-packages" in sqsjobs.__file__, sqsjobs.__file__
    missing = [name for name in sqsjobs.__all__ if not hasattr(sqsjobs, name)]
    assert not missing, missing
    assert importlib.resources.files("sqsjobs").joinpath("py.typed").is_file(), "py.typed"
    print(len(sqsjobs.__all__), "names from", sqsjobs.__file__)
    """
)


def clean_env() -> dict[str, str]:
    """This process's environment without anything that points Python at other code."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV")
    return {
        k: v
        for k, v in os.environ.items()
        if k not in dropped and not k.startswith(("SQSJOBS_", "AWS_", "PYTEST_"))
    }


def run(args: list[str | Path], cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{args}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.slow
@pytest.mark.timeout(420)  # a wheel build, a fresh virtualenv from the index, the quick start: 60-150 s
def test_the_wheel_holds_only_sqsjobs_and_works_in_a_fresh_virtualenv(tmp_path, tmp_path_factory):
    # GIVEN the wheel built from the repository root, as a release builds it (once per run: the
    # construct's install test uses it too)
    wheel = shared_wheel(tmp_path_factory, REPO_ROOT, "sqsjobs")

    # THEN it holds the sqsjobs package and its metadata, and nothing else (no tests/, bench/, infra/)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert {n.split("/")[0] for n in names} == {"sqsjobs", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "sqsjobs/py.typed" in names
    # the dashboard's stylesheet and script are package data (no CDN, no build step)
    assert {"sqsjobs/api/static/dashboard.css", "sqsjobs/api/static/dashboard.js"} <= set(names)
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)

    # WHEN it is installed into a fresh virtualenv with the extras the README's quick start names,
    # dependencies from the package index
    venv = tmp_path / "venv"
    python = venv_without_pip(venv)
    run(pip_into(python, "install", "--no-compile", "-q", f"{wheel}[local,api]"), cwd=tmp_path, timeout=240)

    # THEN the CLI starts and lists its command groups
    shown = run([venv / "bin" / "sqsjobs", "--help"], cwd=tmp_path).stdout
    assert all(f" {group} " in shown for group in GROUPS), shown

    # AND every public name imports from the installed package, which ships py.typed
    checked = run([venv / "bin" / "python", "-c", CHECK], cwd=tmp_path).stdout
    assert str(venv) in checked, checked

    # AND the README's quick start runs as written, from that virtualenv, outside the repository
    quick_start(venv, tmp_path / "project")


def readme_quick_start() -> str:
    """The quick start's Python file, exactly as the README shows it."""
    readme = (REPO_ROOT / "README.md").read_text()
    after = readme.split("<!-- quickstart: hello.py", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def quick_start(venv: Path, project: Path) -> None:
    """``sqsjobs dev --app hello:app --api-port N``, the two curl calls, the console: as the README says."""
    project.mkdir()
    (project / "hello.py").write_text(readme_quick_start())
    port = free_port()
    dev = subprocess.Popen(
        [venv / "bin" / "sqsjobs", "dev", "--app", "hello:app", "--api-port", str(port)],
        cwd=project,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://localhost:{port}"
    try:
        wait_until(lambda: answers(f"{url}/queues", dev), 60, "sqsjobs dev's API")
        sent = httpx.post(
            f"{url}/jobs", json={"type": "greet", "payload": {"name": "Ada"}}, timeout=30, verify=False
        )
        assert sent.status_code == 202 and sent.json()["status"] == "queued", sent.text
        job_url = f"{url}/jobs/{sent.json()['id']}"
        wait_until(
            lambda: httpx.get(job_url, timeout=10, verify=False).json()["status"] == "succeeded",
            60,
            "the job",
        )
        assert httpx.get(job_url, timeout=10, verify=False).json()["result"] == "hello, Ada (attempt 1)"
        console = httpx.get(f"{url}/", timeout=10, follow_redirects=True, verify=False)
        assert console.status_code == 200 and "text/html" in console.headers["content-type"]
    finally:
        os.killpg(dev.pid, signal.SIGTERM)
        output = dev.communicate(timeout=60)[0].decode(errors="replace")
    assert dev.returncode == 0, output[-3000:]


def answers(url: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, "sqsjobs dev exited"
    try:
        return httpx.get(url, timeout=2, verify=False).status_code == 200
    except httpx.TransportError:
        return False
