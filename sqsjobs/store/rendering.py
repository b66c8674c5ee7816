"""Rendering a typed write: DynamoDB expressions (UpdateItem, PutItem, a read's filter) and PartiQL.

Rendering is printing a tree, never parsing text. A write's expressions and statement text depend on
its *shape* only (which attributes, which conditions), never on its values, so ``store/write.py``
renders each shape once and then only picks the values (``_picker``).

The PartiQL rendering (for ``BatchExecuteStatement``, ``store/statements.py``) refuses, with
``NotBatchable``, what one batched statement cannot say or what an emulator gets wrong:

* ``ReturnValues`` (``RETURNING`` is not taken in a batch: ``Write.statement`` refuses it);
* an upsert (``if_not_exists``): a PartiQL UPDATE of a missing item fails its condition;
* ``OR`` and ``NOT``: MiniStack 1.5.33 loses the key equality under an ``OR``, so no batched write uses one;
* ``ADD``, ``list_append``, an update without ``SET``, and nested paths.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from sqsjobs.errors import NotBatchable
from sqsjobs.store.conditions import (
    AV,
    All,
    AnyOf,
    Compare,
    Condition,
    Exists,
    Expr,
    Fragment,
    IfNotExists,
    ListAppend,
    Missing,
    Not,
    OneOf,
    Plus,
)
from sqsjobs.store.reserved import is_reserved


# ── rendering: expressions ───────────────────────────────────────────────────────────────────
def render_condition(condition: Condition, names: dict[str, str], used: list[str]) -> str:
    """A condition as a DynamoDB expression (also a Query's key condition or a Scan's filter)."""
    match condition:
        case Compare(left, op, right):
            return f"{_operand(left, names, used)} {op} {_operand(right, names, used)}"
        case OneOf(path, options):
            opts = ", ".join(_operand(o, names, used) for o in options)
            return f"{_path(path, names)} IN ({opts})"
        case Exists(path):
            return f"attribute_exists({_path(path, names)})"
        case Missing(path):
            return f"attribute_not_exists({_path(path, names)})"
        case All(parts):
            return " AND ".join(_nested(p, names, used) for p in parts)
        case AnyOf(parts):
            return " OR ".join(_nested(p, names, used) for p in parts)
        case Not(part):
            return f"NOT ({render_condition(part, names, used)})"
    raise TypeError(f"not a condition: {condition!r}")


def expression_parts(
    condition: Condition, values: Mapping[str, AV]
) -> tuple[str, dict[str, str], dict[str, AV]]:
    """A condition's expression, its attribute names and the values it uses (for a read's filter)."""
    names: dict[str, str] = {}
    used: list[str] = []
    text = render_condition(condition, names, used)
    return text, names, {name: values[name] for name in used}


def _nested(condition: Condition, names: dict[str, str], used: list[str]) -> str:
    text = render_condition(condition, names, used)
    return f"({text})" if isinstance(condition, All | AnyOf) and len(condition.parts) > 1 else text


def guards_expression(guards: tuple[Fragment, ...], names: dict[str, str], used: list[str]) -> str:
    """The condition of a write or put: its fragments ANDed (each one parenthesised when compound)."""
    if len(guards) == 1:
        return render_condition(guards[0].condition, names, used)
    return " AND ".join(_nested(f.condition, names, used) for f in guards)


def update_template(
    table: str,
    key: str,
    sets: tuple[tuple[str, Expr], ...],
    removes: tuple[str, ...],
    adds: tuple[tuple[str, str], ...],
    *conditions: Condition,
) -> tuple[str, str | None, Mapping[str, str], tuple[str, ...], Pick]:
    """What ``Write.update_item`` renders: the expressions, names, placeholders, and what picks their values."""
    update, condition, names, used = _update_expressions(sets, removes, adds, conditions)
    return update, condition, names, used, _picker(used)


#: Takes the values of some placeholders from a mapping, in order (``operator.itemgetter``, always a tuple).
Pick = Callable[[Mapping[str, AV]], tuple[AV, ...]]


def _picker(placeholders: tuple[str, ...]) -> Pick:
    if len(placeholders) > 1:
        return operator.itemgetter(*placeholders)
    if placeholders:
        (only,) = placeholders
        return lambda values: (values[only],)
    return lambda values: ()


@functools.lru_cache(maxsize=512)
def _update_expressions(
    sets: tuple[tuple[str, Expr], ...],
    removes: tuple[str, ...],
    adds: tuple[tuple[str, str], ...],
    conditions: tuple[Condition, ...],
) -> tuple[str, str | None, Mapping[str, str], tuple[str, ...]]:
    """An update's expressions, attribute names and used placeholders, rendered once per shape.

    A worker writes a handful of shapes, each thousands of times; only the values vary per job.
    """
    names: dict[str, str] = {}
    used: list[str] = []
    clauses = []
    if sets:
        assigned = ", ".join(f"{_path(p, names)} = {_expr(v, names, used)}" for p, v in sets)
        clauses.append(f"SET {assigned}")
    if removes:
        clauses.append(f"REMOVE {', '.join(_path(p, names) for p in removes)}")
    if adds:
        added = ", ".join(f"{_path(p, names)} {_operand(v, names, used)}" for p, v in adds)
        clauses.append(f"ADD {added}")
    condition = None
    if len(conditions) == 1:
        condition = render_condition(conditions[0], names, used)
    elif conditions:
        condition = " AND ".join(_nested(c, names, used) for c in conditions)
    return " ".join(clauses), condition, names, tuple(dict.fromkeys(used))


def _expr(value: Expr, names: dict[str, str], used: list[str]) -> str:
    match value:
        case str():
            return _operand(value, names, used)
        case IfNotExists(path, default):
            return f"if_not_exists({_path(path, names)}, {_operand(default, names, used)})"
        case Plus(left, op, right):
            return f"{_expr(left, names, used)} {op} {_operand(right, names, used)}"
        case ListAppend(left, right):
            return f"list_append({_expr(left, names, used)}, {_operand(right, names, used)})"
    raise TypeError(f"not an assignment value: {value!r}")


def _operand(operand: str, names: dict[str, str], used: list[str]) -> str:
    if operand.startswith(":"):
        used.append(operand)
        return operand
    return _path(operand, names)


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _path(path: str, names: dict[str, str]) -> str:
    """A top-level attribute, aliased (``#status``) when it is a reserved word or not a plain name."""
    if _IDENTIFIER.fullmatch(path) and not is_reserved(path):
        return path
    alias = f"#{path}" if _IDENTIFIER.fullmatch(path) else f"#n{len(names)}"
    for known, name in names.items():
        if name == path:
            return known
    names[alias] = path
    return alias


def finish(
    params: dict[str, Any],
    names: dict[str, str],
    used: list[str],
    values: Mapping[str, AV],
    returns: str,
    old_on_refusal: bool,
) -> dict[str, Any]:
    """A request completed with its names, the values it uses, and what it returns."""
    if names:
        params["ExpressionAttributeNames"] = names
    if used:
        params["ExpressionAttributeValues"] = {name: values[name] for name in used}
    if returns != "NONE":
        params["ReturnValues"] = returns
    if old_on_refusal:
        params["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    return params


# ── rendering: PartiQL ───────────────────────────────────────────────────────────────────────
#: The placeholder of the key's value (expression values are ``:name``, so it cannot clash).
KEY = "<key>"


def _quoted(path: str) -> str:
    if not _IDENTIFIER.fullmatch(path):
        raise NotBatchable(f"path {path!r}: only top-level attributes are translated")
    return f'"{path}"'


def _partiql_operand(operand: str, placeholders: list[str]) -> str:
    if operand.startswith(":"):
        placeholders.append(operand)
        return "?"
    return _quoted(operand)


def _partiql_expr(value: Expr, placeholders: list[str]) -> str:
    match value:
        case str():
            return _partiql_operand(value, placeholders)
        case Plus(str() as left, op, right):
            return f"{_partiql_operand(left, placeholders)} {op} {_partiql_operand(right, placeholders)}"
    raise NotBatchable(f"SET {value!r}")


def _partiql_conditions(condition: Condition, placeholders: list[str]) -> list[str]:
    match condition:
        case All(parts):
            return [text for part in parts for text in _partiql_conditions(part, placeholders)]
        case Compare(left, op, right):
            return [f"{_partiql_operand(left, placeholders)} {op} {_partiql_operand(right, placeholders)}"]
        case Missing(path):
            return [f"{_quoted(path)} IS MISSING"]
        case Exists(path):
            return [f"{_quoted(path)} IS NOT MISSING"]
        case OneOf(path, options):
            values = ", ".join(_partiql_operand(o, placeholders) for o in options)
            return [f"{_quoted(path)} IN [{values}]"]
    raise NotBatchable(f"condition {condition!r}")


def statement_template(
    table: str,
    key: str,
    sets: tuple[tuple[str, Expr], ...],
    removes: tuple[str, ...],
    adds: tuple[tuple[str, str], ...],
    *conditions: Condition,
) -> tuple[str, Pick, Pick]:
    """What ``Write.statement`` renders: the text, and what picks the values before and after the key."""
    text, placeholders = _statement_text(table, key, sets, removes, adds, conditions)
    at = placeholders.index(KEY)
    return text, _picker(placeholders[:at]), _picker(placeholders[at + 1 :])


@functools.lru_cache(maxsize=256)
def _statement_text(
    table: str,
    key: str,
    sets: tuple[tuple[str, Expr], ...],
    removes: tuple[str, ...],
    adds: tuple[tuple[str, str], ...],
    conditions: tuple[Condition, ...],
) -> tuple[str, tuple[str, ...]]:
    """A statement's text and the placeholders of its parameters, in order, once per shape.

    A worker writes a handful of shapes, each thousands of times: rendering each once keeps the
    rendering off the per-job CPU (translating every write was about a seventh of it).
    """
    if not sets:
        raise NotBatchable("the update must have a SET clause")
    if adds:
        raise NotBatchable("ADD is not translated")
    placeholders: list[str] = []
    clauses = "SET " + ", ".join(f"{_quoted(p)} = {_partiql_expr(v, placeholders)}" for p, v in sets)
    if removes:
        clauses += f" REMOVE {', '.join(_quoted(p) for p in removes)}"
    where = [f"{_quoted(key)} = ?"]
    placeholders.append(KEY)
    for condition in conditions:
        where += _partiql_conditions(condition, placeholders)
    return f'UPDATE "{table}" {clauses} WHERE {" AND ".join(where)}', tuple(placeholders)
