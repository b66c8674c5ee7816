"""The HTTP API's operation ids are its clients' method names: they change only on purpose.

A client generated from the OpenAPI document (openapi-generator, openapi-typescript, Schemathesis'
reports) names each method after its ``operationId``; renaming one breaks every such client without
any change in behaviour. This pins them: a rename fails here, and the change that means it updates
the table (and says so in the README's changelog).
"""

from __future__ import annotations

from sqsjobs.api.http_app import create_app
from tests.cli import jobs_app

#: (method, path) -> operationId, as released.
PINNED = {
    ("POST", "/batches"): "create_batch",
    ("GET", "/batches/{batch_id}"): "get_batch",
    ("GET", "/batches/{batch_id}/events"): "batch_events",
    ("POST", "/batches/{batch_id}/cancel"): "cancel_batch",
    ("POST", "/batches/{batch_id}/items"): "add_batch_items",
    ("POST", "/batches/{batch_id}/seal"): "seal_batch",
    ("POST", "/chains"): "create_chain",
    ("GET", "/chains/{chain_id}"): "get_chain",
    ("GET", "/chains/{chain_id}/events"): "chain_events",
    ("POST", "/chains/{chain_id}/cancel"): "cancel_chain",
    ("GET", "/dead/groups"): "dead_groups",
    ("POST", "/dead/groups/retry"): "retry_dead_group",
    ("GET", "/dlq"): "list_dlq",
    ("POST", "/dlq/replay"): "replay_dlq",
    ("POST", "/jobs"): "enqueue",
    ("GET", "/jobs"): "list_jobs",
    ("POST", "/jobs/bulk-cancel"): "bulk_cancel_jobs",
    ("POST", "/jobs/priority"): "change_job_priority",
    ("GET", "/jobs/{job_id}"): "get_job",
    ("GET", "/jobs/{job_id}/events"): "job_events",
    ("GET", "/jobs/{job_id}/watch-token"): "watch_token",
    ("DELETE", "/jobs/{job_id}"): "cancel_job",
    ("POST", "/jobs/{job_id}/retry"): "retry_job",
    ("GET", "/limits"): "list_limits",
    ("POST", "/limits/{name}/breaker/close"): "close_breaker",
    ("POST", "/schedules"): "create_schedule",
    ("GET", "/schedules"): "list_schedules",
    ("GET", "/schedules/{name}"): "get_schedule",
    ("PATCH", "/schedules/{name}"): "update_schedule",
    ("DELETE", "/schedules/{name}"): "delete_schedule",
    ("POST", "/schedules/{name}/pause"): "pause_schedule",
    ("POST", "/schedules/{name}/resume"): "resume_schedule",
    ("GET", "/queues"): "queues",
    ("GET", "/series"): "job_series",
    ("POST", "/signals"): "send_signal",
    ("POST", "/tokens/{token_id}"): "answer_token",
    ("POST", "/tokens/{token_id}/answer"): "answer_token_by_url",
    ("GET", "/types"): "list_types",
    ("POST", "/leases"): "lease_jobs",
    ("POST", "/leases/heartbeat"): "heartbeat_lease",
    ("POST", "/leases/complete"): "complete_lease",
    ("POST", "/leases/fail"): "fail_lease",
    ("POST", "/types/{job_type}/pause"): "pause_type",
    ("POST", "/types/{job_type}/resume"): "resume_type",
    ("GET", "/workers"): "workers",
    ("POST", "/workers/{worker_id}/drain"): "drain_worker",
}


def operations() -> dict[tuple[str, str], str | None]:
    document = create_app(jobs_app.app).openapi()
    return {
        (method.upper(), path): operation.get("operationId")
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    }


def test_every_operation_keeps_its_pinned_id():
    assert operations() == PINNED


def test_operation_ids_are_unique_and_read_as_method_names():
    ids = [op for op in operations().values() if op]
    assert len(ids) == len(set(ids)) == len(PINNED)
    assert all(op.isidentifier() and op == op.lower() for op in ids)
