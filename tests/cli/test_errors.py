"""One error path for every command: one line on stderr, a documented exit code, never a traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from sqsjobs.cli import common
from sqsjobs.cli.common import EXIT_CODES, EXIT_ERROR, EXIT_NOT_FOUND
from sqsjobs.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]


def sqsjobs(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The installed CLI in a process of its own, from the repository root (so ``tests`` imports)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SQSJOBS_")} | env
    return subprocess.run(
        [sys.executable, "-m", "sqsjobs", *args],
        cwd=ROOT,
        env=environ | {"COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ── as a subprocess ──────────────────────────────────────────────────────────────────────────
@pytest.mark.slow
def test_a_missing_app_module_is_one_line_and_exit_1():
    # WHEN the CLI is pointed at a module that does not exist
    run = sqsjobs("jobs", "get", "some-id", "--app", "no_such_module.jobs:app")
    # THEN it says so in one line, exits 1, and prints no traceback
    assert run.returncode == EXIT_ERROR, run.stderr
    assert "cannot import 'no_such_module.jobs'" in one_error_line(run.stderr)
    assert "Traceback" not in run.stderr + run.stdout


@pytest.mark.slow
def test_a_job_id_that_does_not_exist_is_one_line_and_exit_3(ledger):
    # GIVEN a provisioned table with jobs in it, on the running emulator
    table = ledger.app.settings.table_name
    # WHEN the CLI asks for an id that no job has
    run = sqsjobs(
        "jobs",
        "get",
        "no-such-job",
        "--app",
        "tests.cli.jobs_app:app",
        "--endpoint-url",
        ledger.endpoint,
        SQSJOBS_TABLE=table,
    )
    # THEN it answers "not found" in one line with exit 3, and no traceback
    assert run.returncode == EXIT_NOT_FOUND, run.stderr
    assert one_error_line(run.stderr) == f"error: no job with id 'no-such-job' in table {table}"
    assert "Traceback" not in run.stderr + run.stdout and run.stdout == ""


# ── every command, in process ────────────────────────────────────────────────────────────────
def _commands_taking_app() -> list[list[str]]:
    """The argv of every command with an --app option, required arguments and options filled with ``x``."""
    found: list[list[str]] = []

    def walk(command, path: list[str]) -> None:
        if path == ["package"]:
            return  # names the app for the zip, never imports it
        if hasattr(command, "commands"):  # a group
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
            return
        params = {p.name: p for p in command.params}
        if "app" in params and "--app" in params["app"].opts:
            args = ["x" for p in command.params if p.param_type_name == "argument" and p.required]
            options = [
                a
                for p in command.params
                if p.param_type_name == "option" and p.required
                for a in (p.opts[0], "x")
            ]
            found.append([*path, *args, *options])

    walk(typer.main.get_command(cli), [])
    return found


COMMANDS = _commands_taking_app()


def test_the_walk_finds_every_command_group():
    groups = {argv[0] for argv in COMMANDS}
    assert {"jobs", "dlq", "stats", "doctor", "schedules", "provision", "worker", "enqueue"} <= groups


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_every_command_reports_an_app_it_cannot_load_the_same_way(argv):
    # WHEN any command is given an --app that does not import
    result = CliRunner().invoke(cli, [*argv, "--app", "no_such_module.jobs:app"])
    # THEN it exits 1 with the same single line (the runner re-raises nothing: no traceback)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    assert result.exit_code == EXIT_ERROR, result.output
    assert "cannot import 'no_such_module.jobs'" in one_error_line(result.stderr)


# ── the documented table ─────────────────────────────────────────────────────────────────────
def _table_rows(text: str, row: str) -> dict[int, str]:
    return {int(m.group(1)): " ".join(m.group(2).split()) for m in re.finditer(row, text, re.MULTILINE)}


def test_the_exit_codes_are_documented_in_one_table_shown_by_help_and_the_docs():
    # GIVEN the exit codes as data
    expected = {code: " ".join(meaning.split()) for code, meaning in EXIT_CODES.items()}
    assert set(expected) == {0, 1, 2, 3, 4, 5, 130}
    # THEN the module docstring's table says the same
    assert _table_rows(common.__doc__ or "", r"^(\d+)\s{2,}(.+)$") == expected
    # AND `sqsjobs --help` ends with it
    shown = " ".join(CliRunner().invoke(cli, ["--help"], env={"COLUMNS": "400"}).stdout.split())
    assert all(f"{code} {meaning}" in shown for code, meaning in expected.items()), shown
    # AND docs/operations.md has the same rows
    docs = (ROOT / "docs" / "operations.md").read_text()
    assert _table_rows(docs, r"^\| (\d+) \| (.+) \|$") == expected
