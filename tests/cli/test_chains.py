"""``sqsjobs chains get|cancel`` and the chain line of ``sqsjobs jobs get``, on MiniStack (no worker needed)."""

from __future__ import annotations

import pytest

from tests.cli.conftest import invoke, new_app


@pytest.fixture
def chained(ministack_url):
    app = new_app(ministack_url)
    app.provision()
    chain_id = app.chains.start([("orders.ok", {"order_id": "o-1"}), ("orders.ok", {"order_id": "o-2"})])
    return app, ministack_url, chain_id


def test_chains_get_shows_each_step_with_its_job_id_and_state(chained):
    app, url, chain_id = chained
    run = invoke(app, url, "chains", "get", chain_id, "--json")
    assert run.code == 0, run.err
    data = run.json
    assert (data["id"], data["status"], data["current"]) == (chain_id, "running", 0)
    assert [(s["index"], s["type"], s["status"]) for s in data["steps"]] == [
        (0, "orders.ok", "queued"),
        (1, "orders.ok", "waiting"),
    ]
    text = invoke(app, url, "chains", "get", chain_id)
    assert text.code == 0 and "waiting" in text.out and data["steps"][1]["job_id"] in text.out


def test_jobs_get_names_a_steps_chain_and_index(chained):
    app, url, chain_id = chained
    step = app.chains.get(chain_id).steps[1].job_id
    assert invoke(app, url, "jobs", "get", step, "--json").json["chain"] == {
        "id": chain_id,
        "step": 1,
        "steps": 2,
    }
    assert f"{chain_id} step 1 of 2" in invoke(app, url, "jobs", "get", step).out


def test_chains_cancel_then_get_says_cancelled(chained):
    app, url, chain_id = chained
    assert "cancelled" in invoke(app, url, "chains", "cancel", chain_id).out
    data = invoke(app, url, "chains", "get", chain_id, "--json").json
    assert data["status"] == "cancelled" and [s["status"] for s in data["steps"]] == [
        "cancelled",
        "cancelled",
    ]


def test_an_unknown_chain_is_one_line_and_exit_3(chained):
    app, url, _ = chained
    run = invoke(app, url, "chains", "get", "cnothere")
    assert run.code == 3 and "no chain with id 'cnothere'" in run.err


def test_jobs_list_and_stats_take_waiting_steps_and_never_show_the_chain_record(chained):
    app, url, chain_id = chained
    listed = invoke(app, url, "jobs", "list", "--status", "waiting", "--json")
    assert listed.code == 0, listed.err
    assert [row["id"] for row in listed.json["jobs"]] == [f"{chain_id}-01"]
    everything = invoke(app, url, "jobs", "list", "--json").json["jobs"]
    assert sorted(row["id"] for row in everything) == [f"{chain_id}-00", f"{chain_id}-01"]
    stats = invoke(app, url, "stats", "--json")
    assert stats.code == 0, stats.err
    (orders,) = [t for t in stats.json["types"] if t["type"] == "orders.ok"]
    assert (orders["counts"]["queued"], orders["counts"]["waiting"]) == (1, 1)


def test_cancelling_one_queued_or_waiting_step_alone_is_refused_and_names_the_chain(chained):
    app, url, chain_id = chained
    for step in app.chains.get(chain_id).steps:  # queued step 0, waiting step 1
        run = invoke(app, url, "jobs", "cancel", step.job_id)
        assert run.code == 4 and f"sqsjobs chains cancel {chain_id}" in run.err
    assert [s.status.value for s in app.chains.get(chain_id).steps] == ["queued", "waiting"]
