"""The typed producer API, checked by mypy itself: right calls are clean, wrong ones are reported."""

from __future__ import annotations

import re
from pathlib import Path

from mypy import api

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
EXPECTED = re.compile(r"#\s*E:\s*([\w-]+)")
REPORTED = re.compile(r"^[^:]+:(\d+): error: .*\[([\w-]+)\]$")


def expected_errors(path: Path) -> set[tuple[int, str]]:
    lines = path.read_text().splitlines()
    return {(n, m.group(1)) for n, line in enumerate(lines, 1) if (m := EXPECTED.search(line))}


def test_mypy_checks_payloads_against_the_handler(tmp_path):
    # GIVEN a file of calls, the wrong ones marked with the error code they must raise
    snippet = HERE / "typed_calls.py"
    expected = expected_errors(snippet)
    assert expected, "the snippet marks no wrong calls"
    # WHEN mypy --strict (the project's settings) checks it, with a fresh cache kept out of the repo
    stdout, stderr, _ = api.run(
        [
            str(snippet),
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--show-error-codes",
            "--no-error-summary",
            "--hide-error-context",
        ]
    )
    # THEN exactly the marked lines are reported, each with its code: right calls are clean
    reported = {(int(m.group(1)), m.group(2)) for line in stdout.splitlines() if (m := REPORTED.match(line))}
    assert not stderr
    assert reported == expected, stdout
