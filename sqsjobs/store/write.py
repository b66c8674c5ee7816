"""One typed DynamoDB write, and its two renderings: an UpdateItem (or PutItem) request and a PartiQL statement.

Every write of the jobs table is built here as data — a key, assignments, removals, and a condition
made of *named fragments* (``store/conditions.py``) — and only then rendered, below. Nothing edits a
built request and nothing reads an expression back: a guard that must hold too (an expiry deadline,
a write id) is one more fragment or assignment added to the ``Write`` before it is rendered.

Rendering is printing a tree, never parsing text. A write's expressions and statement text depend on
its *shape* only (which attributes, which conditions), never on its values, so each shape is
rendered once and then only its values are picked (``_picker``).

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar

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

if TYPE_CHECKING:
    from collections.abc import Iterable


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


#: A write that commits inside another's ``TransactWriteItems`` (a finish hook's, a transaction's).
Entry: TypeAlias = Write | Put | Delete | Check


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


# ── rendering: DynamoDB expressions (UpdateItem, PutItem, a read's filter) ────────────────────
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
    if _IDENTIFIER.fullmatch(path) and path.upper() not in RESERVED:
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


# ── DynamoDB's reserved words ────────────────────────────────────────────────────────────────
# An attribute called one of them must be aliased (``#status``) in an expression:
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ReservedWords.html — ``_path``
# aliases exactly these, so a builder names attributes plainly.
_WORDS = """
ABORT ABSOLUTE ACTION ADD AFTER AGENT AGGREGATE ALL ALLOCATE ALTER ANALYZE AND ANY ARCHIVE ARE ARRAY AS ASC
ASCII ASENSITIVE ASSERTION ASYMMETRIC AT ATOMIC ATTACH ATTRIBUTE AUTH AUTHORIZATION AUTHORIZE AUTO AVG BACK
BACKUP BASE BATCH BEFORE BEGIN BETWEEN BIGINT BINARY BIT BLOB BLOCK BOOLEAN BOTH BREADTH BUCKET BULK BY BYTE
CALL CALLED CALLING CAPACITY CASCADE CASCADED CASE CAST CATALOG CHAR CHARACTER CHECK CLASS CLOB CLOSE CLUSTER
CLUSTERED CLUSTERING CLUSTERS COALESCE COLLATE COLLATION COLLECTION COLUMN COLUMNS COMBINE COMMENT COMMIT
COMPACT COMPILE COMPRESS CONDITION CONFLICT CONNECT CONNECTION CONSISTENCY CONSISTENT CONSTRAINT CONSTRAINTS
CONSTRUCTOR CONSUMED CONTINUE CONVERT COPY CORRESPONDING COUNT COUNTER CREATE CROSS CUBE CURRENT CURSOR CYCLE
DATA DATABASE DATE DATETIME DAY DEALLOCATE DEC DECIMAL DECLARE DEFAULT DEFERRABLE DEFERRED DEFINE DEFINED
DEFINITION DELETE DELIMITED DEPTH DEREF DESC DESCRIBE DESCRIPTOR DETACH DETERMINISTIC DIAGNOSTICS DIRECTORIES
DISABLE DISCONNECT DISTINCT DISTRIBUTE DO DOMAIN DOUBLE DROP DUMP DURATION DYNAMIC EACH ELEMENT ELSE ELSEIF
EMPTY ENABLE END EQUAL EQUALS ERROR ESCAPE ESCAPED EVAL EVALUATE EXCEEDED EXCEPT EXCEPTION EXCEPTIONS
EXCLUSIVE EXEC EXECUTE EXISTS EXIT EXPLAIN EXPLODE EXPORT EXPRESSION EXTENDED EXTERNAL EXTRACT FAIL FALSE
FAMILY FETCH FIELDS FILE FILTER FILTERING FINAL FINISH FIRST FIXED FLATTERN FLOAT FOR FORCE FOREIGN FORMAT
FORWARD FOUND FREE FROM FULL FUNCTION FUNCTIONS GENERAL GENERATE GET GLOB GLOBAL GO GOTO GRANT GREATER GROUP
GROUPING HANDLER HASH HAVE HAVING HEAP HIDDEN HOLD HOUR IDENTIFIED IDENTITY IF IGNORE IMMEDIATE IMPORT IN
INCLUDING INCLUSIVE INCREMENT INCREMENTAL INDEX INDEXED INDEXES INDICATOR INFINITE INITIALLY INLINE INNER
INNTER INOUT INPUT INSENSITIVE INSERT INSTEAD INT INTEGER INTERSECT INTERVAL INTO INVALIDATE IS ISOLATION
ITEM ITEMS ITERATE JOIN KEY KEYS LAG LANGUAGE LARGE LAST LATERAL LEAD LEADING LEAVE LEFT LENGTH LESS LEVEL
LIKE LIMIT LIMITED LINES LIST LOAD LOCAL LOCALTIME LOCALTIMESTAMP LOCATION LOCATOR LOCK LOCKS LOG LOGED LONG
LOOP LOWER MAP MATCH MATERIALIZED MAX MAXLEN MEMBER MERGE METHOD METRICS MIN MINUS MINUTE MISSING MOD MODE
MODIFIES MODIFY MODULE MONTH MULTI MULTISET NAME NAMES NATIONAL NATURAL NCHAR NCLOB NEW NEXT NO NONE NOT
NULL NULLIF NUMBER NUMERIC OBJECT OF OFFLINE OFFSET OLD ON ONLINE ONLY OPAQUE OPEN OPERATOR OPTION OR ORDER
ORDINALITY OTHER OTHERS OUT OUTER OUTPUT OVER OVERLAPS OVERRIDE OWNER PAD PARALLEL PARAMETER PARAMETERS
PARTIAL PARTITION PARTITIONED PARTITIONS PATH PERCENT PERCENTILE PERMISSION PERMISSIONS PIPE PIPELINED PLAN
POOL POSITION PRECISION PREPARE PRESERVE PRIMARY PRIOR PRIVATE PRIVILEGES PROCEDURE PROCESSED PROJECT
PROJECTION PROPERTY PROVISIONING PUBLIC PUT QUERY QUIT QUORUM RAISE RANDOM RANGE RANK RAW READ READS REAL
REBUILD RECORD RECURSIVE REDUCE REF REFERENCE REFERENCES REFERENCING REGEXP REGION REINDEX RELATIVE RELEASE
REMAINDER RENAME REPEAT REPLACE REQUEST RESET RESIGNAL RESOURCE RESPONSE RESTORE RESTRICT RESULT RETURN
RETURNING RETURNS REVERSE REVOKE RIGHT ROLE ROLES ROLLBACK ROLLUP ROUTINE ROW ROWS RULE RULES SAMPLE
SATISFIES SAVE SAVEPOINT SCAN SCHEMA SCOPE SCROLL SEARCH SECOND SECTION SEGMENT SEGMENTS SELECT SELF SEMI
SENSITIVE SEPARATE SEQUENCE SERIALIZABLE SESSION SET SETS SHARD SHARE SHARED SHORT SHOW SIGNAL SIMILAR SIZE
SKEWED SMALLINT SNAPSHOT SOME SOURCE SPACE SPACES SPARSE SPECIFIC SPECIFICTYPE SPLIT SQL SQLCODE SQLERROR
SQLEXCEPTION SQLSTATE SQLWARNING START STATE STATIC STATUS STORAGE STORE STORED STREAM STRING STRUCT STYLE
SUB SUBMULTISET SUBPARTITION SUBSTRING SUBTYPE SUM SUPER SYMMETRIC SYNONYM SYSTEM TABLE TABLESAMPLE TEMP
TEMPORARY TERMINATED TEXT THAN THEN THROUGHPUT TIME TIMESTAMP TIMEZONE TINYINT TO TOKEN TOTAL TOUCH TRAILING
TRANSACTION TRANSFORM TRANSLATE TRANSLATION TREAT TRIGGER TRIM TRUE TRUNCATE TTL TUPLE TYPE UNDER UNDO UNION
UNIQUE UNIT UNKNOWN UNLOGGED UNNEST UNPROCESSED UNSIGNED UNTIL UPDATE UPPER URL USAGE USE USER USERS USING
UUID VACUUM VALUE VALUED VALUES VARCHAR VARIABLE VARIANCE VARINT VARYING VIEW VIEWS VIRTUAL VOID WAIT WHEN
WHENEVER WHERE WHILE WINDOW WITH WITHIN WITHOUT WORK WRAPPED WRITE YEAR ZONE
"""

#: The words ``_path`` aliases (compared upper-case).
RESERVED = frozenset(_WORDS.split())
