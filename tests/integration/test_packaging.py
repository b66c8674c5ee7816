"""``sqsjobs package lambda``: what goes into the zip (built offline from the cache `make` fills)."""

from __future__ import annotations

import zipfile

from typer.testing import CliRunner

from sqsjobs.cli.main import cli
from tests.emulators import REPO_ROOT, ministack_python
from tests.integration.lambda_events import host_arch


def test_the_zip_holds_the_entry_point_sqsjobs_the_app_and_the_runtime_dependencies(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    output = tmp_path / "fn.zip"
    result = CliRunner().invoke(
        cli,
        [
            "package",
            "lambda",
            "--app",
            "tests.apps.lambda_app:app",
            "--output",
            str(output),
            "--python-version",
            ministack_python(),
            "--arch",
            host_arch(),
            "--offline",
            "--compress-level",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().endswith(str(output))
    with zipfile.ZipFile(output) as archive:
        infos = archive.infolist()
        names = {i.filename for i in infos}
    assert {
        "sqsjobs/runtime/lambda_handlers.py",
        "sqsjobs/runtime/lambda_sqs.py",
        "sqsjobs/py.typed",
        "tests/apps/lambda_app.py",
    } <= names
    assert {
        "boto3/__init__.py",
        "botocore/__init__.py",
        "aioboto3/__init__.py",
        "pydantic/__init__.py",
    } <= names
    # ... the HTTP API's function runs from the same zip: its handler, FastAPI and Mangum, not uvicorn
    assert {"sqsjobs/api/lambda_handler.py", "fastapi/__init__.py", "mangum/__init__.py"} <= names
    assert not any(
        n.startswith(("typer/", "rich/", "bin/", "moto/", "uvicorn/")) for n in names
    )  # CLI-only, scripts, dev, the local server
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    # fixed timestamps: the same inputs give the same bytes (and the same CodeSha256)
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}


def test_packaging_explains_what_is_missing():
    result = CliRunner().invoke(cli, ["package", "lambda"])
    assert result.exit_code == 2
    assert "--app" in result.output
    result = CliRunner().invoke(
        cli, ["package", "lambda", "--app", "tests.apps.lambda_app:app", "--arch", "sparc", "--offline"]
    )
    assert result.exit_code == 1 and "--arch must be one of" in result.output
