"""Operator views of batches: one batch with its sub-tree, and the newest batches (``sqsjobs batches``).

Read-only: each batch costs one consistent read of its record and one BatchGetItem of its counter
shards (none once complete: the counts are frozen in the record).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs.batches.namespace import status_flow
from sqsjobs.ops._common import iso

if TYPE_CHECKING:
    from sqsjobs._aws import Flow
    from sqsjobs.batches.completion import BatchEnv
    from sqsjobs.batches.namespace import BatchStatus

__all__ = ["BatchNode", "node_to_dict", "status_to_dict", "tree_flow"]


@dataclass
class BatchNode:
    """A batch and its child batches, depth first."""

    status: BatchStatus
    children: list[BatchNode] = field(default_factory=list)


def tree_flow(env: BatchEnv, batch_id: str) -> Flow[BatchNode]:
    """The batch and every batch below it (``BatchNotFound`` when it does not exist)."""
    status = yield from status_flow(env, batch_id)
    node = BatchNode(status)
    for child in status.children:
        node.children.append((yield from tree_flow(env, child)))
    return node


def status_to_dict(st: BatchStatus) -> dict[str, Any]:
    """Everything ``batches get``/``list`` show of one batch, JSON-ready."""
    return {
        "id": st.id,
        "status": st.status,
        "counts": st.counts,
        "failed": st.failed,
        "reason": st.reason,
        "on_complete": st.on_complete,
        "callback_id": st.callback_id,
        "final_stage": st.final_stage,
        "parent_id": st.parent_id,
        "root_id": st.root_id,
        "children": list(st.children),
        "children_complete": st.children_complete,
        "max_item_failures": st.max_item_failures,
        "shards": st.shards,
        "dedupe_key": st.dedupe_key,
        "created_at": iso(st.created_at),
        "sealed_at": iso(st.sealed_at),
        "drained_at": iso(st.drained_at),
        "completed_at": iso(st.completed_at),
    }


def node_to_dict(node: BatchNode) -> dict[str, Any]:
    """A tree as nested dicts: each batch's fields and its ``tree`` of children."""
    return {**status_to_dict(node.status), "tree": [node_to_dict(c) for c in node.children]}
