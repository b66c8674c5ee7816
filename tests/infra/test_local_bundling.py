"""``LocalBundle``: the construct builds the Lambda zip while synthesizing, with the local Python, never Docker.

The stack (``bundling_synth.py``, in the CDK virtualenv) gives the worker, the sweeper and the API
function one ``LocalBundle``. ``CDK_DOCKER`` points at a script that records any call and fails, so
a synthesis that reached for Docker fails here. The zip CDK staged is then opened: it must be what
``sqsjobs package lambda`` makes (the handler module, sqsjobs, the App's package, bytecode).
"""

from __future__ import annotations

import json
import platform
import subprocess
import zipfile
from pathlib import Path

import pytest

from sqsjobs.config import MAX_MESSAGE_BYTES
from sqsjobs.deploy.packaging import HANDLER
from tests.emulators import REPO_ROOT, ministack_python
from tests.infra.conftest import SYNTH_TIMEOUT_S, cdk_python, synth_env

pytestmark = pytest.mark.slow

ARCHITECTURE = {"aarch64": "ARM64", "arm64": "ARM64"}.get(platform.machine(), "X86_64")


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("bundling")
    docker_calls = work / "docker-calls"
    fake_docker = work / "docker"
    fake_docker.write_text(f'#!/bin/sh\necho "$@" >> {docker_calls}\nexit 1\n')
    fake_docker.chmod(0o755)
    out = work / "cdk.out"
    done = subprocess.run(
        [
            str(cdk_python()),
            str(Path(__file__).with_name("bundling_synth.py")),
            str(out),
            ministack_python(),
            ARCHITECTURE,
        ],
        cwd=REPO_ROOT,
        env={**synth_env(), "CDK_DOCKER": str(fake_docker)},
        capture_output=True,
        text=True,
        timeout=SYNTH_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    return out, docker_calls


def template(out: Path) -> dict:
    return json.loads((out / "Bundled.template.json").read_text())


def functions(out: Path) -> dict[str, dict]:
    return {k: v for k, v in template(out)["Resources"].items() if v["Type"] == "AWS::Lambda::Function"}


def test_synthesis_builds_the_zip_without_docker_and_every_function_runs_the_one_asset(bundled):
    out, docker_calls = bundled
    assert not docker_calls.exists(), docker_calls.read_text()
    keys = {f["Properties"]["Code"]["S3Key"] for f in functions(out).values()}
    assert len(functions(out)) >= 3  # worker, sweeper, API
    assert len(keys) == 1, keys
    (key,) = keys
    assets = json.loads((out / "Bundled.assets.json").read_text())["files"]
    asset = assets[key.removesuffix(".zip")]
    assert asset["source"]["packaging"] == "file"  # the zip itself, not a folder CDK zips again
    assert (out / asset["source"]["path"]).suffix == ".zip"


def test_the_staged_zip_is_what_sqsjobs_package_lambda_makes_for_the_functions_runtime(bundled):
    out, _ = bundled
    (key,) = {f["Properties"]["Code"]["S3Key"] for f in functions(out).values()}
    assets = json.loads((out / "Bundled.assets.json").read_text())["files"]
    with zipfile.ZipFile(out / assets[key.removesuffix(".zip")]["source"]["path"]) as zipped:
        names = set(zipped.namelist())
    handler_module = HANDLER.rsplit(".", 1)[0].replace(".", "/") + ".py"
    assert handler_module in names
    assert {"sqsjobs/__init__.py", "examples/shop.py"} <= names
    assert "pydantic/__init__.py" in names and any(n.startswith("pydantic_core/") for n in names)
    tag = "cpython-" + ministack_python().replace(".", "")
    assert any(n.endswith(f".{tag}.pyc") for n in names), "bytecode for the function's Python"
    runtimes = {f["Properties"]["Runtime"] for f in functions(out).values()}
    assert runtimes == {f"python{ministack_python()}"}


def test_the_queues_and_dlqs_take_1_mib_messages(bundled):
    out, _ = bundled
    queues = [v["Properties"] for v in template(out)["Resources"].values() if v["Type"] == "AWS::SQS::Queue"]
    assert queues
    assert {q["QueueName"]: q.get("MaximumMessageSize") for q in queues} == {
        q["QueueName"]: MAX_MESSAGE_BYTES for q in queues
    }
