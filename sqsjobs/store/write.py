"""One typed DynamoDB write, and its two renderings: an UpdateItem (or PutItem) request and a PartiQL statement.

Every write of the jobs table is built here as data — a key, assignments, removals, and a condition
made of *named fragments* — and only then rendered. Nothing edits a built request and nothing reads an
expression back: a guard that must hold too (an expiry deadline, a write id) is one more fragment or
assignment added to the ``Write`` before it is rendered.

Operands are strings: ``":name"`` is a value placeholder (its AttributeValue sits in the write's
``values``), anything else an attribute path. The trees are tiny and immutable, so a builder may keep
the parts that never change as module constants and only the values vary per job.

The PartiQL rendering (for ``BatchExecuteStatement``, ``store/statements.py``) refuses, with
``NotBatchable``, what one batched statement cannot say or what an emulator gets wrong:

* ``ReturnValues`` (``RETURNING`` is not taken in a batch);
* an upsert (``if_not_exists``): a PartiQL UPDATE of a missing item fails its condition;
* ``OR`` and ``NOT``: MiniStack 1.5.33 loses the key equality under an ``OR``, so no batched write uses one;
* ``ADD``, ``list_append``, an update without ``SET``, and nested paths.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sqsjobs.errors import NotBatchable
from sqsjobs.store.reserved import is_reserved

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

#: An AttributeValue of the low-level client (``{"S": "x"}``).
AV = dict[str, Any]
#: Comparison operators of a condition.
Comparator = Literal["=", "<>", "<", "<=", ">", ">="]


# ── conditions ───────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True)
class Compare:
    """``left op right``; each side is a path or a ``:value``."""

    left: str
    op: Comparator
    right: str


@dataclass(frozen=True, slots=True)
class OneOf:
    """``path IN (:a, :b)``."""

    path: str
    options: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Exists:
    """``attribute_exists(path)``."""

    path: str


@dataclass(frozen=True, slots=True)
class Missing:
    """``attribute_not_exists(path)``."""

    path: str


@dataclass(frozen=True, slots=True)
class All:
    """Every part holds (AND)."""

    parts: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    """At least one part holds (OR)."""

    parts: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Not:
    """The part does not hold."""

    part: Condition


Condition = Compare | OneOf | Exists | Missing | All | AnyOf | Not


def eq(left: str, right: str) -> Compare:
    """``left = right``."""
    return Compare(left, "=", right)


def all_of(*parts: Condition) -> All:
    """AND of ``parts``."""
    return All(parts)


def any_of(*parts: Condition) -> AnyOf:
    """OR of ``parts``."""
    return AnyOf(parts)


@dataclass(frozen=True, slots=True)
class Fragment:
    """A named part of a write's condition, with the values of its placeholders.

    The name says why the part is there (``fence``, ``runnable``, ``not_expired``...): tests and
    readers of a refusal find a guard by name instead of by its text.
    """

    name: str
    condition: Condition
    values: Mapping[str, AV] = field(default_factory=dict, compare=False)


# ── assignment values ────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True)
class IfNotExists:
    """``if_not_exists(path, :default)``: the stored value, or the default on an item without one."""

    path: str
    default: str


@dataclass(frozen=True, slots=True)
class Plus:
    """``left + right`` or ``left - right`` (``left`` may be an ``IfNotExists``)."""

    left: str | IfNotExists
    op: Literal["+", "-"]
    right: str


@dataclass(frozen=True, slots=True)
class ListAppend:
    """``list_append(left, right)``."""

    left: str | IfNotExists
    right: str


Expr = str | IfNotExists | Plus | ListAppend


# ── the write ────────────────────────────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True)
class Write:
    """A conditional update of one item (see the module docstring)."""

    table: str
    key: Mapping[str, AV]
    #: ``(path, value)`` pairs of the ``SET`` clause, in order.
    sets: tuple[tuple[str, Expr], ...] = ()
    removes: tuple[str, ...] = ()
    #: ``(path, :value)`` pairs of the ``ADD`` clause (a counter or a set).
    adds: tuple[tuple[str, str], ...] = ()
    #: ANDed: the write lands only if every fragment holds.
    guards: tuple[Fragment, ...] = ()
    #: The values of the assignments' placeholders (the fragments carry their own).
    values: Mapping[str, AV] = field(default_factory=dict, compare=False)
    #: ``ALL_NEW``: the single write returns the record it made.
    returns: Literal["NONE", "ALL_NEW"] = "NONE"
    #: A refusal returns the record as it was (``ReturnValuesOnConditionCheckFailure=ALL_OLD``).
    old_on_refusal: bool = True

    def guard(self, name: str, condition: Condition, values: Mapping[str, AV] | None = None) -> Write:
        """This write, landing only if ``condition`` holds too."""
        return _replace(self, guards=(*self.guards, Fragment(name, condition, values or {})))

    def also_set(self, sets: Iterable[tuple[str, Expr]], values: Mapping[str, AV]) -> Write:
        """This write, assigning ``sets`` too (placeholders valued by ``values``)."""
        return _replace(self, sets=(*self.sets, *sets), values={**self.values, **values})

    def fragment(self, name: str) -> Condition | None:
        """The condition of the fragment called ``name`` (None: there is none)."""
        return next((f.condition for f in self.guards if f.name == name), None)

    def value(self, placeholder: str) -> AV | None:
        """The value of ``placeholder``, from the assignments or any fragment."""
        if placeholder in self.values:
            return dict(self.values[placeholder])
        for fragment in self.guards:
            if placeholder in fragment.values:
                return dict(fragment.values[placeholder])
        return None

    def all_values(self) -> dict[str, AV]:
        """Every placeholder's value; a name given two different values is a builder's bug."""
        out = dict(self.values)
        for fragment in self.guards:
            for name, av in fragment.values.items():
                if out.setdefault(name, av) != av:
                    raise ValueError(f"placeholder {name} has two values in one write")
        return out

    def update_item(self) -> dict[str, Any]:
        """The UpdateItem request."""
        names: dict[str, str] = {}
        used: list[str] = []
        params: dict[str, Any] = {
            "TableName": self.table,
            "Key": dict(self.key),
            "UpdateExpression": _update_expression(self, names, used),
        }
        if self.guards:
            params["ConditionExpression"] = _guards_expression(self.guards, names, used)
        return _finish(params, names, used, self.all_values(), self.returns, self.old_on_refusal)

    def transact_item(self) -> dict[str, Any]:
        """The ``Update`` entry of a ``TransactWriteItems`` (no ``ReturnValues``; ALL_OLD on refusal)."""
        params = self.update_item()
        params.pop("ReturnValues", None)
        params["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        return params

    def statement(self) -> dict[str, Any]:
        """The PartiQL UPDATE that does what ``update_item`` does to an existing item.

        Raises:
            NotBatchable: the write needs what a batched statement lacks (module docstring).
        """
        if self.returns != "NONE":
            raise NotBatchable("a batched statement returns no values")
        ((key, key_value),) = self.key.items()
        text, placeholders = _statement_template(
            self.table, key, self.sets, self.removes, self.adds, tuple(f.condition for f in self.guards)
        )
        values = self.all_values()
        return {
            "Statement": text,
            "Parameters": [key_value if p == _KEY else values[p] for p in placeholders],
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }


@dataclass(frozen=True, slots=True)
class Put:
    """A whole item written at once (PutItem), optionally conditional."""

    table: str
    item: Mapping[str, AV]
    guards: tuple[Fragment, ...] = ()
    old_on_refusal: bool = False

    def put_item(self) -> dict[str, Any]:
        """The PutItem request."""
        params: dict[str, Any] = {"TableName": self.table, "Item": dict(self.item)}
        names: dict[str, str] = {}
        used: list[str] = []
        if self.guards:
            params["ConditionExpression"] = _guards_expression(self.guards, names, used)
        values: dict[str, AV] = {k: v for f in self.guards for k, v in f.values.items()}
        return _finish(params, names, used, values, "NONE", self.old_on_refusal)

    def transact_item(self) -> dict[str, Any]:
        """The ``Put`` entry of a ``TransactWriteItems``."""
        return self.put_item()

    def statement(self) -> dict[str, Any]:
        """The PartiQL INSERT: it fails on an existing key, the same condition as ``Missing(id)``.

        Raises:
            NotBatchable: the put has another condition (or none: an INSERT is always conditional).
        """
        if [f.condition for f in self.guards] != [Missing("id")]:
            raise NotBatchable("only a put conditional on a new id is an INSERT")
        fields = ", ".join(f"'{name}': ?" for name in self.item)
        return {
            "Statement": f'INSERT INTO "{self.table}" VALUE {{{fields}}}',
            "Parameters": list(self.item.values()),
        }


def new_id_only(table: str, item: Mapping[str, AV], *, old_on_refusal: bool = True) -> Put:
    """A put that creates the item only if its ``id`` is new."""
    return Put(table, item, (Fragment("new_id", Missing("id")),), old_on_refusal)


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


def _guards_expression(guards: tuple[Fragment, ...], names: dict[str, str], used: list[str]) -> str:
    if len(guards) == 1:
        return render_condition(guards[0].condition, names, used)
    return " AND ".join(_nested(f.condition, names, used) for f in guards)


def _update_expression(write: Write, names: dict[str, str], used: list[str]) -> str:
    clauses = []
    if write.sets:
        sets = ", ".join(f"{_path(p, names)} = {_expr(v, names, used)}" for p, v in write.sets)
        clauses.append(f"SET {sets}")
    if write.removes:
        clauses.append(f"REMOVE {', '.join(_path(p, names) for p in write.removes)}")
    if write.adds:
        adds = ", ".join(f"{_path(p, names)} {_operand(v, names, used)}" for p, v in write.adds)
        clauses.append(f"ADD {adds}")
    return " ".join(clauses)


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


def _finish(
    params: dict[str, Any],
    names: dict[str, str],
    used: list[str],
    values: Mapping[str, AV],
    returns: str,
    old_on_refusal: bool,
) -> dict[str, Any]:
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
_KEY = "<key>"


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


@functools.lru_cache(maxsize=256)
def _statement_template(
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
    placeholders.append(_KEY)
    for condition in conditions:
        where += _partiql_conditions(condition, placeholders)
    return f'UPDATE "{table}" {clauses} WHERE {" AND ".join(where)}', tuple(placeholders)


def _replace(
    write: Write,
    *,
    sets: tuple[tuple[str, Expr], ...] | None = None,
    guards: tuple[Fragment, ...] | None = None,
    values: Mapping[str, AV] | None = None,
) -> Write:
    return Write(
        write.table,
        write.key,
        write.sets if sets is None else sets,
        write.removes,
        write.adds,
        write.guards if guards is None else guards,
        write.values if values is None else values,
        write.returns,
        write.old_on_refusal,
    )
