"""Which change of the job table is which event: pure, from change-stream records written by hand."""

from __future__ import annotations

import json

import pytest

from sqsjobs import App, ConfigurationError, Hooks
from sqsjobs.events.catalogue import ALL_EVENTS, Choice, choice_of, events_of

EVERYTHING = Choice(ALL_EVENTS, {})


def job_item(status: str, *, attempt: int = 1, finished: float | None = 1_800_000_100.0, **extra):
    item = {
        "id": {"S": "j1"},
        "type": {"S": "reports.build"},
        "queue": {"S": "default"},
        "status": {"S": status},
        "attempt": {"N": str(attempt)},
        "run_at": {"N": "1800000000"},
        "created_at": {"N": "1800000000"},
        "updated_at": {"N": "1800000100"},
        "payload": {"S": json.dumps({"card": "4111 1111 1111 1111"})},
        **extra,
    }
    if finished is not None:
        item["finished_at"] = {"N": str(finished)}
    return item


def change(new, old=None, name="MODIFY"):
    return {"eventName": name, "dynamodb": {"NewImage": new, **({"OldImage": old} if old else {})}}


@pytest.mark.parametrize(
    ("status", "name"),
    [
        ("succeeded", "JobSucceeded"),
        ("dead", "JobDead"),
        ("expired", "JobExpired"),
        ("cancelled", "JobCancelled"),
    ],
)
def test_a_terminal_transition_is_one_event_named_after_the_state_it_entered(status, name):
    (event,) = events_of(change(job_item(status), job_item("running", finished=None)), EVERYTHING)
    assert event.name == name
    assert event.detail["id"] == "j1" and event.detail["status"] == status
    assert "payload" not in event.detail and "4111" not in json.dumps(event.entry("bus"))


def test_a_running_job_flagged_by_the_slow_run_watch_is_one_event_once():
    # GIVEN the renewal that wrote a run's slow-run flag, and a later renewal that kept it
    flag = {"S": json.dumps({"at": 1800000010.0, "elapsed_s": 31.5, "p95_s": 10.0, "factor": 3.0})}
    running = job_item("running", finished=None)
    flagged = {**running, "running_long": flag}
    # THEN the first is a JobRunningLong event with the flag, the second none
    (event,) = events_of(change(flagged, running), EVERYTHING)
    assert event.name == "JobRunningLong" and event.event_id == "job:j1:running_long:1"
    assert event.detail["elapsed_s"] == 31.5 and event.detail["p95_s"] == 10.0
    assert events_of(change(flagged, flagged), EVERYTHING) == []


def test_a_write_that_leaves_a_job_where_it_was_or_not_finished_is_no_event():
    assert events_of(change(job_item("succeeded"), job_item("succeeded")), EVERYTHING) == []
    assert (
        events_of(change(job_item("running", finished=None), job_item("queued", finished=None)), EVERYTHING)
        == []
    )
    assert events_of({"eventName": "REMOVE", "dynamodb": {"OldImage": job_item("dead")}}, EVERYTHING) == []


def test_a_record_created_finished_is_an_event_too():
    # an unknown type's reject creates the record dead, with no old image
    (event,) = events_of(change(job_item("dead"), name="INSERT"), EVERYTHING)
    assert event.name == "JobDead"


def test_the_event_id_is_the_transition_and_a_replayed_job_ending_again_is_a_new_one():
    ended = change(job_item("dead", attempt=3), job_item("running", finished=None))
    assert events_of(ended, EVERYTHING)[0].event_id == events_of(ended, EVERYTHING)[0].event_id
    again = change(job_item("dead", attempt=1, finished=1_800_000_900.0), job_item("running", finished=None))
    assert events_of(again, EVERYTHING)[0].event_id != events_of(ended, EVERYTHING)[0].event_id


def test_per_type_events_win_over_the_apps_and_unknown_names_are_refused():
    app = App("events-unit", event_bus="bus", events="JobDead")

    @app.job("reports.build", hooks=Hooks(events=["JobSucceeded"]))
    def build(payload: dict, ctx) -> None: ...

    @app.job("quiet", hooks=Hooks(events=False))
    def quiet(payload: dict, ctx) -> None: ...

    choice = choice_of(app.settings, app.registry)
    assert choice.wants("JobSucceeded", "reports.build") and not choice.wants("JobDead", "reports.build")
    assert not choice.wants("JobDead", "quiet")
    assert choice.wants("JobDead", "another") and not choice.wants("BatchCompleted")
    assert [e.name for e in events_of(change(job_item("succeeded"), job_item("running")), choice)] == [
        "JobSucceeded"
    ]
    with pytest.raises(ConfigurationError):
        app.job("bad", hooks=Hooks(events=["JobExploded"]))
    with pytest.raises(ValueError, match="unknown events"):
        choice_of(App("x", events="JobExploded").settings, app.registry)


def test_batch_and_chain_records_complete_once():
    batch_old = {"id": {"S": "batch#b1"}, "status": {"S": "sealed"}}
    batch_new = {
        "id": {"S": "batch#b1"},
        "status": {"S": "complete"},
        "on_complete": {"S": "done"},
        "cb_queue": {"S": "default"},
        "root": {"S": "b1"},
        "cfg": {"S": "h"},
        "counts": {"M": {"succeeded": {"N": "3"}}},
    }
    (event,) = events_of(change(batch_new, batch_old), EVERYTHING)
    assert (event.name, event.event_id, event.detail["counts"]) == (
        "BatchCompleted",
        "batch:b1:complete",
        {"succeeded": 3},
    )
    shard = {"id": {"S": "batch#b1#03"}, "status": {"S": "complete"}}
    assert events_of(change(shard, {"id": {"S": "batch#b1#03"}}), EVERYTHING) == []
    chain_old = {"id": {"S": "chain#c1"}, "chain_state": {"S": "running"}}
    chain_new = {
        "id": {"S": "chain#c1"},
        "chain_state": {"S": "stopped"},
        "length": {"N": "2"},
        "stopped_at": {"N": "1"},
    }
    (event,) = events_of(change(chain_new, chain_old), EVERYTHING)
    assert (event.name, event.detail["status"], event.detail["stopped_at"]) == (
        "ChainCompleted",
        "stopped",
        1,
    )
