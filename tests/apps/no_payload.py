"""An app whose schedules give no ``payload=``, for the ``sqsjobs schedules`` subprocess tests.

``cache.warm`` is the README's example: a handler taking a dict, so each fire sends ``{}``.
``reports.nightly`` names a handler whose model has only defaults. Table, queues and schedule
group come from ``SQSJOBS_*`` variables the test sets, so every test run uses its own.
"""

from __future__ import annotations

from pydantic import BaseModel

from sqsjobs import App, JobContext

app = App("no-payload")


class ReportOptions(BaseModel):
    """Everything has a default: a schedule may leave the payload out."""

    kind: str = "daily"


@app.job("cache.warm", queue="cache")
def warm(payload: dict[str, object], ctx: JobContext) -> None:
    return None


@app.job("reports.build")
def build(payload: ReportOptions, ctx: JobContext) -> None:
    return None


app.schedule("cache.warm", rate="rate(10 minutes)", job="cache.warm")
app.schedule("reports.nightly", cron="cron(0 2 * * ? *)", timezone="Europe/Berlin", job="reports.build")
