"""Schemathesis against a real ``sqsjobs api`` process: every request it answers as its OpenAPI document says.

An independent check (issue 47): Schemathesis reads ``/openapi.json`` from the running server (a
populated App on MiniStack, behind a token), generates requests for every operation, valid and
not, and checks each answer: no 5xx (``not_a_server_error``), a status the operation documents,
a body matching the documented schema and content type, a 401 without the token
(``ignored_auth``), and a 2xx for every request the document says is valid
(``positive_data_acceptance``; tests/api/schemathesis.toml lists the few documented statuses it
may also answer, each with its reason). A fixed seed and three examples per operation (positive and
negative) keep it reproducible and near 25 s of requests; the coverage phase (about 1,200 more
boundary cases, 100 s) and the stateful phase (operations chained by their links) are left out
for the suite's time budget: run ``st run`` with them by hand after a change to the API.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.api.conftest import TOKEN
from tests.api.helpers import api_process
from tests.cli.conftest import fake_aws_env, populate

pytestmark = pytest.mark.slow

#: The narrow exclusions, each with its reason.
CONFIG = Path(__file__).with_name("schemathesis.toml")

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "response_schema_conformance",
    "content_type_conformance",
    "ignored_auth",
    "positive_data_acceptance",
)


def test_the_api_answers_every_generated_request_as_its_document_says(ministack_url, tmp_path):
    with fake_aws_env():
        world = populate(ministack_url)
    try:
        with api_process(world.app, tmp_path / "api.log", SQSJOBS_API_TOKEN=TOKEN) as url:
            started = time.monotonic()
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "schemathesis.cli",
                    "--config-file",
                    str(CONFIG),
                    "run",
                    f"{url}/openapi.json",
                    "--header",
                    f"Authorization: Bearer {TOKEN}",
                    "--checks",
                    ",".join(CHECKS),
                    "--phases",
                    "examples,fuzzing",
                    "--max-examples",
                    "3",
                    "--seed",
                    "47",
                    "--no-color",
                    "--request-timeout",
                    "30",
                    "--max-failures",
                    "20",
                ],
                cwd=tmp_path,  # its example database and reports stay out of the checkout
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            took = time.monotonic() - started
    finally:
        world.app.close()
    output = run.stdout + run.stderr
    summary = re.findall(r"\d+ generated[^\n]*", output)
    print(f"schemathesis: {took:.0f}s, {summary}")
    (tmp_path / "schemathesis.log").write_text(output)
    assert run.returncode == 0, output[-20000:]
