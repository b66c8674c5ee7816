"""Batches and chains over HTTP: create, add items, seal, read the tree, cancel; create, read, cancel.

The same flows as ``app.batches.create``/``Batch.add``/``Batch.seal``/``app.batches.cancel`` and
``sqsjobs batches get`` (``ops.batch_views``), and ``app.chains.start``/``app.chains.get``/``app.chains.cancel`` and
``sqsjobs chains get`` (``ops.chain_views``): a Go or Node service reaches them without Python.

Costs: creating a batch is one transaction (record and counter shards); each item one
``TransactWriteItems`` (its record and its shard's count) and one hint, exactly as ``Batch.add``;
``GET /batches/{id}`` reads the record and its shards per node of the tree. ``POST .../items`` adds
up to ``MAX_ITEMS`` items one after another: a request that fails part-way has added the items
before the one named in the problem, so give each item a ``dedupe_key`` and send the same request
again (each key is counted once). Refusals: 404 ``batch-not-found`` / ``chain-not-found``, 409
``batch-sealed`` for an item added to a sealed, complete or cancelled batch, 422 for an unknown type
or a payload its handler refuses, or a queue that does not exist, found before anything is written
(``field`` names the item: ``sqsjobs.api.admission``). Every change is audited
(``sqsjobs.api.audit``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from sqsjobs.api import admission, responses
from sqsjobs.api.audit import audit
from sqsjobs.api.deps import AppDep, problems
from sqsjobs.api.models import (
    MAX_ID_LENGTH,
    QUEUE_PATTERN,
    BatchId,
    ChainId,
    NotifyTarget,
    TagName,
    TagValue,
    check_json,
    notify_json,
    tags_field,
)
from sqsjobs.api.problems import from_error
from sqsjobs.batches import namespace as batches_namespace
from sqsjobs.batches.completion import seal_flow
from sqsjobs.errors import SqsJobsError
from sqsjobs.ops import batch_views
from sqsjobs.ops.chain_views import chain_to_dict
from sqsjobs.ops.job_views import job_to_dict
from sqsjobs.producer import JobRequest

router = APIRouter(tags=["workflows"])

#: Items one ``POST /batches/{id}/items`` may add (more: several requests).
MAX_ITEMS = 100
#: Steps of a chain (``app.chains.start``'s own limit).
MAX_STEPS = 99

_FORBID = ConfigDict(extra="forbid")
#: What an item calls the job's fields the library's errors name.
_ITEM_FIELDS = {"idempotency_key": "dedupe_key"}


class JobSpec(BaseModel):
    """One job of a batch or a chain, as ``JobRequest`` takes it."""

    model_config = _FORBID

    type: str = Field(min_length=1, max_length=MAX_ID_LENGTH, description="A job type the App registers")
    payload: Any = Field(None, description="Validated against the job type's handler annotation")
    tenant: str | None = Field(None, min_length=1, max_length=256)
    queue: str | None = Field(None, pattern=QUEUE_PATTERN, description="Override the handler's logical queue")
    tags: dict[TagName, TagValue] = tags_field()

    @field_validator("payload")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        return check_json(value)

    def request(self) -> JobRequest[Any]:
        """The ``JobRequest`` the flows take."""
        return JobRequest(
            self.type, self.payload, tenant=self.tenant, queue=self.queue, tags=self.tags or None
        )


class BatchItem(JobSpec):
    """One item of ``POST /batches/{id}/items``."""

    dedupe_key: str | None = Field(
        None, min_length=1, max_length=512, description="The same key again is the same item, counted once"
    )


class BatchRequest(BaseModel):
    """``POST /batches``: ``app.batches.create``'s options."""

    model_config = _FORBID

    on_complete: str = Field(
        min_length=1, max_length=MAX_ID_LENGTH, description="The job type run once it completes"
    )
    parent: str | None = Field(
        None, min_length=1, max_length=MAX_ID_LENGTH, description="A batch that seals this one"
    )
    final_stage: StrictBool = Field(False, description="The callback gets the succeeded items' results")
    dedupe_key: str | None = Field(
        None, min_length=1, max_length=512, description="The same key, the same batch"
    )
    max_item_failures: int | None = Field(None, ge=0, description="More failed items complete it as failed")
    shards: int | None = Field(None, ge=1, le=64, description="Counter shards: the item throughput it takes")
    notify: NotifyTarget | None = Field(
        None, description="Where the batch's end is told, once, when its on_complete job ends"
    )
    tags: dict[TagName, TagValue] = tags_field()


