"""Log calls never pass ``extra=`` keys that ``logging`` reserves for the LogRecord.

``logging.Logger.makeRecord`` raises ``KeyError: "Attempt to overwrite 'created' in LogRecord"``
for such a key, but only when the record is built: at a level that is enabled, with a handler.
Tests running at WARNING never build INFO records, so the suite cannot see it at run time; this
scan of the source can.
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import sqsjobs

PACKAGE = Path(sqsjobs.__file__).parent

#: What ``makeRecord`` refuses: every attribute of a LogRecord, plus ``message`` and ``asctime``
#: (set by formatters), plus ``taskName`` (a LogRecord attribute from Python 3.12 on).
RESERVED = frozenset(vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def literal_keys(value: ast.expr) -> list[str]:
    """The string keys of ``{...}`` or ``dict(...)`` (spreads like ``**fields`` cannot be read)."""
    if isinstance(value, ast.Dict):
        return [k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict":
        return [kw.arg for kw in value.keywords if kw.arg is not None]
    return []


def extra_keys(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, key) for every literal key passed as ``extra=`` to any call."""
    return [
        (node.lineno, key)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for kw in node.keywords
        if kw.arg == "extra"
        for key in literal_keys(kw.value)
    ]


def test_the_scan_reads_both_literal_forms():
    # GIVEN calls with reserved keys in a dict display and in dict(...), and one spread
    tree = ast.parse('log.info("a", extra={"created": 1, **f})\nlog.info("b", extra=dict(name="x", ok=2))')
    # THEN both forms are read
    assert extra_keys(tree) == [(1, "created"), (2, "name"), (2, "ok")]


def test_no_log_call_in_the_package_passes_a_reserved_extra_key():
    # GIVEN every module of the package
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: extra key {key!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, key in extra_keys(ast.parse(path.read_text(), str(path)))
        if key in RESERVED
    ]
    # THEN no extra= key collides with a LogRecord attribute (rename it, e.g. schedules_created)
    assert found == []
