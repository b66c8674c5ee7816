"""``sqsjobs workers`` and the workers line of ``sqsjobs stats``, on registry items in every status (MiniStack)."""

from __future__ import annotations

from sqsjobs._aws import Call, one
from sqsjobs.store import presence_items
from tests.cli.conftest import invoke, new_app


def _register(app, worker_id: str, *, age_s: float, state: str = presence_items.RUNNING, running=()) -> None:
    """A worker item as its worker wrote it ``age_s`` ago (interval 30 s)."""
    now = app.clock.now()
    entry = presence_items.WorkerEntry(
        worker_id, "host-a", 7, "1.2.3", ("default",), ("orders.ok",), 10, now - 3600, 30.0
    )
    params = presence_items.register(
        app.settings.table_name, entry, now=now - age_s, state=state, running=list(running)
    )
    app.run(one(Call("dynamodb", "put_item", params.put_item())))


def test_workers_lists_each_status_and_stats_counts_them(ministack_url):
    # GIVEN a live worker running a job, a draining one, a silent one and one whose TTL has passed
    app = new_app(ministack_url)
    app.provision()
    _register(app, "live-1", age_s=5, running=["j-running"])
    _register(app, "drain-1", age_s=5, state=presence_items.DRAINING)
    _register(app, "silent-1", age_s=90)  # 3 intervals: silent, TTL (6 intervals) not reached
    _register(app, "gone-1", age_s=400)  # past its TTL: DynamoDB may still return it, we do not

    # WHEN the operator lists them as JSON
    run = invoke(app, ministack_url, "workers", "--json")
    # THEN each has its status and what it runs; the expired one is not there
    assert run.code == 0, run.err
    by_id = {w["id"]: w for w in run.json["workers"]}
    assert {k: w["status"] for k, w in by_id.items()} == {
        "live-1": "live",
        "drain-1": "draining",
        "silent-1": "silent",
    }
    assert by_id["live-1"]["running"] == ["j-running"]
    assert run.json["counts"] == {"live": 1, "draining": 1, "silent": 1}

    # AND the table shows the same, and stats counts them
    table = invoke(app, ministack_url, "workers")
    assert table.code == 0 and "j-running" in table.out and "1 live, 1 draining, 1 silent" in table.out
    stats = invoke(app, ministack_url, "stats", "--json")
    assert stats.code == 0, stats.err
    assert stats.json["workers"] == {"live": 1, "draining": 1, "silent": 1}
    assert "workers: 1 live, 1 draining" in invoke(app, ministack_url, "stats").out


def test_workers_with_none_registered_says_so(ministack_url):
    app = new_app(ministack_url)
    app.provision()
    run = invoke(app, ministack_url, "workers", "--json")
    assert (run.code, run.json) == (0, {"workers": [], "counts": {"live": 0, "draining": 0, "silent": 0}})
