"""How long a finished record is kept, by how it ended and by type: read from the records' TTL, on both emulators.

Each end is written by the path that really writes it: a worker's success, death and cancelled run,
an operator's cancel of a waiting job, a worker's expiry of a job past its deadline. ``expires_at`` (the table's TTL
attribute) must be the end plus the most specific rule's retention.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from sqsjobs import Cancel, JobStatus, PermanentError
from sqsjobs._aws import Call, one
from sqsjobs.store.codec import av_s
from sqsjobs.testing import work_until

DAY = 86_400


def test_each_end_keeps_its_record_as_long_as_its_rule_says(backend_url, make_app):
    app = make_app(
        backend_url,
        retention_s=14 * DAY,
        retention={"succeeded": timedelta(days=1), "dead": 30 * DAY, "reports.build:succeeded": 7 * DAY},
        payload_object_days=31,
    )

    @app.job("mail.send")
    def send(payload, ctx):
        if payload.get("fail"):
            raise PermanentError("bounced")
        if payload.get("cancel"):
            raise Cancel("stopped")

    @app.job("reports.build")
    def build(payload, ctx):
        return {"ok": True}

    @app.job("mail.later", expires_after=1)
    def later(payload, ctx):
        return None

    app.provision()
    ids = {
        "succeeded": app.enqueue("mail.send", {}),
        "dead": app.enqueue("mail.send", {"fail": True}),
        "aborted": app.enqueue("mail.send", {"cancel": True}),
        "report": app.enqueue("reports.build", {}),
    }
    work_until(app, lambda: all(app.get(i).status.terminal for i in ids.values()))
    ids["cancelled"] = app.enqueue("mail.send", {}, delay=600)
    assert app.cancel(ids["cancelled"]) == "cancelled"
    ids["expired"] = app.enqueue("mail.later", {})
    time.sleep(1.5)  # past its deadline before any worker: the worker's claim expires it unrun
    work_until(app, lambda: app.get(ids["expired"]).status.terminal)

    kept = {name: _kept_s(app, job_id) for name, job_id in ids.items()}
    assert app.get(ids["expired"]).status is JobStatus.EXPIRED
    assert kept == pytest.approx(  # TTL is whole seconds: the end's fraction is dropped
        {
            "succeeded": 1 * DAY,  # the state's rule
            "dead": 30 * DAY,
            "aborted": 14 * DAY,  # no rule for cancelled: retention_s
            "report": 7 * DAY,  # the type's rule for that state, over the state's
            "cancelled": 14 * DAY,
            "expired": 14 * DAY,
        },
        abs=1,
    )


def _kept_s(app, job_id: str) -> int:
    """How long after its end the record's TTL lets it live, to the second (the raw item, as DynamoDB holds it)."""
    key = {"TableName": app.settings.table_name, "Key": {"id": av_s(job_id)}}
    item = app.run(one(Call("dynamodb", "get_item", key)))["Item"]
    return round(float(item["expires_at"]["N"]) - float(item["finished_at"]["N"]))
