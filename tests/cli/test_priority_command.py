"""``sqsjobs priority`` against MiniStack: dry run, move by type, refusals; the queues show where the messages went."""

from __future__ import annotations

import json

from sqsjobs.transport import routes
from tests.apps import routing
from tests.cli.conftest import invoke
from tests.integration.helpers import depth
from tests.integration.test_routing import ROUTED


def test_a_dry_run_changes_nothing_a_move_by_type_moves_records_and_messages_and_refusals_exit(
    ministack_url, make_app
):
    app = make_app(ministack_url, **ROUTED)
    app.registry.include(routing.app.registry)
    app.provision()
    ids = [app.enqueue("work.run", {"label": f"n{i}"}) for i in range(3)]
    # WHEN the operator dry-runs two ids to low
    dry = invoke(app, ministack_url, "priority", "low", "--id", ids[0], "--id", ids[1], "--dry-run", "--json")
    assert dry.code == 0, dry.err
    # THEN both would move, and nothing did
    assert json.loads(dry.out)["job_ids"] == ids[:2]
    assert all(app.get(i).priority is None for i in ids)
    # WHEN the type's jobs are moved (--yes: no question)
    done = invoke(app, ministack_url, "priority", "low", "--type", "work.run", "--yes", "--json")
    assert done.code == 0, done.err
    report = json.loads(done.out)
    # THEN every record and message is on the low level
    assert sorted(report["moved"]) == sorted(ids) == sorted(report["messages_moved"])
    assert all(app.get(i).priority == "low" for i in ids)
    assert depth(app, routes.route("work", "low"))["visible"] == 3
    assert depth(app, routes.route("work", "normal"))["visible"] == 0
    # ... and an unknown id exits 3, a bad level 2, and neither changes anything
    assert invoke(app, ministack_url, "priority", "high", "--id", "0" * 32).code == 3
    assert invoke(app, ministack_url, "priority", "urgent", "--id", ids[0]).code == 2
    assert invoke(app, ministack_url, "priority", "high").code == 2
    assert all(app.get(i).priority == "low" for i in ids)
