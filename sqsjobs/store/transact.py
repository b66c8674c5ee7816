"""Sans-I/O requests of a transactional enqueue (``sqsjobs.transaction``).

The one TransactWriteItems that carries the caller's writes and the job records, and the write that
clears a record once its message is sent.

A job record written in a transaction is ``put_job``'s, plus two things a plain enqueue does not
need, because its message goes only after the commit:

- the payload and a ``pending`` attention entry due at ``run_at + stale_after_s``: if the process
  dies between the commit and the send, the sweeper finds the entry and sends the hint;
- ``wid``: the transaction's own token (also its ``ClientRequestToken``), so a refusal that shows
  it is recognised as this very transaction, landed on a try whose answer was lost.

Once the message is sent, ``clear_sent`` removes the payload and the entry: the record is then the
one a plain enqueue writes, and the sweeper never sends a second copy of a hint that went.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqsjobs.store.codec import WRITE_ID, av_s
from sqsjobs.store.enqueue import is_same_job, put_job
from sqsjobs.store.schema import UNCHANGED_ENTRY
from sqsjobs.store.write import Delete, Entry, Put, Write

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sqsjobs.errors import StoreError
    from sqsjobs.store.codec import Item
    from sqsjobs.store.enqueue import NewJob

#: Items in one TransactWriteItems, and their aggregate size.
#: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
MAX_ITEMS = 100
MAX_BYTES = 4 * 1024 * 1024
#: The four kinds of item a TransactWriteItems carries (the key of each ``TransactItems`` entry).
OPERATIONS = ("Put", "Update", "Delete", "ConditionCheck")
#: The AttributeValue type tags of the low-level client (``{"S": "x"}``, ``{"N": "1"}``...).
ATTRIBUTE_TYPES = frozenset({"S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"})
#: A cancellation reason's code for a false condition (the whole request's error is TransactionCanceledException).
CONDITION_FAILED = "ConditionalCheckFailed"
#: DynamoDB's refusal of two items on one key; it names no item, so the check at the add is ours.
SAME_ITEM_MESSAGE = "multiple operations on one item"


def transact_write(entries: Sequence[Mapping[str, Any]], *, token: str) -> dict[str, Any]:
    """TransactWriteItems of ``entries`` (``{"Put": {...}}``...), idempotent for ``token``.

    AWS applies a request with a ``ClientRequestToken`` it has seen in the last 10 minutes only
    once, so botocore's retry after a lost answer is safe. An emulator that does not honour the
    token (moto: the retry is cancelled) is covered by ``apply.apply_all``'s ``own``.
    """
    return {"TransactItems": list(entries), "ClientRequestToken": token}


def entry_of(write: Entry) -> dict[str, Any]:
    """``write`` as one entry of a ``TransactWriteItems``: ``{"Update": ...}``, ``{"Put": ...}``...

    The one place a typed write becomes a transaction's entry, so the features' hooks hand the
    kernel typed writes and never a request of their own making.
    """
    if isinstance(write, Write):
        params = write.update_item()
        params.pop("ReturnValues", None)  # a transaction's entries return nothing
        return {"Update": params}
    if isinstance(write, Put):
        return {"Put": write.put_item()}
    if isinstance(write, Delete):
        params = write.delete_item()
        params.pop("ReturnValues", None)
        return {"Delete": params}
    return {"ConditionCheck": write.transact_item()}


def job_put(table: str, job: NewJob, *, token: str, pending_until: float) -> Put:
    """The put of a job record inside a transaction (``put_job``, kept for the sweeper, with ``wid``)."""
    put = put_job(table, job, pending_until=pending_until)
    return replace(put, item={**put.item, WRITE_ID: av_s(token)})


def job_entry(table: str, job: NewJob, *, token: str, pending_until: float) -> dict[str, Any]:
    """``job_put`` as a ``TransactWriteItems`` entry (``{"Put": ...}``)."""
    return {"Put": job_put(table, job, token=token, pending_until=pending_until).put_item()}


def clear_sent(table: str, record: Mapping[str, Any]) -> Write:
    """The write that turns a transaction's record whose message was sent into a plain enqueue's.

    It removes the payload (the message carries it; later writes are billed on a smaller item) and
    the attention entry (the sweeper would otherwise send a second hint). Only while the entry is
    the one the transaction wrote: a claim (which removes it), a sweep or a replay (which move
    ``due``) got there first, and the record is theirs.
    """
    write = Write(table, {"id": record["id"]}, removes=("payload", "attn", "due"), old_on_refusal=False)
    return write.guard("unchanged_entry", UNCHANGED_ENTRY, {":attn": record["attn"], ":due": record["due"]})


def cancellation_reasons(error: StoreError) -> list[dict[str, Any]]:
    """The per-item reasons of a ``TransactionCanceledException`` (one per item, in order)."""
    return list((error.response or {}).get("CancellationReasons", []))


def existing_job(reason: Mapping[str, Any], job: NewJob) -> bool | None:
    """For a job record's refusal: True when the existing record is this job, False when it conflicts.

    None when the refusal is not the idempotency check (no item came back).
    """
    old = reason.get("Item")
    if reason.get("Code") != CONDITION_FAILED or not old:
        return None
    return is_same_job(old, job)


def is_same_item_refusal(error: StoreError) -> bool:
    """True when DynamoDB refused the transaction for naming one item twice."""
    message = str((error.response or {}).get("Error", {}).get("Message", ""))
    return error.code == "ValidationException" and SAME_ITEM_MESSAGE in message


def item_size(values: Mapping[str, Any]) -> int:
    """Bytes of an item (or of a key, or of expression values) by DynamoDB's rules.

    Names and strings count their UTF-8 bytes, binaries their bytes, a number about one byte per
    two significant digits plus one, a list or map 3 bytes plus one per element and their contents.
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
    """
    return sum(len(name.encode()) + _value_size(value) for name, value in values.items())


def _value_size(value: Mapping[str, Any]) -> int:
    (kind, raw), *_ = value.items()
    if kind == "S":
        return len(str(raw).encode())
    if kind == "N":
        return _number_size(raw)
    if kind == "B":
        return len(raw)
    if kind in ("NULL", "BOOL"):
        return 1
    if kind == "SS":
        return sum(len(str(s).encode()) for s in raw)
    if kind == "NS":
        return sum(_number_size(n) for n in raw)
    if kind == "BS":
        return sum(len(b) for b in raw)
    if kind == "L":
        return 3 + sum(1 + _value_size(v) for v in raw)
    return 3 + sum(1 + len(k.encode()) + _value_size(v) for k, v in raw.items())  # M


def _number_size(raw: Any) -> int:
    digits = Decimal(str(raw)).normalize().as_tuple().digits
    return (len(digits) + 1) // 2 + 1


def attribute_value_error(where: str, values: Item) -> str | None:
    """Why ``values`` are not low-level AttributeValues (``{"S": "x"}``), or None when they are."""
    for name, value in values.items():
        if not (isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ATTRIBUTE_TYPES):
            return (
                f"{where}[{name!r}] is {value!r}, not an AttributeValue such as {{'S': ...}} or "
                "{'N': ...}: a transaction takes the boto3 client's low-level shapes, as "
                "transact_write_items does"
            )
    return None
