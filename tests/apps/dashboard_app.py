"""An app for the dashboard tests: a job that dies while a marker file exists, and succeeds after.

The marker's text becomes the error message, so a test can make it look like markup and check
that the dashboard shows it as text. ``flaky`` fails its first attempt and succeeds its second.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqsjobs import App, JobContext, PermanentError, RetryPolicy
from sqsjobs.retry import Backoff


def register(app: App) -> None:
    @app.job("fragile", max_attempts=3, timeout=30)
    def fragile(payload: dict[str, str], ctx: JobContext) -> str:
        marker = Path(payload["marker"])
        if marker.exists():
            raise PermanentError(marker.read_text())
        return f"done on attempt {ctx.attempt}"

    @app.job(
        "flaky", max_attempts=3, retry=RetryPolicy(backoff=Backoff.FIXED, base_s=0, jitter=False), timeout=30
    )
    def flaky(payload: dict[str, str], ctx: JobContext) -> str:
        """Fails its first attempt (a retry the charts count as failed), succeeds the next."""
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        return "second attempt"


app = App(os.environ.get("TEST_APP_NAME", "dashboard"))
register(app)
