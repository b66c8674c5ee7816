"""PartiQL twins of the store's writes, so one ``BatchExecuteStatement`` carries up to 25 of them.

A worker holding many jobs at one moment claims and finishes them in one request instead of one
request each (DESIGN §4): each statement keeps its own condition and its own
``ReturnValuesOnConditionCheckFailure``, and is billed as its own write. Nothing here is a second
definition of a transition: ``update_statement`` translates the very UpdateItem request built in
``store/requests.py`` (same values, same nonce, same fence), and a refused statement is turned back
into the ``StoreError`` the UpdateItem would have raised (``statement_error``), so every reader of a
refusal (``interpret_claim_refusal``, ``lease_lost``, ``shows_own_write``...) reads both alike.

Two things a single write has and a statement has not, and what replaces them:

* **no upsert**: a PartiQL UPDATE of a missing item fails its condition. A claim whose record is not
  there yet (the producer's write still in flight) falls back to the single upserting claim.
* **no ``ReturnValues``** (``RETURNING`` is not taken in a batch): a batched claim cannot return the
  record it made. ``fresh_claim`` therefore only claims a record that was never claimed
  (``lease_epoch = 0``), whose every field the message carries: ``claimed_job`` rebuilds it
  exactly. A job claimed before (a retry, a released or replayed job) takes the single claim.

The translator knows the expression grammar the builders use — ``SET p = :v``, ``p = p ± :v``,
``REMOVE p``, and conditions joined by AND: comparisons, ``IN``, ``attribute_(not_)exists`` — and
refuses anything else with ``NotBatchable`` (``OR`` included: MiniStack 1.5.33 loses the key
equality under an ``OR``, so no batched write uses one).
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import NotBatchable, StoreError
from sqsjobs.job import JobStatus
from sqsjobs.store import expiry
from sqsjobs.store.codec import CCF, Item, av_n, av_s, job_from_item, num_attr, old_item, str_attr
from sqsjobs.store.enqueue import record_of
from sqsjobs.store.requests import claim as claim_request

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.envelope import Envelope
    from sqsjobs.job import Job

#: The most statements DynamoDB takes in one BatchExecuteStatement.
MAX_STATEMENTS = 25
#: Per-statement error codes that say the statement was not applied for a passing reason (throttling,
#: a conflicting transaction, a server fault): the write is retried as a single request.
TRANSIENT_CODES = frozenset({
    "ProvisionedThroughputExceeded", "ThrottlingError", "RequestLimitExceeded", "InternalServerError",
    "TransactionConflict",
})  # fmt: skip

#: Whole-request error codes of an endpoint that does not run PartiQL (dynalite, the embedded moto,
#: which refuses it because it ignores its conditions): use single writes with it.
UNSUPPORTED_CODES = frozenset({"UnknownOperationException"})


# ── translation ──────────────────────────────────────────────────────────────────────────────
_TOKEN = re.compile(r"\s*(:\w+|#\w+|[A-Za-z_][\w.]*|<>|<=|>=|[=<>(),+-])")
_COMPARATORS = frozenset({"=", "<>", "<", "<=", ">", ">="})


def _tokens(expression: str) -> list[str]:
    tokens, pos = [], 0
    expression = expression.rstrip()
    while pos < len(expression):
        match = _TOKEN.match(expression, pos)
        if match is None:
            raise NotBatchable(f"cannot read {expression[pos:]!r}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


class _Writer:
    """Builds one statement's text, and the placeholders of its positional parameters in order."""

    def __init__(self, names: Mapping[str, str]) -> None:
        self.names = names
        self.placeholders: list[str] = []

    def path(self, token: str) -> str:
        name = self.names[token] if token.startswith("#") else token
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise NotBatchable(f"path {name!r}: only top-level attributes are translated")
        return f'"{name}"'

    def value(self, token: str) -> str:
        self.placeholders.append(token)
        return "?"

    def operand(self, token: str) -> str:
        return self.value(token) if token.startswith(":") else self.path(token)


def _split(tokens: list[str], separator: str) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    depth = 0
    for token in tokens:
        depth += token == "("
        depth -= token == ")"
        if token == separator and depth == 0:
            parts.append([])
        else:
            parts[-1].append(token)
    return parts


def _assignments(writer: _Writer, tokens: list[str]) -> list[str]:
    out = []
    for part in _split(tokens, ","):
        match part:
            case [path, "=", value]:
                out.append(f"{writer.path(path)} = {writer.operand(value)}")
            case [path, "=", left, ("+" | "-") as op, right]:
                out.append(f"{writer.path(path)} = {writer.operand(left)} {op} {writer.operand(right)}")
            case _:
                raise NotBatchable(f"SET {' '.join(part)}")
    return out


