"""The wheel as users get it: built as a release builds it, installed into a fresh virtualenv.

Nothing of the source tree may leak in: the virtualenv gets its dependencies from the package
index, the checks run outside the repository with no PYTHONPATH, and ``sqsjobs`` must import
from the virtualenv's site-packages.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.emulators import REPO_ROOT
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
@pytest.mark.timeout(300)  # a wheel build and a fresh virtualenv from the index: 34-90 s, more under load
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

    # WHEN it is installed into a fresh virtualenv, dependencies from the package index
    venv = tmp_path / "venv"
    python = venv_without_pip(venv)
    run(pip_into(python, "install", "--no-compile", "-q", wheel), cwd=tmp_path, timeout=200)

    # THEN the CLI starts and lists its command groups
    shown = run([venv / "bin" / "sqsjobs", "--help"], cwd=tmp_path).stdout
    assert all(f" {group} " in shown for group in GROUPS), shown

    # AND every public name imports from the installed package, which ships py.typed
    checked = run([venv / "bin" / "python", "-c", CHECK], cwd=tmp_path).stdout
    assert str(venv) in checked, checked
