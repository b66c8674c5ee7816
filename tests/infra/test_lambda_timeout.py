"""The construct refuses, at synth, a job type whose explicit timeout its Lambda function can never start.

No silent trap (docs/lambda.md): such a type's messages would cycle until the redrive policy dead-letters them. The
construct runs in the CDK virtualenv (``tests/infra/lambda_timeout_synth.py``); a missing venv is
an error with the fix, as for the other infra tests.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.conftest import run_synth


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result: dict[str, Any] = run_synth(
        "lambda_timeout_synth.py", str(tmp_path_factory.mktemp("lambda-timeout"))
    )
    return result


def test_an_explicit_timeout_over_the_function_timeout_fails_the_synth_naming_both(outcomes):
    # GIVEN a job type with a 600 s timeout, WHEN a 60 s Lambda worker is built for its queue
    error = outcomes["explicit"].get("error", "")
    # THEN the construct refuses it, naming the type, its timeout and the function's
    assert "'reports.build'" in error
    assert "600 s timeout" in error and "60 s timeout" in error


def test_a_type_without_an_explicit_timeout_deploys_on_a_short_function(outcomes):
    # GIVEN a job type without a timeout (300 s on ECS), WHEN a 60 s Lambda worker is built for it
    # THEN the stack synthesizes with the function's 60 s timeout: it runs in the time left
    assert outcomes["default"] == {"timeouts": [60]}