def _condition(writer: _Writer, tokens: list[str]) -> list[str]:
    out = []
    for part in _split(tokens, "AND"):
        match part:
            case [left, op, right] if op in _COMPARATORS:
                out.append(f"{writer.operand(left)} {op} {writer.operand(right)}")
            case ["attribute_not_exists", "(", path, ")"]:
                out.append(f"{writer.path(path)} IS MISSING")
            case ["attribute_exists", "(", path, ")"]:
                out.append(f"{writer.path(path)} IS NOT MISSING")
            case [path, "IN", "(", *options, ")"]:
                values = [writer.value(o) for o in options if o != ","]
                out.append(f"{writer.path(path)} IN [{', '.join(values)}]")
            case _:
                raise NotBatchable(f"condition {' '.join(part)}")
    return out


def update_statement(params: Mapping[str, Any]) -> dict[str, Any]:
    """The PartiQL UPDATE that does what the UpdateItem request ``params`` does to an existing item.

    Raises:
        NotBatchable: the request needs what a batched statement lacks (``ReturnValues``, an
            ``if_not_exists`` upsert, an ``OR``, a nested path).
    """
    if params.get("ReturnValues", "NONE") != "NONE":
        raise NotBatchable("a batched statement returns no values")
    ((key, key_value),) = params["Key"].items()
    statement, placeholders = _update_template(
        params["TableName"],
        key,
        params["UpdateExpression"],
        params.get("ConditionExpression"),
        tuple(sorted(params.get("ExpressionAttributeNames", {}).items())),
    )
    values = params.get("ExpressionAttributeValues", {})
    return {
        "Statement": statement,
        "Parameters": [key_value if p == _KEY else values[p] for p in placeholders],
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


#: The placeholder of the key's value (expression values are ``:name``, so it cannot clash).
_KEY = "<key>"


@functools.lru_cache(maxsize=256)
def _update_template(
    table: str, key: str, update: str, condition: str | None, names: tuple[tuple[str, str], ...]
) -> tuple[str, tuple[str, ...]]:
    """The statement text and the placeholders of its parameters, in order.

    A worker writes a handful of expression shapes, each thousands of times: translating each shape
    once keeps the translation off the per-job CPU (it was about a seventh of it).
    """
    writer = _Writer(dict(names))
    tokens = _tokens(update)
    if not tokens or tokens[0] != "SET":
        raise NotBatchable("the update must start with SET")
    removes: list[str] = []
    if "REMOVE" in tokens:
        at = tokens.index("REMOVE")
        tokens, removes = tokens[:at], [t for t in tokens[at + 1 :] if t != ","]
    clauses = [f"SET {', '.join(_assignments(writer, tokens[1:]))}"]
    if removes:
        clauses.append(f"REMOVE {', '.join(writer.path(p) for p in removes)}")
    where = [f'"{key}" = ?']
    writer.placeholders.append(_KEY)
    if condition is not None:
        where += _condition(writer, _tokens(condition))
    return f'UPDATE "{table}" {" ".join(clauses)} WHERE {" AND ".join(where)}', tuple(writer.placeholders)


def insert_statement(put: Mapping[str, Any]) -> dict[str, Any]:
    """The PartiQL INSERT of a ``put_job`` request: it fails on an existing key, the same condition."""
    if put.get("ConditionExpression") != "attribute_not_exists(id)":
        raise NotBatchable("only a put conditional on a new id is an INSERT")
    item: Item = put["Item"]
    fields = ", ".join(f"'{name}': ?" for name in item)
    return {
        "Statement": f'INSERT INTO "{put["TableName"]}" VALUE {{{fields}}}',
        "Parameters": list(item.values()),
    }


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


# ── the claim a batch can carry ──────────────────────────────────────────────────────────────
#: What a fresh claim sets, attribute → value placeholder (plus ``claim_msg``): one list for the
#: request and for ``claimed_job``, which applies the same values to the message's record.
_FRESH_SETS = {
    "status": ":running", "attempt": ":one", "lease_owner": ":owner", "claim_token": ":token",
    "lease_epoch": ":one", "lease_expires": ":expires", "started_at": ":now", "updated_at": ":now",
    "max_attempts": ":max",
}  # fmt: skip


def fresh_claim(
    table: str,
    envelope: Envelope,
    *,
    owner: str,
    token: str,
    message_id: str | None,
    now: float,
    lease_s: float,
    max_attempts: int,
    clock_skew_s: float,
) -> dict[str, Any]:
    """The claim of a job never claimed before, as an UpdateItem request ``update_statement`` translates.

    Same effect as ``requests.claim`` on such a record (attempt and epoch 0 → 1), but every value it
    writes is known without the answer, so ``claimed_job`` can rebuild the record. It must use the
    same ``token`` as the single claim it may fall back to, so a lost answer is recognised either way.
    """
    if not envelope.has_payload:
        raise NotBatchable("a version 1 message does not carry the record")
    values: dict[str, Any] = {
        ":queued": av_s(JobStatus.QUEUED), ":retry": av_s(JobStatus.RETRY_SCHEDULED),
        ":running": av_s(JobStatus.RUNNING), ":due_by": av_n(now + clock_skew_s), ":now": av_n(now),
        ":zero": av_n(0), ":one": av_n(1), ":owner": av_s(owner), ":token": av_s(token),
        ":expires": av_n(now + lease_s), ":max": av_n(max_attempts), ":hash": av_s(str(envelope.payload_hash)),
    }  # fmt: skip
    assigned = dict(_FRESH_SETS)
    if message_id:
        values[":msg"] = av_s(message_id)
        assigned["claim_msg"] = ":msg"
    sets = [f"{'#status' if name == 'status' else name} = {value}" for name, value in assigned.items()]
    return {
        "TableName": table,
        "Key": {"id": av_s(envelope.job_id)},
        "ConditionExpression": (
            "lease_epoch = :zero AND attempt = :zero AND #status IN (:queued, :retry) "
            "AND run_at <= :due_by AND payload_hash = :hash"
        ),
        "UpdateExpression": f"SET {', '.join(sets)} REMOVE attn, due",
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": values,
    }


def claims(
    table: str,
    envelope: Envelope,
    *,
    first_delivery: bool,
    clock_skew_s: float,
    expires_after_s: float | None = None,
    **claim: Any,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The single claim of a delivery, and the fresh claim that may go in a batch instead (or None).

    Only a first delivery of a version 2 message is worth a fresh claim: a redelivered message is
    usually a retry, whose attempt and history are the record's (its fresh claim would be refused).
    Both use the same token, so a lost answer is recognised whichever of them landed. Both refuse a
    job that expired (``store/expiry.py``; ``expires_after_s`` is the type's bound).
    """
    now = claim["now"]
    single = expiry.guard_claim(
        claim_request(table, envelope, **claim), now=now, type_bound_s=expires_after_s
    )
    if not (first_delivery and envelope.has_payload):
        return single, None
    fresh = fresh_claim(table, envelope, clock_skew_s=clock_skew_s, **claim)
    return single, expiry.guard_fresh_claim(fresh, envelope, now=now, type_bound_s=expires_after_s)


def claimed_job(envelope: Envelope, fresh: Mapping[str, Any]) -> Job:
    """The job a landed ``fresh_claim`` made: the message's record with the claim's values applied."""
    values = fresh["ExpressionAttributeValues"]
    assigned = {**_FRESH_SETS, **({"claim_msg": ":msg"} if ":msg" in values else {})}
    # The message's record has no attention entry (``attn``, ``due``) for the claim to remove.
    return job_from_item(record_of(envelope) | {name: values[value] for name, value in assigned.items()})


def claim_needs_single(error: StoreError, token: str, start_by: float | None = None) -> bool:
    """True when a refused ``fresh_claim`` says only that the single claim must decide.

    That is: no record yet (the single claim creates it from the message); a waiting record claimed
    before (a retry, released or replayed job: its attempt is not the message's to know), or whose
    deadline is not the message's (``start_by``: another enqueue with the same key); or this very
    claim, landed on a try whose answer was lost (the single claim's refusal shows it as ours).
    Any other refusal (finished, not due, held by another owner, another payload) is read at once.
    """
    old = old_item(error)
    if old is None:
        return error.code == CCF
    status = str_attr(old, "status")
    if status in (JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED):
        stored = num_attr(old, "start_by")
        other_deadline = (stored is None) != (start_by is None) or (
            stored is not None and start_by is not None and round(stored, 3) != round(start_by, 3)
        )
        return (num_attr(old, "lease_epoch") or 0) != 0 or other_deadline
    return status == JobStatus.RUNNING and str_attr(old, "claim_token") == token
