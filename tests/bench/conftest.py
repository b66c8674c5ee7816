"""What the bench's tests share: a clean environment for ``python -m bench.*``, and the proxy tests' scratch
table and queue."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.aws_scratch import queue_url, table  # noqa: F401 (fixtures of test_proxy.py)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench_env() -> dict[str, str]:
    """This environment without AWS or sqsjobs settings (the bench sets its own), the checkout on
    ``PYTHONPATH``, and the MiniStack binary ``make test`` points at, if any."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SQSJOBS_"))}
    env["PYTHONPATH"] = str(REPO)
    if os.environ.get("SQSJOBS_MINISTACK_BIN"):
        env["SQSJOBS_MINISTACK_BIN"] = os.environ["SQSJOBS_MINISTACK_BIN"]
    return env
