"""``sqsjobs batches get|list`` and the batch line of ``sqsjobs jobs get`` (MiniStack, in-process CLI)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sqsjobs.cli.common import EXIT_NOT_FOUND
from sqsjobs.cli.main import cli
from sqsjobs.testing import work_until
from tests.apps import batches as tb

APP_PATH = "tests.apps.batches:current"


@pytest.fixture
def tree(ministack_url, make_app, tmp_path, monkeypatch):
    """A complete root batch with one complete child batch, each with items."""
    monkeypatch.setenv("TEST_RUNS_DIR", str(tmp_path))
    app = make_app(ministack_url)
    app.registry.include(tb.app.registry)
    app.provision()
    root = app.batches.create("report", final_stage=True)
    child = app.batches.create("report", parent=root.id)
    items = [root.add("calc", {"n": n, "stream": 1, "into": child.id}) for n in range(2)]
    root.seal()
    work_until(app, lambda: app.batches.get(root.id).complete, timeout_s=30)
    tb.current = app
    return app, root.id, child.id, items


def cli_run(app, *args: str):
    result = CliRunner().invoke(
        cli,
        [*args, "--app", APP_PATH, "--endpoint-url", str(app.settings.endpoint_url)],
        env={"COLUMNS": "250"},
    )
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_batches_get_shows_the_tree_below_a_root_batch(tree):
    app, root, child, _ = tree
    out = cli_run(app, "batches", "get", root)
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    # the root first, its child indented below it, each with its counts and its callback
    assert root in lines[0] and "complete" in lines[0] and "2 succeeded, 0 failed, 0 pending" in lines[0]
    assert "children 1/1 complete" in lines[0] and "→ report (job " in lines[0]
    [child_line] = [line for line in lines[1:] if child in line]
    assert "2 succeeded" in child_line and child_line.index(child) > lines[0].index(root)

    data = json.loads(cli_run(app, "batches", "get", root, "--json").stdout)
    assert data["id"] == root and data["status"] == "complete" and data["counts"]["succeeded"] == 2
    assert [c["id"] for c in data["tree"]] == [child] and data["tree"][0]["parent_id"] == root
    assert data["tree"][0]["root_id"] == root and data["completed_at"] >= data["tree"][0]["completed_at"]


def test_batches_list_shows_the_newest_batches(tree):
    app, root, child, _ = tree
    data = json.loads(cli_run(app, "batches", "list", "--json").stdout)
    assert [b["id"] for b in data["batches"]] == [child, root]  # newest first
    human = cli_run(app, "batches", "list").stdout
    assert root in human and child in human and "2 batch(es)" in human


def test_jobs_get_shows_an_items_batch_and_an_unknown_batch_exits_3(tree):
    app, root, _, items = tree
    out = cli_run(app, "jobs", "get", items[0])
    assert out.exit_code == 0
    [line] = [line for line in out.stdout.splitlines() if line.startswith("batch")]
    assert root in line
    assert json.loads(cli_run(app, "jobs", "get", items[0], "--json").stdout)["batch_id"] == root
    missing = cli_run(app, "batches", "get", "nope")
    assert missing.exit_code == EXIT_NOT_FOUND and "no batch with id 'nope'" in missing.stderr
