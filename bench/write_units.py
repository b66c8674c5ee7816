"""Write units one job costs, by payload size and off the happy path, read from MiniStack's ConsumedCapacity.

Run: ``make .venv-ministack/bin/ministack && PYTHONPATH=. .venv/bin/python bench/write_units.py``.
Prints, per payload size, the table and index capacity units of enqueue, claim and complete; then,
for a 1 KB payload, what a retry, a dead job, a held far-future job and a lease renewal add.
"""

from __future__ import annotations

import os
import time
from typing import Any

from sqsjobs import App
from sqsjobs._aws import Call, one
from sqsjobs.job import FailureRecord
from sqsjobs.observability.metrics import consumed_units
from sqsjobs.producer import JobRequest, build_new_job
from sqsjobs.store import codec, enqueue, requests, runs, schema
from sqsjobs.store.write import Put, Write
from tests.emulators import MiniStack

OWNER = "ip-10-0-0-1-12345-abcdef"  # a realistic lease owner (host-pid-random)


def rendered(params: Any) -> dict[str, Any]:
    """A typed write as the request it sends alone (UpdateItem or PutItem); a request as it is."""
    if isinstance(params, Write):
        return params.update_item()
    if isinstance(params, Put):
        return params.put_item()
    return dict(params)


def units(response: dict[str, Any]) -> tuple[float, float]:
    """(table, all indexes) capacity units of one write."""
    parts = consumed_units(response["ConsumedCapacity"])
    return sum(u for p, u in parts if p == "table"), sum(u for p, u in parts if p != "table")


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

    def call(operation: str, params: Any) -> dict[str, Any]:
        return dict(
            app.run(
                one(Call("dynamodb", operation, {**rendered(params), "ReturnConsumedCapacity": "INDEXES"}))
            )
        )

    put = call("put_item", enqueue.put_job(table, job))
    claim = runs.claim(
        table,
        enqueue.envelope_of(job),
        owner=OWNER,
        token=codec.nonce(),
        message_id=MESSAGE_ID,
        now=now + 1,
        lease_s=60,
        max_attempts=app.registry.get("noop").max_attempts,
    )
    claimed = call("update_item", claim)
    record = codec.job_from_item(claimed["Attributes"])
    done = call(
        "update_item",
        runs.complete(table, record, owner=OWNER, now=now + 2, result=None, retention_s=86_400),
    )
    return {"enqueue": units(put), "claim": units(claimed), "complete": units(done)}


def measure_off_path(url: str, payload_bytes: int = 1024) -> dict[str, tuple[float, float]]:
    """Units of the writes off the happy path, each from the state the worker or sweeper meets it in."""
    app = App(f"wcuoff{payload_bytes}", endpoint_url=url)
    app.job("noop")(lambda payload, ctx: None)
    app.provision()
    table, now, payload = app.settings.table_name, time.time(), {"blob": "x" * payload_bytes}
    max_attempts = app.registry.get("noop").max_attempts
    error = FailureRecord("ValueError", "boom " * 20, "Traceback (most recent call last):\n" * 10)

    def call(operation: str, params: Any) -> dict[str, Any]:
        return dict(
            app.run(
                one(Call("dynamodb", operation, {**rendered(params), "ReturnConsumedCapacity": "INDEXES"}))
            )
        )

    def claimed(job_request: JobRequest[Any], *, held: bool = False) -> tuple[Any, dict[str, Any]]:
        job = build_new_job(job_request, registry=app.registry, settings=app.settings, now=now)
        put = call("put_item", enqueue.put_job(table, job))
        params = runs.claim(
            table,
            enqueue.envelope_of(job),
            owner=OWNER,
            token=codec.nonce(),
            message_id=MESSAGE_ID,
            now=job.run_at + 1,
            lease_s=60,
            max_attempts=max_attempts,
        )
        return codec.job_from_item(call("update_item", params)["Attributes"]).evolve(payload=payload), put

    out: dict[str, tuple[float, float]] = {}
    job, _ = claimed(JobRequest("noop", payload))
    out["schedule_retry (re-arms the message)"] = units(
        call(
            "update_item",
            runs.schedule_retry(
                table, job, owner=OWNER, now=now + 2, run_at=now + 60, error=error, held=False
            ),
        )
    )
    job, _ = claimed(JobRequest("noop", payload))
    out["fail → dead (payload kept, dead entry)"] = units(
        call(
            "update_item",
            runs.fail(
                table,
                job,
                owner=OWNER,
                now=now + 2,
                error=error,
                reason="permanent error",
                retention_s=86_400,
                payload=payload,
            ),
        )
    )
    job, _ = claimed(JobRequest("noop", payload))
    out["heartbeat (lease renewal)"] = units(
        call("update_item", requests.heartbeat(table, job, owner=OWNER, now=now + 30, lease_s=60))
    )
    far = JobRequest("noop", payload, delay=3600.0)
    new = build_new_job(far, registry=app.registry, settings=app.settings, now=now)
    out["enqueue held (payload, held entry)"] = units(call("put_item", enqueue.put_job(table, new)))
    [entry] = schema.due_records(
        call(
            "query", schema.query_due(table, schema.attention_key(schema.HELD, new.id), due_before=now + 7200)
        )
    )
    out["sweeper: held → pending"] = units(
        call("update_item", schema.mark_dispatched(table, entry, now=now + 3000, recheck_at=now + 3900))
    )
    params = runs.claim(
        table,
        enqueue.envelope_of(new),
        owner=OWNER,
        token=codec.nonce(),
        message_id=MESSAGE_ID,
        now=now + 3601,
        lease_s=60,
        max_attempts=max_attempts,
    )
    out["claim of a held job (removes its entry)"] = units(call("update_item", params))
    return out


def main() -> None:
    """Print the tables."""
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
        print("\noff the happy path, 1 KB payload | table+indexes")
        for what, (table_units, index_units) in measure_off_path(url).items():
            print(f"{what} | {table_units:g}+{index_units:g}")


if __name__ == "__main__":
    main()
