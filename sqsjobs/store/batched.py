"""BatchGetItem and BatchWriteItem over any number of keys or items, sending again what DynamoDB left unprocessed.

DynamoDB may answer a batch request in part (a throttled partition, a response past 16 MB): what it
did not handle comes back as ``UnprocessedKeys`` or ``UnprocessedItems``. A reader that drops them
reads a present item as absent (a limit's slot as free, a chain step as gone), and a writer that
drops them loses items. AWS asks callers to send them again with exponential backoff
(https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html); these two
flows do, through tenacity (``_aws.retrying``), and raise ``StoreError`` once the retries are spent.
An AWS error of the request itself is not theirs to retry: botocore has already.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

import tenacity

from sqsjobs._aws import Call, Flow, retrying
from sqsjobs.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs.store.codec import Item

#: BatchGetItem takes at most 100 keys, BatchWriteItem 25 requests.
MAX_GET = 100
MAX_WRITE = 25
#: How many times what was left unprocessed is sent again (after 0.05 s, doubling: 1.55 s in all).
UNPROCESSED_RETRIES = 5


def _spent(state: tenacity.RetryCallState) -> NoReturn:
    left = state.outcome.result() if state.outcome else {}
    count = sum(len(v["Keys"]) if isinstance(v, dict) else len(v) for v in left.values())
    raise StoreError(
        f"DynamoDB left {count} keys or items unprocessed after {UNPROCESSED_RETRIES} retries",
        code="Unprocessed",
    )


#: The attempt's result is what is still unprocessed: try again while there is some.
_UNPROCESSED = tenacity.Retrying(
    stop=tenacity.stop_after_attempt(UNPROCESSED_RETRIES + 1),
    wait=tenacity.wait_exponential(multiplier=0.05),
    retry=tenacity.retry_if_result(bool),
    retry_error_callback=_spent,
)


def get_items(
    table: str, keys: Sequence[Item], *, consistent: bool = False, attributes: Sequence[str] = ()
) -> Flow[list[Item]]:
    """The items with these keys (absent ones are left out), ``MAX_GET`` keys to a request.

    ``attributes``: the only ones read (all when empty); ``consistent``: strongly consistent reads.
    """
    shape: dict[str, Any] = {"ConsistentRead": True} if consistent else {}
    if attributes:
        shape["ProjectionExpression"] = ", ".join(f"#a{n}" for n in range(len(attributes)))
        shape["ExpressionAttributeNames"] = {f"#a{n}": name for n, name in enumerate(attributes)}
    found: list[Item] = []
    for start in range(0, len(keys), MAX_GET):
        pending: dict[str, Any] = {table: {**shape, "Keys": list(keys[start : start + MAX_GET])}}

        def attempt() -> Flow[dict[str, Any]]:
            nonlocal pending
            response = yield Call("dynamodb", "batch_get_item", {"RequestItems": pending})
            found.extend(response.get("Responses", {}).get(table, []))
            pending = response.get("UnprocessedKeys") or {}
            return pending

        yield from retrying(attempt, _UNPROCESSED)
    return found


def put_items(table: str, items: Sequence[Item]) -> Flow[None]:
    """Put ``items``, ``MAX_WRITE`` to a request (unconditional: an item put twice is the same item)."""
    for start in range(0, len(items), MAX_WRITE):
        pending: dict[str, Any] = {
            table: [{"PutRequest": {"Item": dict(item)}} for item in items[start : start + MAX_WRITE]]
        }

        def attempt() -> Flow[dict[str, Any]]:
            nonlocal pending
            response = yield Call("dynamodb", "batch_write_item", {"RequestItems": pending})
            pending = response.get("UnprocessedItems") or {}
            return pending

        yield from retrying(attempt, _UNPROCESSED)
