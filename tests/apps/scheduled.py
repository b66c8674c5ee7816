"""An app with schedule declarations, for the ``sqsjobs schedules`` CLI tests.

Its table, queues and schedule group come from ``SQSJOBS_*`` variables the test sets, so every
test run uses its own.
"""

from __future__ import annotations

from sqsjobs import App, JobContext

app = App("scheduled")


@app.job("reports.build")
def build(payload: dict[str, str], ctx: JobContext) -> None:
    return None


app.schedule(
    "reports.nightly",
    cron="cron(0 2 * * ? *)",
    timezone="Europe/Berlin",
    job="reports.build",
    payload={"kind": "daily"},
    flexible_window_minutes=5,
)
app.schedule("cache.warm", rate="rate(10 minutes)", job="reports.build", payload={"kind": "warm"})
