"""An app for the claim-check tests: its handler reports what it received and returns a result of a given size."""

from __future__ import annotations

import hashlib
import os

from sqsjobs import App, JobContext, PermanentError

app = App(os.environ.get("TEST_APP_NAME", "large"))


@app.job("large.echo", max_attempts=2, timeout=20)
def echo(payload: dict[str, object], ctx: JobContext) -> dict[str, object]:
    """Fail for good while the ``fail_marker`` file exists (so a retry or a replay can then succeed)."""
    blob = str(payload["blob"])
    marker = payload.get("fail_marker")
    if marker and os.path.exists(str(marker)):
        raise PermanentError("asked to fail")
    return {
        "blob_bytes": len(blob),
        "blob_sha256": hashlib.sha256(blob.encode()).hexdigest(),
        "filler": "r" * int(payload.get("result_bytes", 0)),  # type: ignore[call-overload]
    }
