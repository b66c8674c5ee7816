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
