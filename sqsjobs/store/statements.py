"""``BatchExecuteStatement``: up to 25 of the store's writes in one request, and each answer read back.

A worker holding many jobs at one moment claims and finishes them in one request instead of one
request each (docs/scale.md): each statement keeps its own condition and its own
``ReturnValuesOnConditionCheckFailure``, and is billed as its own write. Nothing here is a second
definition of a transition: a statement is the PartiQL rendering of the very ``Write`` whose
UpdateItem it may replace (``Write.statement``: same values, same nonce, same fence), and a refused
statement is turned back into the ``StoreError`` the UpdateItem would have raised
(``statement_error``), so every reader of a refusal (``store/job_store.py``) reads both alike.

What a statement cannot say (``ReturnValues``, an upsert, ``OR``/``NOT``) is refused by the renderer
with ``NotBatchable`` (``store/write.py``); such a write goes as its single request.

The request carries plain values (decimal numbers, and strings of letters, digits and ``_.:#-``: statuses,
ids, tokens, hashes) as literals in the statement's text rather than as parameters (``inlined``):
botocore serialises every parameter against the ten-member ``AttributeValue`` union, about 4 µs
each on the worker's path, and a claim has 17 of them. Nothing that could close a quote is ever
written into the text: any other value stays a parameter.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import StoreError
from sqsjobs.store.codec import CCF

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The most statements DynamoDB takes in one BatchExecuteStatement.
MAX_STATEMENTS = 25
#: Per-statement error codes that say the statement was not applied for a passing reason (throttling,
#: a conflicting transaction, a server fault): the write is retried as a single request.
TRANSIENT_CODES = frozenset(
    {
        "ProvisionedThroughputExceeded",
        "ThrottlingError",
        "RequestLimitExceeded",
        "InternalServerError",
        "TransactionConflict",
    }
)

#: Whole-request error codes of an endpoint that does not run PartiQL (dynalite, the embedded moto,
#: which refuses it because it ignores its conditions): use single writes with it.
UNSUPPORTED_CODES = frozenset({"UnknownOperationException"})


#: A number written as a literal: an unsigned decimal, as ``av_n`` writes times and counts. No unary
#: minus after an operator, and no exponent (PartiQL reads ``1e3`` as a float, not DynamoDB's decimal).
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
#: A string written as a literal: no quote, backslash, space or other character that PartiQL reads.
_PLAIN = re.compile(r"[A-Za-z0-9_.:#-]{1,256}")


def batch(statements: list[dict[str, Any]]) -> dict[str, Any]:
    """The BatchExecuteStatement request of at most ``MAX_STATEMENTS`` statements (``inlined``)."""
    if not 1 <= len(statements) <= MAX_STATEMENTS:
        raise ValueError(f"a batch takes 1 to {MAX_STATEMENTS} statements, not {len(statements)}")
    return {"Statements": [inlined(s) for s in statements]}


def literal(value: Mapping[str, Any]) -> str | None:
    """``value`` as a PartiQL literal, or None when it must stay a parameter."""
    if len(value) != 1:
        return None
    ((kind, raw),) = value.items()
    if kind == "N" and isinstance(raw, str) and _NUMBER.fullmatch(raw):
        return raw
    if kind == "S" and isinstance(raw, str) and _PLAIN.fullmatch(raw):
        return f"'{raw}'"
    return None


@functools.lru_cache(maxsize=256)
def _pieces(text: str) -> tuple[str, ...]:
    """The text around each ``?`` (the renderers write no ``?`` but placeholders: identifiers are plain)."""
    return tuple(text.split("?"))


def inlined(statement: Mapping[str, Any]) -> dict[str, Any]:
    """The same statement with its plain parameters written into the text (module docstring)."""
    params = statement.get("Parameters") or []
    pieces = _pieces(statement["Statement"])
    if not params or len(pieces) != len(params) + 1:
        return dict(statement)
    text, kept = [pieces[0]], []
    for value, piece in zip(params, pieces[1:], strict=True):
        written = literal(value)
        if written is None:
            kept.append(value)
            written = "?"
        text += (written, piece)
    out = {**statement, "Statement": "".join(text)}
    if kept:
        out["Parameters"] = kept
    else:
        del out["Parameters"]
    return out


def statement_error(answer: Mapping[str, Any]) -> StoreError | None:
    """The error a single write would have raised for one ``Responses`` entry (None: it was applied).

    A refused condition becomes the ``ConditionalCheckFailedException`` of UpdateItem, with the
    record under ``Item`` as ``ALL_OLD`` returns it; every other code keeps its name (without the
    ``Exception`` suffix AWS drops in batch answers).
    """
    error = answer.get("Error")
    if not error:
        return None
    code = str(error.get("Code", "Unknown"))
    message = str(error.get("Message", ""))
    if code == "ConditionalCheckFailed":
        response: dict[str, Any] = {"Error": {"Code": CCF, "Message": message}}
        if error.get("Item"):
            response["Item"] = error["Item"]
        return StoreError(f"dynamodb {CCF}: {message}", code=CCF, response=response)
    return StoreError(f"dynamodb {code}: {message}", code=code, response={"Error": dict(error)})
