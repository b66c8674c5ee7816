"""Does this endpoint honour PartiQL conditions? Asked, not guessed from its host name.

Batched writes (``Settings.batch_writes``) send a worker's claims and finishes as PartiQL statements
in one ``BatchExecuteStatement``, each fenced by its own condition. AWS and MiniStack refuse a
statement whose condition is false (``ConditionalCheckFailed`` in its ``Responses`` entry). moto's
own server runs it as a silent no-op instead: a refused claim then looks landed, and two workers
both "claim" one job, or a finish is lost, with no error (issue "No stranded record", finding 6).
dynalite and the embedded moto of ``sqsjobs dev`` refuse PartiQL outright
(``UnknownOperationException``), which the batched writes already treat as "use single writes".

The probe, against the jobs table itself (no other resource or permission: the worker role has
``PutItem`` and ``PartiQLUpdate``)::

    PutItem   {id: "probe#partiql", probe: 0, expires_at: now + 1 h}        1 write unit
    BatchExecuteStatement [UPDATE ... SET probe = 1 WHERE id = ? AND probe = 2]
              must be refused: ConditionalCheckFailed                        1 write unit (refused)

Two requests, two write units, once per worker process start (and per ``sqsjobs doctor``). The item
is keyed with a ``#`` (no job id contains one, as ``worker#...``), carries no ``status`` or
``updated_at`` (no listing or ``stats`` takes it for a job) and has a TTL; every probe writes the same
key, so a table holds at most one, whatever the number of workers.
"""

from __future__ import annotations

import enum
import time
from typing import TYPE_CHECKING

from sqsjobs._aws import AsyncRunner, Call, Flow
from sqsjobs.errors import StoreError
from sqsjobs.store.codec import av_n, av_s
from sqsjobs.store.schema import TTL_ATTRIBUTE

if TYPE_CHECKING:
    from typing import Any

#: The probe item's key.
PROBE_ID = "probe#partiql"
#: DynamoDB deletes the probe item this long after the last probe (AWS: within days of it).
PROBE_TTL_S = 3600
#: A whole-request answer of an endpoint that runs no PartiQL at all.
UNSUPPORTED_CODES = frozenset({"UnknownOperationException"})


class PartiQL(enum.StrEnum):
    """What the probe found."""

    #: A false condition is refused, per statement, as AWS documents: batched writes are safe.
    HONOURED = "honoured"
    #: A false condition passed without a refusal: batched writes would lose claims and finishes.
    IGNORED = "ignored"
    #: PartiQL is refused outright: batched writes fall back to single writes by themselves.
    UNSUPPORTED = "unsupported"
    #: The probe itself failed (no table yet, no permission, the endpoint unreachable): unknown.
    UNKNOWN = "unknown"


#: The worker's one log line when the endpoint fails the probe.
BATCH_WRITES_OFF = (
    "batched writes off: this endpoint runs a PartiQL UPDATE whose condition is false without refusing "
    "it (moto's server does), so every claim and finish is sent as a single conditional write; set "
    "SQSJOBS_BATCH_WRITES=0 to skip the probe"
)


def probe_requests(table: str, now: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """The PutItem of the probe item and the BatchExecuteStatement whose one statement must be refused."""
    put = {
        "TableName": table,
        "Item": {"id": av_s(PROBE_ID), "probe": av_n(0), TTL_ATTRIBUTE: av_n(int(now) + PROBE_TTL_S)},
    }
    statement = {
        "Statement": f'UPDATE "{table}" SET "probe" = ? WHERE "id" = ? AND "probe" = ?',
        "Parameters": [av_n(1), av_s(PROBE_ID), av_n(2)],
    }
    return put, {"Statements": [statement]}


def read_answer(answer: dict[str, Any]) -> PartiQL:
    """HONOURED when the statement was refused by its condition, IGNORED when it was not."""
    responses = answer.get("Responses") or [{}]
    code = str(responses[0].get("Error", {}).get("Code", ""))
    return (
        PartiQL.HONOURED
        if code in ("ConditionalCheckFailed", "ConditionalCheckFailedException")
        else PartiQL.IGNORED
    )


def partiql_flow(table: str, now: float) -> Flow[tuple[PartiQL, str]]:
    """Probe ``table``'s endpoint; the finding and, for UNSUPPORTED or UNKNOWN, the error that says why."""
    put, batch = probe_requests(table, now)
    try:
        yield Call("dynamodb", "put_item", put)
        answer = yield Call("dynamodb", "batch_execute_statement", batch)
    except StoreError as exc:
        kind = PartiQL.UNSUPPORTED if exc.code in UNSUPPORTED_CODES else PartiQL.UNKNOWN
        return kind, str(exc).splitlines()[0]
    return read_answer(answer), ""


async def ignores_conditions(arun: AsyncRunner, table: str) -> bool:
    """Probe with ``arun`` (``App.arun``): True only when the endpoint ran a false condition's statement.

    Async, as the worker is: a worker process that probed with boto3 would load a second SDK for
    two requests (~0.6 s of CPU per start). An endpoint that refuses PartiQL, or a probe that
    failed, says nothing against batched writes: they fall back to single writes by themselves on a
    refusal, and AWS honours conditions.
    """
    finding, _ = await arun(partiql_flow(table, time.time()))
    return finding is PartiQL.IGNORED
