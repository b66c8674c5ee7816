"""Synthesize infra/app.py once per session, in the CDK virtualenv, and hand the templates to the tests.

CDK (aws-cdk-lib, cdk-nag, cfn-lint; ~700 MB) lives in ``.venv-cdk`` (``make .venv-cdk/.installed``),
not in the test environment, so synthesis runs as a subprocess of that venv's Python and the tests
read the cloud assembly's JSON. A missing venv is an error with the fix, never a skip. The Lambda
worker's code is the real zip ``sqsjobs package lambda`` builds (for MiniStack's interpreter, from
the dependency cache ``make lambda-e2e-deps`` fills), so the local template can also be deployed.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sqsjobs.deploy.packaging import LambdaBuild, build_lambda_zip
from tests.emulators import REPO_ROOT, ministack_python
from tests.wheels import exclusive

CDK_VENV = Path(os.environ.get("SQSJOBS_CDK_VENV") or REPO_ROOT / ".venv-cdk")
STACK = "SqsJobsExample"
SYNTH_TIMEOUT_S = 240
#: A test here may be the one whose setup synthesizes the shared assemblies (a Lambda zip and three
#: stacks through jsii: 70-100 s on 2 loaded cores, past the suite's 120 s once): its own timeout
#: outlasts the synth's, so a slow synth fails with the synth's message rather than a bare timeout.
INFRA_TEST_TIMEOUT_S = SYNTH_TIMEOUT_S + 60


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this folder gets ``INFRA_TEST_TIMEOUT_S`` (unless it names its own)."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(INFRA_TEST_TIMEOUT_S))


@dataclass(frozen=True)
class Assembly:
    """One synthesized cloud assembly."""

    directory: Path

    @property
    def template(self) -> dict[str, Any]:
        return json.loads((self.directory / f"{STACK}.template.json").read_text())

    @property
    def template_path(self) -> Path:
        return self.directory / f"{STACK}.template.json"

    def json(self, name: str) -> Any:
        return json.loads((self.directory / name).read_text())

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == kind}

    def one(self, kind: str) -> dict[str, Any]:
        found = list(self.resources(kind).values())
        assert len(found) == 1, f"expected one {kind}, got {len(found)}"
        return found[0]["Properties"]


@dataclass(frozen=True)
class Synth:
    full: Assembly
    local: Assembly
    options: Assembly
    lambda_zip: Path
    timings: dict[str, float]


def cdk_python() -> Path:
    python = CDK_VENV / "bin" / "python"
    if not python.exists():
        raise RuntimeError(
            f"no CDK virtualenv at {CDK_VENV}: build it with `make .venv-cdk/.installed` "
            "(pip install -r infra/requirements.txt -e . into .venv-cdk)"
        )
    return python


def synth_env() -> dict[str, str]:
    """No AWS_* or SQSJOBS_* from the shell: the template must not depend on who synthesizes it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SQSJOBS_", "CDK_"))}
    env["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"
    # CDK's built-in template validation costs ~7 s per synth; cfn-lint (test_template.py) checks more.
    env["CDK_VALIDATION"] = "false"
    return env


def run_synth(script: str, *args: str) -> Any:
    """Run ``tests/infra/<script>`` with the CDK virtualenv's Python; the JSON of its last output line."""
    done = subprocess.run(
        [str(cdk_python()), str(Path(__file__).with_name(script)), *args],
        cwd=REPO_ROOT,
        env=synth_env(),
        capture_output=True,
        text=True,
        timeout=SYNTH_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def monitoring_template(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The template of ``monitoring_synth.py`` (monitoring options asked for), synthesized once per process."""
    return run_synth("monitoring_synth.py", str(tmp_path_factory.mktemp("monitoring-synth")))


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    # Under xdist each worker has its own basetemp; their parent is shared by the whole run.
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    work = shared / "infra-synth"
    with exclusive(shared / "infra-synth.lock"):
        if not (work / "done").exists():
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            _synthesize(work)
            (work / "done").touch()
    out = work / "cdk.out"
    timings = json.loads((out / "timings.json").read_text())
    print(f"\ninfra synth: {timings}", file=sys.stderr)
    return Synth(
        Assembly(out / "full"),
        Assembly(out / "local"),
        Assembly(out / "options"),
        work / "lambda.zip",
        timings,
    )


def _synthesize(work: Path) -> None:
    python = cdk_python()
    report = build_lambda_zip(
        LambdaBuild(
            app="examples.shop:app",
            output=work / "lambda.zip",
            python_version=ministack_python(),
            arch={"aarch64": "arm64"}.get(platform.machine(), platform.machine()),
            project_dir=REPO_ROOT,
            offline=True,
            compress_level=1,
        )
    )
    out = work / "cdk.out"
    out.mkdir()
    done = subprocess.run(
        [str(python), str(Path(__file__).with_name("synth_example.py")), str(out), str(report.path)],
        cwd=REPO_ROOT,
        env=synth_env(),
        capture_output=True,
        text=True,
        timeout=SYNTH_TIMEOUT_S,
    )
    if done.returncode != 0:
        reports = "\n".join(p.read_text()[:4000] for p in out.glob("*/validation-report.json"))
        raise RuntimeError(f"synthesis failed ({done.returncode}):\n{done.stderr[-6000:]}\n{reports}")


@pytest.fixture(scope="session")
def full(synth: Synth) -> Assembly:
    return synth.full


@pytest.fixture(scope="session")
def local(synth: Synth) -> Assembly:
    return synth.local


@pytest.fixture(scope="session")
def options(synth: Synth) -> Assembly:
    """``SqsJobs`` options the example app does not use (``synth_example.options``)."""
    return synth.options
