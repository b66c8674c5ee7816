"""``import sqsjobs`` leaves the AWS SDK out until a client is made (docs/deploy.md, "Cold start").

A producer that only defines jobs, a web app importing its tasks module, the CLI's parsing: none of
them makes an AWS call, and boto3/botocore are about a third of the import. Each check runs in a fresh
interpreter, so what another test imported cannot hide an eager import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test starts a process

#: The checkout this test belongs to: ``-c`` puts the working directory first on ``sys.path``.
ROOT = Path(__file__).resolve().parents[2]

SDK = ("boto3", "botocore", "aiobotocore", "s3transfer", "aws_lambda_powertools")

DEFINE = """
import json, os, sys
import sqsjobs
assert sqsjobs.__file__.startswith(os.getcwd()), sqsjobs.__file__
from sqsjobs import App, JobContext
app = App("lazy")
@app.job("lazy.add", max_attempts=3)
def add(payload: dict, ctx: JobContext) -> int:
    return 1
app.registry.get("lazy.add")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {sdk})))
"""


def loaded_after(code: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", code.replace("{sdk}", repr(set(SDK)))],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "AWS_EC2_METADATA_DISABLED": "true"},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_sqsjobs_and_defining_an_app_and_a_job_loads_no_aws_sdk():
    assert loaded_after(DEFINE) == []


def test_the_first_client_loads_the_sdk_and_its_errors_still_become_sqsjobs_errors():
    # The deferred imports are real: a call to a closed port is a StoreError, not a botocore one
    # (and not nothing: the child says what the call raised, and a call that returned says so too).
    code = """
import json, sys
from sqsjobs import App
app = App("lazy", endpoint_url="http://127.0.0.1:9", region="us-east-1")
try:
    app.get("no-such-job")
    raised = None
except Exception as exc:
    raised = type(exc).__module__ + "." + type(exc).__qualname__
print(json.dumps([raised, sorted(m for m in sys.modules if m in {sdk})]))
"""
    raised, loaded = loaded_after(code)
    assert raised == "sqsjobs.errors.StoreError"
    assert {"boto3", "botocore"} <= set(loaded)


def test_the_clis_help_loads_no_aws_sdk():
    code = """
import contextlib, io, json, os, runpy, sys
sys.argv = ["sqsjobs", "--help"]
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
    runpy.run_module("sqsjobs", run_name="__main__")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {sdk})))
"""
    assert loaded_after(code) == []
