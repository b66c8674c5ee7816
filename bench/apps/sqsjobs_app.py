"""sqsjobs: the no-op job, run by ``sqsjobs worker --app bench.apps.sqsjobs_app:app``.

Settings come from the environment the harness sets (``SQSJOBS_ENDPOINT_URL`` = the proxy); all
else is sqsjobs' defaults (20 s long poll, 30 s visibility, 0.1 s ack linger, INFO logs).
"""

from __future__ import annotations

import os
from typing import Any

from bench.marker import mark
from sqsjobs import App, JobContext

#: Table ``<name>-jobs``, queue ``<name>-default``.
APP_NAME = os.environ.get("BENCH_SQSJOBS_APP", "bench-sqsjobs")

#: ``BENCH_FINISH_LINGER_S`` sets ``Settings.finish_linger_s`` (the harness passes it through; the
#: ``SQSJOBS_*`` variables it does not): an A/B of the finish's wait for company.
LINGER = os.environ.get("BENCH_FINISH_LINGER_S")
app = App(APP_NAME) if LINGER is None else App(APP_NAME, finish_linger_s=float(LINGER))


@app.job("noop")
def noop(payload: dict[str, Any], ctx: JobContext) -> None:
    """Marks its start and returns: the framework's own cost is all that is left to measure."""
    mark(payload)
