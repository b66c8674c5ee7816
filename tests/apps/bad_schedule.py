"""An app whose schedule AWS would refuse: importing it fails with an error naming the schedule."""

from __future__ import annotations

from sqsjobs import App

app = App("bad-schedule")


@app.job("reports.build")
def build(payload: object, ctx: object) -> None:
    return None


app.schedule("reports.hourly", cron="cron(0 * * * * *)", job="reports.build")
