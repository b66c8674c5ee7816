"""What awaiting children keeps, and where: names, keys and readings over items other features write (sans-I/O).

Children own no item and no state-table row of their own. An await is made of parts that exist:

    the parent's record   step:token-<t>      the wait token the completion answers (steps)
                          step:children-<n>   {"batch": <id>, "token": <t>, "count": <children>}
                          step:children-<n>-results   each child's outcome, read once on the wake
                          tok:<t>             the answer: the batch's end (steps' token answer)
    batch#<id> ...        the children's batch: record, counter shards (batches)
    <child id>            each child: an ordinary job, ``batch_key`` and ``parent_id`` set

The batch's id and every child's id are derived from the parent's token id and the child's place in
the call, so a run replayed after a crash writes nothing twice: the batch is the same batch
(``dedupe_key``), each child the same item (its ``dedupe_key`` is its index).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sqsjobs.job import JobStatus
from sqsjobs.steps.records import ANSWER_PREFIX, PREFIX
from sqsjobs.store.codec import idempotent_job_id, str_attr

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The built-in job type a children's batch completes with: it answers the parent's token.
WAKE_TYPE = "sqsjobs.children"
#: The start of every children batch's dedupe key: what tells such a batch from a user's.
KEY_PREFIX = "sqsjobs.children\0"
#: The step an await keeps its batch in, and the step its outcomes are kept in.
STEP = "children-{n}"
RESULTS_STEP = "children-{n}-results"
#: What the wake reads of each child (BatchGetItem, 100 to a request).
OUTCOME_FIELDS = ("id", "type", "status", "result", "result_ref", "error", "reason")
#: Ends a child is counted failed by (the batch's ``failed`` counter).
FAILED = frozenset({JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.EXPIRED})
#: Children per counter shard, and the most shards: a shard's finishes meet in transactions (a
#: conflict is tried again), so a map's children spread over ``count / CHILDREN_PER_SHARD`` of them.
CHILDREN_PER_SHARD = 8
MAX_SHARDS = 64


def batch_dedupe_key(token_id: str) -> str:
    """The dedupe key of the batch a parent's await creates: its token's id names it."""
    return f"{KEY_PREFIX}{token_id}"


def token_of(dedupe_key: str | None) -> str | None:
    """The parent's token id a children batch answers; None for a batch that is not one."""
    if dedupe_key is None or not dedupe_key.startswith(KEY_PREFIX):
        return None
    return dedupe_key[len(KEY_PREFIX) :]


def shards_for(count: int) -> int:
    """Counter shards for ``count`` children (1 to ``MAX_SHARDS``)."""
    return min(MAX_SHARDS, max(1, -(-count // CHILDREN_PER_SHARD)))


def child_id(batch_id: str, index: int, job_type: str, tenant: str | None) -> str:
    """The id of the call's ``index``-th child: the id a batch gives an item whose dedupe key is its index."""
    return idempotent_job_id(job_type, f"{batch_id}\0{index}", tenant)


def outcome_of(item: Mapping[str, Any]) -> dict[str, Any]:
    """A child's end as kept on its parent: ``{"id", "type", "status", "result"|"result_ref", "error"}``."""
    out: dict[str, Any] = {
        "id": item["id"]["S"],
        "type": str_attr(item, "type"),
        "status": str_attr(item, "status"),
    }
    raw = str_attr(item, "result")
    if raw is not None:
        out["result"] = json.loads(raw)
    ref = str_attr(item, "result_ref")
    if ref is not None:
        out["result_ref"] = ref
    if "error" in item:
        m = item["error"]["M"]
        out["error"] = f"{m['class']['S']}: {m['message']['S']}"
    elif out["status"] in FAILED:
        out["error"] = str_attr(item, "reason") or out["status"]
    return out


def waiting_batches(item: Mapping[str, Any]) -> list[str]:
    """The children batches a parent's record waits on: a ``children-<n>`` step whose token is unanswered.

    Read by a cancel of the parent (``ops/cancel_job.py``), from the record its cancel returned.
    """
    found = []
    for key, av in item.items():
        if not key.startswith(PREFIX + "children-") or key.endswith("-results") or "M" not in av:
            continue
        raw = str_attr(av["M"], "r")
        kept = json.loads(raw) if raw is not None else None
        if isinstance(kept, dict) and f"{ANSWER_PREFIX}{kept.get('token')}" not in item:
            found.append(str(kept["batch"]))
    return sorted(found)
