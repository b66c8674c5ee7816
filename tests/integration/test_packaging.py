"""``sqsjobs package lambda``: what goes into the zip (built offline from the cache `make` fills)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest
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
        "aiobotocore/__init__.py",
        "pydantic/__init__.py",
    } <= names
    # the async clients come from aiobotocore's own session: no aioboto3
    assert not any(n.startswith("aioboto3") for n in names)
    # ... the HTTP API's function runs from the same zip: its handler, FastAPI and Mangum, not uvicorn
    assert {"sqsjobs/api/lambda_handler.py", "fastapi/__init__.py", "mangum/__init__.py"} <= names
    assert not any(
        n.startswith(("typer/", "rich/", "bin/", "moto/", "uvicorn/")) for n in names
    )  # CLI-only, scripts, dev, the local server
    # bytecode for the function's Python beside every source it could compile, nothing for another one
    tag = f"cpython-{ministack_python().replace('.', '')}"
    pycs = {n for n in names if n.endswith(".pyc")}
    assert {
        f"sqsjobs/runtime/__pycache__/lambda_handlers.{tag}.pyc",
        f"tests/apps/__pycache__/lambda_app.{tag}.pyc",
        f"botocore/__pycache__/session.{tag}.pyc",
    } <= pycs
    assert all(n.endswith(f".{tag}.pyc") and "/__pycache__/" in f"/{n}" for n in pycs)
    assert len(pycs) > 0.9 * sum(n.endswith(".py") for n in names)
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


def _build(tmp_path, name: str, *options: str):
    output = tmp_path / f"{name}.zip"
    args = ["package", "lambda", "--app", "tests.apps.lambda_app:app", "--output", str(output)]
    args += [
        "--python-version",
        ministack_python(),
        "--arch",
        host_arch(),
        "--offline",
        "--compress-level",
        "1",
    ]
    result = CliRunner().invoke(cli, [*args, *options])
    assert result.exit_code == 0, result.output
    root = tmp_path / name
    with zipfile.ZipFile(output) as archive:
        archive.extractall(root)
    return root


def _imports(root) -> str:
    """What a fresh interpreter that sees only the unpacked zip reads to import the worker's entry.

    ``-B``: it writes no bytecode (Lambda's /var/task is read-only), so sources compile every time.
    """
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-B",
            "-v",
            "-c",
            f"import sys; sys.path.insert(0, {str(root)!r}); "
            "import sqsjobs.runtime.lambda_handlers, botocore.session",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


@pytest.mark.slow
def test_the_unpacked_zip_imports_the_entry_from_its_bytecode_and_compiles_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    root = _build(tmp_path, "with")
    verbose = _imports(root)
    loaded = [ln for ln in verbose.splitlines() if ln.startswith("# code object from") and str(root) in ln]
    assert any("sqsjobs/runtime/__pycache__/lambda_handlers." in ln for ln in loaded), verbose[-2000:]
    assert any("botocore/__pycache__/session." in ln for ln in loaded)
    # nothing of the zip was compiled from source (-v names each source it compiles: "code object from '...py'")
    compiled = [ln for ln in loaded if ln.rstrip("'").endswith(".py")]
    assert compiled == []
    # AND --no-bytecode builds the sources-only zip, which compiles them
    bare = _build(tmp_path, "without", "--no-bytecode")
    assert not list(bare.rglob("*.pyc"))
    assert any(
        ln.startswith("# code object from") and ln.rstrip("'").endswith("lambda_handlers.py")
        for ln in _imports(bare).splitlines()
    )


def _clients(root, *services: str) -> dict[str, str]:
    """Each service's client made by boto3 from the unpacked zip alone: ``"ok"`` or the error's name."""
    script = (
        f"import sys, json; sys.path.insert(0, {str(root)!r}); import boto3\n"
        "session = boto3.session.Session(region_name='us-east-1', aws_access_key_id='x', "
        "aws_secret_access_key='x')\nmade = {}\n"
        f"for service in {list(services)!r}:\n"
        "    try:\n        session.client(service); made[service] = 'ok'\n"
        "    except Exception as exc:\n        made[service] = type(exc).__name__\n"
        "print(json.dumps(made))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


def test_a_slim_zip_keeps_botocore_data_for_the_services_sqsjobs_and_the_app_call_and_no_other(
    tmp_path, monkeypatch
):
    # GIVEN a full zip and a slim one whose app also calls SES
    monkeypatch.chdir(REPO_ROOT)
    full = _build(tmp_path, "full", "--no-bytecode")
    slim = _build(tmp_path, "slim", "--no-bytecode", "--slim", "--aws-service", "ses")

    def data_dirs(root) -> set[str]:
        return {p.name for p in (root / "botocore" / "data").iterdir() if p.is_dir()}

    def size(root) -> int:
        return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())

    # THEN the slim zip holds the data of sqsjobs' services, STS and SES, and what sits beside them
    sqsjobs_services = {
        "dynamodb",
        "sqs",
        "s3",
        "scheduler",
        "events",
        "dynamodbstreams",
        "cloudwatch",
        "secretsmanager",
        "kms",  # an encrypted job's data key (sqsjobs.store.sealing)
    }
    assert data_dirs(slim) == sqsjobs_services | {"sts", "ses"}
    assert len(data_dirs(full)) > 300
    assert (slim / "botocore" / "data" / "endpoints.json").exists()
    assert size(full) - size(slim) > 10_000_000, (size(full), size(slim))
    # AND boto3 run from the slim zip alone makes a client for each of those, and refuses another
    kept = _clients(slim, *sorted(sqsjobs_services | {"sts", "ses"}), "ec2")
    assert kept == {
        **dict.fromkeys(sorted(sqsjobs_services | {"sts", "ses"}), "ok"),
        "ec2": "UnknownServiceError",
    }
    assert _clients(full, "ec2") == {"ec2": "ok"}


def test_aws_service_without_slim_is_refused():
    result = CliRunner().invoke(
        cli, ["package", "lambda", "--app", "tests.apps.lambda_app:app", "--aws-service", "ses", "--offline"]
    )
    assert result.exit_code == 2 and "--slim" in result.output


@pytest.mark.slow
def test_a_lock_whose_hash_does_not_match_the_index_fails_the_build_and_caches_nothing(tmp_path):
    # GIVEN a hashed lock of one small package, one of its hashes altered (as a tampered index would serve)
    lock = tmp_path / "lock.txt"
    lock.write_text("six==1.17.0 --hash=sha256:" + "0" * 64 + "\n")
    result = CliRunner().invoke(
        cli,
        ["package", "lambda", "--deps-only", "--lock", str(lock), "--cache-dir", str(tmp_path / "cache")],
    )
    # THEN pip refuses the file it downloaded, the build says why, and no cache is left to reuse
    assert result.exit_code != 0
    assert "DO NOT MATCH THE HASHES" in result.output, result.output
    assert not any((tmp_path / "cache").glob("deps-*/.complete"))
