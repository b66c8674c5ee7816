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
"""

from __future__ import annotations

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


def batch(statements: list[dict[str, Any]]) -> dict[str, Any]:
    """The BatchExecuteStatement request of at most ``MAX_STATEMENTS`` statements."""
    if not 1 <= len(statements) <= MAX_STATEMENTS:
        raise ValueError(f"a batch takes 1 to {MAX_STATEMENTS} statements, not {len(statements)}")
    return {"Statements": statements}


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
