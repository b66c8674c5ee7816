"""An app for tests/integration/test_retry_retention.py: a handler that asks for one long retry."""

from __future__ import annotations

import os
from typing import Any

from sqsjobs import App, JobContext, Retry

app = App(os.environ.get("TEST_APP_NAME", "retrying"))


@app.job("later.once", max_attempts=3, timeout=30)
def once(payload: dict[str, Any], ctx: JobContext) -> int:
    """Fails its first attempt asking to run again ``retry_after_s`` later; succeeds on the next."""
    if ctx.attempt == 1:
        raise Retry(delay_s=float(payload["retry_after_s"]))
    return ctx.attempt