class ItemsRequest(BaseModel):
    """``POST /batches/{id}/items``."""

    model_config = _FORBID

    items: list[BatchItem] = Field(min_length=1, max_length=MAX_ITEMS)


class ChainRequest(BaseModel):
    """``POST /chains``: steps run one after another, each reading the one before's result."""

    model_config = _FORBID

    steps: list[JobSpec] = Field(min_length=1, max_length=MAX_STEPS)
    dedupe_key: str | None = Field(
        None, min_length=1, max_length=512, description="The same key, the same chain"
    )
    notify: NotifyTarget | None = Field(
        None, description="Where the chain's end is told, once: its last step succeeded, or a step ended it"
    )
    tags: dict[TagName, TagValue] = tags_field()


async def _tree(app: Any, batch_id: str) -> dict[str, Any]:
    node = await app.arun(batch_views.tree_flow(batches_namespace.env_of(app.kernel), batch_id))
    return batch_views.node_to_dict(node)


@router.post(
    "/batches",
    response_model=responses.BatchBody,
    response_model_exclude_unset=True,
    status_code=201,
    responses=problems(400, 404, 409, 422),
    summary="Create a batch",
    operation_id="create_batch",
)
async def create_batch(body: BatchRequest, app: AppDep, request: Request) -> Any:
    """An open batch; add items, then seal it. Its ``on_complete`` job runs once when sealed and every item is done."""
    app.registry.get(body.on_complete)  # HandlerNotFound (422) before anything is written
    batch = await app.batches.acreate(
        body.on_complete,
        parent=body.parent,
        final_stage=body.final_stage,
        dedupe_key=body.dedupe_key,
        max_item_failures=body.max_item_failures,
        shards=body.shards,
        notify=notify_json(body.notify),
        tags=body.tags or None,
    )
    audit(app, request, "create_batch", batch_id=batch.id, on_complete=body.on_complete)
    return await _tree(app, batch.id)


@router.post(
    "/batches/{batch_id}/items",
    response_model=responses.BatchItemsAdded,
    response_model_exclude_unset=True,
    responses=problems(400, 404, 409, 413, 422),
    summary="Add items to an open batch",
    operation_id="add_batch_items",
)
async def add_items(batch_id: BatchId, body: ItemsRequest, app: AppDep, request: Request) -> Any:
    """Each item is a job counted in the batch (one transaction each); the answer lists their job ids in order."""
    # every item valid (type, payload, queue) before the first one is written
    items = [(f"items.{n}", item.request()) for n, item in enumerate(body.items)]
    refused = await admission.refusal(app, items, request.url.path, aliases=_ITEM_FIELDS)
    if refused is not None:
        return refused
    ids: list[str] = []
    for n, item in enumerate(body.items):
        flow = batches_namespace.add_to_batch_flow(
            app.kernel, batch_id, item.request(), dedupe_key=item.dedupe_key
        )
        try:
            ids.append(await app.arun(flow))
        except SqsJobsError as exc:
            # The items before this one were added: say so, and name this one.
            if ids:
                audit(app, request, "add_batch_items", batch_id=batch_id, added=len(ids))
            return from_error(exc, request.url.path, member=f"items.{n}", aliases=_ITEM_FIELDS)
    audit(app, request, "add_batch_items", batch_id=batch_id, added=len(ids))
    return {"batch_id": batch_id, "job_ids": ids}


