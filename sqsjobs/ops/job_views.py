"""A job as ``jobs get``, ``GET /jobs/{id}`` and the console show it: its record, JSON-ready.

The listings' rows are ``sqsjobs.ops.inspect``'s; a batch's and a chain's views are their own
(``batch_views``, ``chain_views``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.ops._common import iso
from sqsjobs.steps.records import in_order, steps_of
from sqsjobs.store import operator
from sqsjobs.store.codec import sealed_key
from sqsjobs.store.yielded import ORDER_YIELDED

if TYPE_CHECKING:
    from sqsjobs.job import Job, Progress

#: What a view shows for an encrypted job's payload and result (docs/encryption.md): that they are
#: encrypted, never the plaintext, even when the reader decrypted the result.
ENCRYPTED = "(encrypted)"


def job_to_dict(job: Job) -> dict[str, Any]:
    """Everything ``jobs get`` shows, JSON-ready; an encrypted job's payload and result as ``ENCRYPTED``."""
    error = job.last_error
    hidden = job.encrypted or sealed_key(job.payload) is not None
    return {
        "id": job.id,
        "type": job.type,
        "queue": job.queue,
        "status": job.status.value,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "run_at": iso(job.run_at),
        "created_at": iso(job.created_at),
        "updated_at": iso(job.updated_at),
        "started_at": iso(job.started_at),
        "finished_at": iso(job.finished_at),
        "lease_owner": job.lease_owner,
        "lease_epoch": job.lease_epoch,
        "lease_expires": iso(job.lease_expires),
        "cancel_requested": job.cancel_requested,
        "reason": job.reason,
        "progress": progress_to_dict(job.progress) if job.progress else None,
        "running_long": running_long_to_dict(job),
        "tags": dict(job.tags),
        # A serialized job that gave up its place in its key: when and why (``store/yielded.py``).
        "order_yielded": job.extra.get(ORDER_YIELDED, {}).get("S"),
        "chain": (
            {"id": job.chain.id, "step": job.chain.step, "steps": job.chain.steps} if job.chain else None
        ),
        "payload": ENCRYPTED if hidden and job.payload is not None else job.payload,
        "encrypted": hidden,
        "payload_version": job.payload_version,
        "payload_size": job.payload_size,
        "payload_ref": job.payload_ref,
        "result": ENCRYPTED if hidden and job.result is not None else job.result,
        "result_ref": job.result_ref,
        "steps": [
            {
                "name": step.name,
                "attempt": step.attempt,
                "started_at": iso(step.started_at),
                "duration_s": step.duration_s,
                "result": shown_step_result(step.name, step.result),
                "result_ref": step.ref,
            }
            for step in in_order(steps_of(job.extra))
        ],
        "last_error": (
            {"class": error.error_class, "message": error.message, "traceback": error.traceback}
            if error
            else None
        ),
        "history": [
            {
                "attempt": h.attempt,
                "outcome": h.outcome,
                "started_at": iso(h.started_at),
                "finished_at": iso(h.finished_at),
                "worker": h.worker,
                "error": h.error or None,
            }
            for h in job.history
        ],
        "audit": [
            {**entry, "at": iso(entry["at"]) if isinstance(entry.get("at"), float) else entry.get("at")}
            for entry in operator.audit_entries(job)
        ],
        "idempotency_key": job.idempotency_key,
        "tenant": job.tenant,
        "parent_id": job.parent_id,
        "root_id": job.root_id,
        "batch_id": job.batch.id if job.batch else None,
        "trace": job.trace,
    }


def running_long_to_dict(job: Job) -> dict[str, Any] | None:
    """The run's slow-run flag as ``jobs get`` and the API show it, or None: never flagged."""
    flag = job.running_long
    if flag is None:
        return None
    return {**flag.to_json(), "at": iso(flag.at), "times_p95": round(flag.times, 1)}


def progress_to_dict(progress: Progress) -> dict[str, Any]:
    """A progress report as ``jobs get`` and the API show it: ``at`` as an ISO instant."""
    shown = progress.to_json()
    if progress.at is not None:
        shown["at"] = iso(progress.at)
    return shown


def shown_step_result(name: str, result: Any) -> Any:
    """A step's result as a reader sees it: a wait token's answer key left out.

    The key is the credential of the token's answer URL (``Token.path``): whoever may read a job
    (a read-only API token, the console) must not be able to answer its tokens with it.
    """
    if name.startswith("token-") and isinstance(result, dict) and "key" in result:
        return {k: v for k, v in result.items() if k != "key"}
    return result
