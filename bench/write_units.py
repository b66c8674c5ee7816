"""Write units one job costs, by payload size, read from MiniStack's size-based ConsumedCapacity.

Run: ``make .venv-ministack/bin/ministack && PYTHONPATH=. .venv/bin/python bench/write_units.py``.
Prints, per payload size, the table and per-index capacity units of enqueue, claim and complete.
"""

from __future__ import annotations

import os
import time
from typing import Any

from sqsjobs import App
from sqsjobs._aws import Call, one
from sqsjobs.producer import JobRequest, build_new_job
from sqsjobs.store import requests as rq
from tests.emulators import MiniStack

OWNER = "ip-10-0-0-1-12345-abcdef"  # a realistic lease owner (host-pid-random)


def units(response: dict[str, Any]) -> tuple[float, float]:
    """(table, all indexes) capacity units of one write."""
    consumed = response["ConsumedCapacity"]
    table = float(consumed.get("Table", {}).get("CapacityUnits", 0))
    indexes = sum(float(i["CapacityUnits"]) for i in consumed.get("GlobalSecondaryIndexes", {}).values())
    return table, indexes


#: A typical SQS message id (a UUID), as the claim records it.
MESSAGE_ID = "0f5c6b1e-6d1a-4b1e-9c5e-2a7d9d3f8e41"


def measure(url: str, payload_bytes: int) -> dict[str, tuple[float, float]]:
    """Units of enqueue, claim and complete for one job with a payload of ``payload_bytes``."""
    app = App(f"wcu{payload_bytes}", endpoint_url=url)
    app.job("noop")(lambda payload, ctx: None)
    app.provision()
    table, now = app.settings.table_name, time.time()
    job = build_new_job(
        JobRequest("noop", {"blob": "x" * payload_bytes}),
        registry=app.registry,
        settings=app.settings,
        now=now,
    )

    def call(operation: str, params: dict[str, Any]) -> dict[str, Any]:
        return dict(
            app.run(one(Call("dynamodb", operation, {**params, "ReturnConsumedCapacity": "INDEXES"})))
        )

    put = call("put_item", rq.put_job(table, job))
    claim = rq.claim(table, rq.envelope_of(job), owner=OWNER, token=rq.nonce(), message_id=MESSAGE_ID, now=now + 1, lease_s=60,
        max_attempts=app.registry.get("noop").max_attempts,
    )  # fmt: skip
    claimed = call("update_item", claim)
    record = rq.job_from_item(claimed["Attributes"])
    done = call(
        "update_item", rq.complete(table, record, owner=OWNER, now=now + 2, result=None, retention_s=86_400)
    )
    return {"enqueue": units(put), "claim": units(claimed), "complete": units(done)}


def main() -> None:
    """Print the table."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with MiniStack() as server:
        url = server.endpoint_url
        print("payload bytes | enqueue (table+indexes) | claim | complete | total WCU per job")
        for size in (0, 200, 1024, 4096):
            m = measure(url, size)
            total = sum(t + i for t, i in m.values())
            cells = " | ".join(f"{t:g}+{i:g}" for t, i in m.values())
            print(f"{size} | {cells} | {total:g}")


if __name__ == "__main__":
    main()