@router.post(
    "/batches/{batch_id}/seal",
    response_model=responses.BatchBody,
    response_model_exclude_unset=True,
    responses=problems(404, 422),
    summary="Seal a batch",
    operation_id="seal_batch",
)
async def seal(batch_id: BatchId, app: AppDep, request: Request) -> Any:
    """No more items: it completes once every item is done (at once if none is pending). Sealing again changes nothing."""
    await app.arun(seal_flow(batches_namespace.env_of(app.kernel), batch_id, app.clock.now()))
    audit(app, request, "seal_batch", batch_id=batch_id)
    return await _tree(app, batch_id)


@router.get(
    "/batches/{batch_id}",
    response_model=responses.BatchBody,
    response_model_exclude_unset=True,
    responses=problems(404, 422),
    summary="A batch and its tree",
    operation_id="get_batch",
)
async def get_batch(batch_id: BatchId, app: AppDep) -> Any:
    """Its counts (pending, succeeded, failed), state (open, sealed, complete), callback, and its child batches below it."""
    return await _tree(app, batch_id)


@router.post(
    "/batches/{batch_id}/cancel",
    response_model=responses.BatchBody,
    response_model_exclude_unset=True,
    responses=problems(404, 422),
    summary="Cancel a batch",
    operation_id="cancel_batch",
)
async def cancel_batch(batch_id: BatchId, app: AppDep, request: Request) -> Any:
    """Complete it at once as failed, cancel its waiting items (running ones are asked to stop) and its sub-tree."""
    status = await app.batches.acancel(batch_id)
    audit(app, request, "cancel_batch", batch_id=batch_id)
    return batch_views.status_to_dict(status)


@router.post(
    "/chains",
    response_model=responses.ChainBody,
    response_model_exclude_unset=True,
    status_code=201,
    responses=problems(400, 409, 413, 422),
    summary="Create a chain",
    operation_id="create_chain",
)
async def create_chain(body: ChainRequest, app: AppDep, request: Request) -> Any:
    """Its steps run one after another; a step that dies stops it. Answers the chain as ``GET /chains/{id}`` does."""
    steps = [(f"steps.{n}", step.request()) for n, step in enumerate(body.steps)]
    refused = await admission.refusal(app, steps, request.url.path)
    if refused is not None:
        return refused
    chain_id = await app.chains.astart(
        [r for _, r in steps],
        dedupe_key=body.dedupe_key,
        notify=notify_json(body.notify),
        tags=body.tags or None,
    )
    audit(app, request, "create_chain", chain_id=chain_id, steps=len(body.steps))
    return chain_to_dict(await app.chains.aget(chain_id))


@router.get(
    "/chains/{chain_id}",
    response_model=responses.ChainBody,
    response_model_exclude_unset=True,
    responses=problems(404, 422),
    summary="A chain and its steps",
    operation_id="get_chain",
)
async def get_chain(
    chain_id: ChainId,
    app: AppDep,
    results: Annotated[
        bool,
        Query(
            description="Also each finished step's result or error (one GetItem per step, S3 if kept there)"
        ),
    ] = False,
) -> Any:
    """Its state (running, succeeded, stopped, cancelled) and each step's job id and status."""
    out = chain_to_dict(await app.chains.aget(chain_id))
    if results:
        for step in out["steps"]:
            if step["status"] in ("succeeded", "dead"):
                job = job_to_dict(await app.aget(step["job_id"]))
                step["result"], step["error"] = job["result"], job["last_error"]
    return out


@router.post(
    "/chains/{chain_id}/cancel",
    response_model=responses.CancelOutcome,
    response_model_exclude_unset=True,
    responses=problems(404, 422),
    summary="Cancel a chain",
    operation_id="cancel_chain",
)
async def cancel_chain(chain_id: ChainId, app: AppDep, request: Request) -> Any:
    """``cancelled``, ``requested`` (its step is running and stops at its next heartbeat), or the state it already ended in."""
    result = await app.chains.acancel(chain_id)
    audit(app, request, "cancel_chain", chain_id=chain_id, result=result)
    return {"id": chain_id, "result": result}
