"""Sans-I/O requests of a bulk cancel: the Scan that finds the jobs, each job's cancel, and the checkpoint.

There is no status index, on purpose (docs/scale.md: it would cost every job write units on a hot
partition), so the jobs are found by a Scan with a filter: eventually consistent, read units only,
billed for every item read whatever the filter (``sqsjobs.ops.bulk_cancel`` has the arithmetic).

Each job is cancelled by the ``cancel`` transition of the state table (``store/operator.py``), the
very write ``jobs cancel ID`` makes, narrowed to what the operation matched (type, status, tenant,
re-checked by the condition, since the Scan's view may be stale) and extended with an audit entry
and ``cancel_op``: the operation's id. The Scan also returns the jobs an operation cancelled
itself, so a run resumed after a crash counts them once, from their records, without writing again.

The checkpoint is a control item ``op#<id>`` in the jobs table (ids with ``#`` are the table's own
items, never jobs): filters, the Scan's position after the last job handled, the counts so far,
and a sequence number every checkpoint is conditional on, so two processes cannot run one
operation at once. It has no ``type``, ``status`` or ``updated_at``, so listings and stats skip it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs.store.codec import av_n, av_s
from sqsjobs.store.conditions import All, IfNotExists, ListAppend, any_of, eq
from sqsjobs.store.operator import audit_av
from sqsjobs.store.operator import cancel as cancel_transition
from sqsjobs.store.write import Put, Write, expression_parts, new_id_only

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.store.conditions import Condition, Expr

OP_PREFIX = "op#"
#: Attributes a Scan page returns: what deciding about each job needs, nothing more.
SCANNED = ("id", "status", "type", "tenant", "cancel_op")


def op_key(op_id: str) -> dict[str, Any]:
    """The control item's key."""
    return {"id": av_s(OP_PREFIX + op_id)}


def scan_page(
    table: str,
    *,
    job_type: str,
    status: str,
    tenant: str | None,
    op_id: str,
    limit: int,
    start: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """One Scan request: ``limit`` items read from ``start`` on; the matching jobs and this op's own kept."""
    values: dict[str, Any] = {":type": av_s(job_type), ":status": av_s(status), ":op": av_s(op_id)}
    parts: list[Condition] = [eq("type", ":type"), any_of(eq("status", ":status"), eq("cancel_op", ":op"))]
    if tenant is not None:
        values[":tenant"] = av_s(tenant)
        parts.append(eq("tenant", ":tenant"))
    condition, names, used = expression_parts(All(tuple(parts)), values)
    names |= {f"#p{i}": a for i, a in enumerate(SCANNED)}
    params: dict[str, Any] = {
        "TableName": table,
        "Limit": limit,
        "FilterExpression": condition,
        "ProjectionExpression": ", ".join(f"#p{i}" for i in range(len(SCANNED))),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": used,
        "ConsistentRead": False,  # half the price; the cancel's condition reads the truth
    }
    if start:
        params["ExclusiveStartKey"] = dict(start)
    return params


def cancel_matching(
    table: str,
    job_id: str,
    *,
    job_type: str,
    status: str,
    tenant: str | None,
    op_id: str,
    audit: Mapping[str, Any],
    now: float,
    retention_s: float,
) -> Write:
    """The ``cancel`` transition of one job, only while it still matches, with the operation's audit entry."""
    write = cancel_transition(table, job_id, now=now, retention_s=retention_s)
    values: dict[str, Any] = {":b_type": av_s(job_type), ":b_status": av_s(status)}
    parts: list[Condition] = [eq("type", ":b_type"), eq("status", ":b_status")]
    if tenant is not None:
        values[":b_tenant"] = av_s(tenant)
        parts.append(eq("tenant", ":b_tenant"))
    audit_sets = (("cancel_op", ":b_op"), ("audit", ListAppend(IfNotExists("audit", ":b_none"), ":b_audit")))
    audit_values: dict[str, Any] = {
        ":b_op": av_s(op_id),
        ":b_audit": {"L": [audit_av(audit)]},
        ":b_none": {"L": []},
    }
    return write.guard("still_matches", All(tuple(parts)), values).also_set(audit_sets, audit_values)


def put_op(table: str, op_id: str, *, filters: Mapping[str, str], by: str, now: float) -> Put:
    """Create the control item of a new operation (refused if the id exists)."""
    item = {
        **op_key(op_id),
        "op_kind": av_s("bulk_cancel"),
        "op_filters": {"M": {k: av_s(v) for k, v in filters.items()}},
        "op_by": av_s(by),
        "op_created": av_n(now),
        "op_state": av_s("running"),
        "op_seq": av_n(0),
        "op_counts": {"M": {}},
    }
    return new_id_only(table, item, old_on_refusal=False)


def get_op(table: str, op_id: str) -> dict[str, Any]:
    """Read the control item, strongly consistent (the checkpoint a resume continues from)."""
    return {"TableName": table, "Key": op_key(op_id), "ConsistentRead": True}


def checkpoint(
    table: str,
    op_id: str,
    *,
    seq: int,
    position: Mapping[str, Any] | None,
    counts: Mapping[str, int],
    state: str,
    now: float,
) -> Write:
    """Record progress: the position after the last job handled, the counts, the state; ``seq`` + 1.

    Conditional on ``seq`` as this run last wrote it: another process running the same operation
    (a second ``--resume``) makes this refuse, and the run stops instead of double counting.
    """
    values: dict[str, Any] = {
        ":next": av_n(seq + 1),
        ":counts": {"M": {k: av_n(v) for k, v in counts.items()}},
        ":state": av_s(state),
        ":now": av_n(now),
    }
    sets: list[tuple[str, Expr]] = [
        ("op_seq", ":next"),
        ("op_counts", ":counts"),
        ("op_state", ":state"),
        ("op_updated", ":now"),
    ]
    if position:
        sets.append(("op_position", ":position"))
        values[":position"] = {"M": dict(position)}
    write = Write(table, op_key(op_id), tuple(sets), values=values, old_on_refusal=False)
    return write.guard("this_runs_sequence", eq("op_seq", ":seen"), {":seen": av_n(seq)})
