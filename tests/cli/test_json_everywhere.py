"""Every command that prints a result takes --json, and what it prints then is one JSON document.

The walk goes through the CLI's own command tree, so a new command without --json fails here; only
the long-running servers, which print no result, are exempt. The commands that gained --json are
then run for real against the emulator and their stdout parsed.
"""

from __future__ import annotations

import json

import typer.main
from typer.testing import CliRunner

from sqsjobs.cli.main import cli
from tests.cli.conftest import invoke, new_app
from tests.emulators import ministack_python
from tests.integration.lambda_events import host_arch

#: Servers: they run until stopped and print no result to render.
SERVERS = {"worker", "api", "dev", "outbox relay"}


def commands(command, path=()):
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield " ".join(path), command
        return
    for name, sub in subcommands.items():
        yield from commands(sub, (*path, name))


def test_every_command_but_the_servers_takes_json():
    walked = dict(commands(typer.main.get_command(cli)))
    assert {"provision", "sweep", "pause", "resume", "jobs cancel", "dlq replay", "package lambda"} <= set(
        walked
    )
    without = sorted(
        name
        for name, command in walked.items()
        if name not in SERVERS and "--json" not in {o for p in command.params for o in getattr(p, "opts", [])}
    )
    assert without == []


def test_the_commands_that_gained_json_print_one_document(ministack_url):
    app = new_app(ministack_url)
    app.job("t.pausable", pausable=True)(lambda payload, ctx: None)
    provisioned = json.loads(invoke(app, ministack_url, "provision", "--json").out)
    assert provisioned["table"] == app.settings.table_name
    assert set(provisioned["queues"]) == set(app.registry.queues())
    assert all(q["dlq_url"] for q in provisioned["queues"].values())
    assert json.loads(invoke(app, ministack_url, "pause", "t.pausable", "--reason", "r", "--json").out) == {
        "type": "t.pausable",
        "paused": True,
        "reason": "r",
    }
    assert json.loads(invoke(app, ministack_url, "resume", "t.pausable", "--json").out) == {
        "type": "t.pausable",
        "resumed": True,
    }
    assert invoke(app, ministack_url, "sweep", "--json").code == 2  # a running sweeper has no result
    plan = json.loads(invoke(app, ministack_url, "schedules", "plan", "--json").out)
    assert plan["changes"] == [] and "group" in plan
    applied = json.loads(invoke(app, ministack_url, "schedules", "apply", "--json", "--yes").out)
    assert applied["changes"] == plan["changes"]  # no schedules: at most the group is created
    again = json.loads(invoke(app, ministack_url, "schedules", "apply", "--json").out)
    assert again["group_exists"] is True and again["applied"] is False
    deps = CliRunner().invoke(
        cli,
        [
            "package",
            "lambda",
            "--deps-only",
            "--offline",
            "--json",
            "--arch",
            host_arch(),
            "--python-version",
            ministack_python(),
        ],
    )
    assert deps.exit_code == 0, deps.output
    assert json.loads(deps.stdout)["deps_dir"]
