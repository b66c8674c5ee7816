"""One typed DynamoDB write, and its two renderings: an UpdateItem (or PutItem) request and a PartiQL statement.

Every write of the jobs table is built here as data — a key, assignments, removals, and a condition
made of *named fragments* (``store/conditions.py``) — and only then rendered (``store/rendering.py``).
Nothing edits a built request and nothing reads an expression back: a guard that must hold too (an
expiry deadline, a write id) is one more fragment or assignment added to the ``Write`` before it is
rendered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from sqsjobs.errors import NotBatchable
from sqsjobs.store.conditions import AV, Condition, Expr, Fragment, Missing
from sqsjobs.store.rendering import finish, guards_expression, statement_template, update_template

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping


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
        return dict(self._values())

    def _values(self) -> Mapping[str, AV]:
        """``all_values`` without a copy when the fragments share the write's own values (most do)."""
        out: Mapping[str, AV] = self.values
        merged: dict[str, AV] | None = None
        for fragment in self.guards:
            theirs = fragment.values
            if theirs is self.values or not theirs:
                continue
            if merged is None:
                out = merged = dict(self.values)
            common = merged.keys() & theirs.keys()
            if any(merged[name] != theirs[name] for name in common):
                raise ValueError(f"a placeholder has two values in one write: {sorted(common)}")
            merged.update(theirs)
        return out

    def update_item(self) -> dict[str, Any]:
        """The UpdateItem request (its expressions rendered once per shape: ``update_template``)."""
        update, condition, names, used, pick = _by_shape(_UPDATES, self, update_template)
        params: dict[str, Any] = {"TableName": self.table, "Key": dict(self.key), "UpdateExpression": update}
        if condition is not None:
            params["ConditionExpression"] = condition
        if names:
            params["ExpressionAttributeNames"] = dict(names)
        if used:
            params["ExpressionAttributeValues"] = dict(zip(used, pick(self._values()), strict=True))
        if self.returns != "NONE":
            params["ReturnValues"] = self.returns
        if self.old_on_refusal:
            params["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        return params

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
        (key_value,) = self.key.values()
        text, before_key, after_key = _by_shape(_STATEMENTS, self, statement_template)
        values = self._values()
        return {
            "Statement": text,
            "Parameters": [*before_key(values), key_value, *after_key(values)],
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
            params["ConditionExpression"] = guards_expression(self.guards, names, used)
        values: dict[str, AV] = {k: v for f in self.guards for k, v in f.values.items()}
        return finish(params, names, used, values, "NONE", self.old_on_refusal)

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


@dataclass(frozen=True, slots=True)
class Delete:
    """An item deleted (DeleteItem), optionally conditional."""

    table: str
    key: Mapping[str, AV]
    guards: tuple[Fragment, ...] = ()
    #: ``ALL_OLD``: the deleted item comes back.
    returns: Literal["NONE", "ALL_OLD"] = "NONE"

    def delete_item(self) -> dict[str, Any]:
        """The DeleteItem request."""
        params: dict[str, Any] = {"TableName": self.table, "Key": dict(self.key)}
        names: dict[str, str] = {}
        used: list[str] = []
        if self.guards:
            params["ConditionExpression"] = guards_expression(self.guards, names, used)
        values: dict[str, AV] = {k: v for f in self.guards for k, v in f.values.items()}
        params = finish(params, names, used, values, "NONE", old_on_refusal=False)
        if self.returns != "NONE":
            params["ReturnValues"] = self.returns
        return params


@dataclass(frozen=True, slots=True)
class Check:
    """A condition on an item that a transaction needs to hold, writing nothing (``ConditionCheck``)."""

    table: str
    key: Mapping[str, AV]
    guards: tuple[Fragment, ...]

    def transact_item(self) -> dict[str, Any]:
        """The ``ConditionCheck`` entry of a ``TransactWriteItems``."""
        names: dict[str, str] = {}
        used: list[str] = []
        params: dict[str, Any] = {"TableName": self.table, "Key": dict(self.key)}
        params["ConditionExpression"] = guards_expression(self.guards, names, used)
        values: dict[str, AV] = {k: v for f in self.guards for k, v in f.values.items()}
        return finish(params, names, used, values, "NONE", old_on_refusal=False)


def new_id_only(table: str, item: Mapping[str, AV], *, old_on_refusal: bool = True) -> Put:
    """A put that creates the item only if its ``id`` is new."""
    return Put(table, item, (Fragment("new_id", Missing("id")),), old_on_refusal)


# ── rendering: once per shape ────────────────────────────────────────────────────────────────
_T = TypeVar("_T")
#: Renderings by the identity of a write's parts (table, key name, sets, removes, adds, conditions).
#: Builders keep those parts as module constants (or cached tuples), so a worker's writes find their
#: rendering without hashing a tree; each entry keeps its parts alive, so an id is never reused while
#: it is a key. Bounded: emptied when full (a shape built afresh per write only ever misses here and
#: is found by value in the ``lru_cache`` below).
_UPDATES: dict[tuple[int, ...], tuple[tuple[object, ...], Any]] = {}
_STATEMENTS: dict[tuple[int, ...], tuple[tuple[object, ...], Any]] = {}
_BY_SHAPE_MAX = 512


def _by_shape(
    cache: dict[tuple[int, ...], tuple[tuple[object, ...], Any]], write: Write, render: Callable[..., _T]
) -> _T:
    """``render(*parts)`` of ``write``'s shape, computed once per shape (a ``NotBatchable`` too)."""
    (key,) = write.key
    parts = (write.table, key, write.sets, write.removes, write.adds, *[f.condition for f in write.guards])
    ids = tuple(map(id, parts))
    found = cache.get(ids)
    if found is None:
        try:
            rendered: Any = render(*parts)
        except NotBatchable as exc:
            rendered = exc
        if len(cache) >= _BY_SHAPE_MAX:
            cache.clear()
        found = cache[ids] = (parts, rendered)
    if isinstance(found[1], NotBatchable):
        raise NotBatchable(str(found[1]))
    result: _T = found[1]
    return result


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
