"""Wheels built once per run, and virtualenvs made without their own pip.

``tests/integration/test_wheel.py`` and ``tests/infra/test_construct_install.py`` both install the
library's wheel as a release builds it (``python -m build --wheel``: an isolated build environment,
~10 s of CPU). Under pytest-xdist they run in different workers, so the build is shared through the
run's common temp directory under a file lock, as the CDK synthesis is (``tests/infra/conftest.py``).

A fresh virtualenv's own pip (``ensurepip``) costs ~4 s of CPU and proves nothing the tests check:
they make it ``--without-pip`` and install with this interpreter's pip (``pip --python``), which
installs into the target interpreter's environment exactly as its own pip would.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["exclusive", "pip_into", "run_dir", "shared_wheel", "venv_without_pip"]


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """An inter-process lock: pytest-xdist workers share one build instead of each making its own."""
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_dir(factory: pytest.TempPathFactory) -> Path:
    """The temp directory every xdist worker of this run shares (each has its own basetemp below it)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_wheel(factory: pytest.TempPathFactory, project: Path, name: str, timeout: float = 180) -> Path:
    """The wheel of ``project`` (distribution ``name``), built once per run by ``python -m build``."""
    shared = run_dir(factory)
    work = shared / f"wheel-{name}"
    with exclusive(shared / f"wheel-{name}.lock"):
        if not (work / "done").exists():
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            built = subprocess.run(
                [sys.executable, "-m", "build", "--wheel", "--outdir", str(work), str(project)],
                cwd=project,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            assert built.returncode == 0, f"{project}:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}"
            (work / "done").touch()
    (wheel,) = work.glob(f"{name}-*-py3-none-any.whl")
    return wheel


def venv_without_pip(path: Path) -> Path:
    """A fresh virtualenv at ``path`` with no pip of its own; returns its interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=60)
    return path / "bin" / "python"


def pip_into(python: Path, *args: str | Path) -> list[str | Path]:
    """The command line of ``pip <args>`` acting on ``python``'s environment, run by this interpreter's pip."""
    return [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check", *args]
