"""The Django tests again on Django 6, whose own ``django.tasks`` the backend plugs into.

Django 6 needs Python 3.12, and this suite runs on 3.11 with Django 5.2 and the backport: so
``test_django_tasks.py`` runs a second time, whole, in ``.venv-django6`` (``mk/django6.mk``: Python
3.12, Django 6, sqsjobs with its ``postgres`` and ``django`` extras), with its own MiniStack and
Postgres, and its relay and worker processes on that Python too.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-django6" / "bin" / "python"


@pytest.mark.timeout(300)
def test_the_django_tests_pass_on_django_6_with_its_own_django_tasks(tmp_path):
    assert PYTHON.exists(), "no .venv-django6: make test builds it (mk/django6.mk)"
    version = subprocess.run(
        [PYTHON, "-c", "import django, sqsjobs.django.task_api as t; print(django.get_version(), t.SOURCE)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert version[0].startswith("6.") and version[1] == "django.tasks", version
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "AWS_", "SQSJOBS_"))}
    env["SQSJOBS_MINISTACK_BIN"] = os.environ.get(
        "SQSJOBS_MINISTACK_BIN", str(ROOT / ".venv-ministack" / "bin" / "ministack")
    )
    run = subprocess.run(
        [
            PYTHON,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--basetemp",
            str(tmp_path / "t"),
            "tests/outbox/test_django_tasks.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout, run.stdout[-2000:]
