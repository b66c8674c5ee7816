"""Metering: the AWS calls the drivers make, and the capacity DynamoDB says each one consumed.

Apart from the drivers (``sqsjobs._aws``, which see it as a ``CallMeter``) because the counts are read by cost tests, benchmarks
and the worker registry, not by the I/O seam itself, which only ``add``s to them.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

#: DynamoDB operations that report consumed capacity, and which of them read.
#: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_ConsumedCapacity.html
CAPACITY_OPERATIONS = frozenset(
    {
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "GetItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactWriteItems",
        "TransactGetItems",
        "ExecuteStatement",
        "BatchExecuteStatement",
    }
)
READ_OPERATIONS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})


def consumed_units(consumed: Any) -> list[tuple[str, float]]:
    """``("table", units)`` and ``("index:<name>", units)`` of a ``ConsumedCapacity`` answer (a list for batch calls).

    ``INDEXES`` asks for the table's share apart; an answer with the total only (MiniStack's
    ``BatchExecuteStatement``) is the table's, less any index it names.
    """
    parts: list[tuple[str, float]] = []
    for entry in consumed if isinstance(consumed, list) else [consumed]:
        indexes = [
            (f"index:{name}", float(used.get("CapacityUnits", 0)))
            for group in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes")
            for name, used in entry.get(group, {}).items()
        ]
        table = entry.get("Table", {}).get("CapacityUnits")
        total = float(entry.get("CapacityUnits", 0))
        parts += [
            ("table", float(table) if table is not None else total - sum(u for _, u in indexes)),
            *indexes,
        ]
    return parts


class RequestCounter:
    """Counts API calls by (service, operation), as the drivers hand them to the SDK.

    ``run_sync``/``run_async`` count each call they make (``add``), not a botocore event hook: a
    handler on ``before-call.*.*`` ran inside every request, on top of the SDK's own dozen, for
    what the driver knows anyway. The count is the same: one per API call, whatever botocore
    retries inside it.

    With ``Settings.measure_capacity`` it also adds up the capacity DynamoDB says each call consumed:
    ``capacity[("write", "table")]``, ``capacity[("write", "index:attention")]``, ``("read", ...)``.
    """

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.capacity: dict[tuple[str, str], float] = defaultdict(float)
        self._lock = threading.Lock()

    def add(self, service: str, operation: str) -> None:
        """Record one call of ``operation`` (its API name, e.g. ``UpdateItem``) on ``service``."""
        with self._lock:
            self.counts[(service, operation)] += 1

    def ask_capacity(self, params: dict[str, Any], model: Any, **kwargs: Any) -> None:
        """``before-parameter-build.dynamodb``: request ``ReturnConsumedCapacity=INDEXES``."""
        if model.name in CAPACITY_OPERATIONS:
            params.setdefault("ReturnConsumedCapacity", "INDEXES")

    def add_capacity(self, parsed: Mapping[str, Any], model: Any, **kwargs: Any) -> None:
        """``after-call.dynamodb``: add what the answer says it consumed (a list for batch calls)."""
        consumed = parsed.get("ConsumedCapacity")
        if not consumed:
            return
        kind = "read" if model.name in READ_OPERATIONS else "write"
        with self._lock:
            for part, units in consumed_units(consumed):
                self.capacity[(kind, part)] += units

    def units(self, kind: str = "write", part: str | None = None) -> float:
        """Capacity units consumed of ``kind`` (``write``/``read``) by ``part`` (``table``, ``index:<name>``, None: all)."""
        return sum(v for (k, p), v in self.capacity.items() if k == kind and (part is None or p == part))

    def watch(self, client: Any) -> None:
        """Hook the capacity meter into a DynamoDB client's events (``Settings.measure_capacity``)."""
        client.meta.events.register("before-parameter-build.dynamodb.*", self.ask_capacity)
        client.meta.events.register("after-call.dynamodb.*", self.add_capacity)

    def total(self, service: str | None = None) -> int:
        """Calls made, optionally for one service."""
        return sum(n for (s, _), n in self.counts.items() if service is None or s == service)

    def snapshot(self) -> dict[str, int]:
        """``{"dynamodb.UpdateItem": n, ...}``."""
        return {f"{s}.{o}": n for (s, o), n in sorted(self.counts.items())}

    def reset(self) -> None:
        """Forget all counts."""
        with self._lock:
            self.counts.clear()
            self.capacity.clear()
