"""The dashboard's workflow pages: a batch drawn as its tree, a chain as its steps; cancel from either.

``/ui/batches/{id}`` is ``sqsjobs batches get``'s tree (``ops.batch_views.tree_flow``: the record and
its counter shards per node) as nested lists, each node with its state (open, sealed, complete,
failed), its counts (succeeded, failed, pending), how many of its children are complete and its
callback (type, and its job once it ran). ``/ui/chains/{id}`` is ``sqsjobs chains get`` with each
finished step's result or error (one GetItem per finished step). Both refresh themselves; their
cancel buttons are ``app.batches.cancel`` and ``app.chains.cancel``, POSTs refused from another site
like every POST of the dashboard, each audited (``sqsjobs.api.audit``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from sqsjobs.api import dashboard_views
from sqsjobs.api.audit import audit
from sqsjobs.api.dashboard_views import Html, h, job_link, join
from sqsjobs.api.models import BatchId, ChainId  # noqa: TC001 (FastAPI reads the annotations at runtime)
from sqsjobs.batches.namespace import env_of
from sqsjobs.errors import BatchNotFound, ChainNotFound
from sqsjobs.ops import batch_views
from sqsjobs.ops.chain_views import chain_to_dict
from sqsjobs.ops.job_views import job_to_dict

T = TypeVar("T")

if TYPE_CHECKING:
    from collections.abc import Awaitable, Mapping

    from sqsjobs.app import App

#: The longest result or error shown in a step's row (the job's page has all of it).
SHOWN_CHARS = 300


def _node(node: batch_views.BatchNode) -> Html:
    st = node.status
    state = "failed" if st.failed else st.status
    counts = join(
        Html(f'<span class="count {k}" data-count="{k}">{h(k)} <b>{h(st.counts.get(k, 0))}</b></span> ')
        for k in ("succeeded", "failed", "pending")
    )
    children = f" · children {st.children_complete}/{len(st.children)} complete" if st.children else ""
    callback = Html(f" · callback {h(st.on_complete)}") + (
        Html(" ") + job_link(st.callback_id) if st.callback_id else Html(" (not run yet)")
    )
    reason = Html(f' <span class="reason">{h(st.reason)}</span>') if st.reason else Html("")
    below = (
        Html("<ul>" + join(Html(f"<li>{_node(c)}</li>") for c in node.children) + "</ul>")
        if node.children
        else Html("")
    )
    return Html(
        f'<div class="node" data-batch="{h(st.id)}"><a class="job" href="/ui/batches/{h(quote(st.id, safe=""))}">'
        f'{h(st.id)}</a> <span class="status {h(state)}">{h(state)}</span> {counts}{h(children)}{callback}{reason}'
        f"</div>{below}"
    )


def _cancel_form(action: str, label: str, ident: str) -> Html:
    return Html(
        f'<form method="post" action="{h(action)}" class="inline">'
        f'<button type="submit" id="{h(ident)}">{h(label)}</button></form>'
    )


def batch_body(node: batch_views.BatchNode) -> Html:
    """The tree below (and including) one batch, with a cancel button while it is not complete."""
    st = node.status
    cancel = (
        _cancel_form(f"/ui/batches/{quote(st.id, safe='')}/cancel", "cancel batch", "cancel-batch")
        if not st.complete
        else Html("")
    )
    up = (
        Html(f' <a href="/ui/batches/{h(quote(st.parent_id, safe=""))}">parent {h(st.parent_id)}</a>')
        if st.parent_id
        else Html("")
    )
    return dashboard_views.section(
        f"Batch {st.id}",
        Html(f'<ul class="tree"><li>{_node(node)}</li></ul><p>{cancel}{up}</p>'),
        note="The batch record and its counter shards, per node of the tree (sqsjobs batches get).",
        anchor="batch",
    )


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def chain_body(data: dict[str, Any]) -> Html:
    """A chain's steps in order, each with its job, status, and result or error once finished."""
    rows = []
    for s in data["steps"]:
        error = s.get("error")
        outcome = (
            f"{error['class']}: {error['message']}"
            if error
            else ""
            if s.get("result") is None
            else _short(s["result"])
        )
        rows.append(
            [
                s["index"],
                s["type"],
                job_link(s["job_id"]),
                dashboard_views.status_badge(s["status"] or "gone"),
                Html(f'<span class="error result">{h(outcome)}</span>'),
            ]
        )
    cancel = (
        _cancel_form(f"/ui/chains/{quote(data['id'], safe='')}/cancel", "cancel chain", "cancel-chain")
        if data["status"] == "running" and not data["cancel_requested"]
        else Html("")
    )
    state = data["status"] + (" (cancel requested)" if data["cancel_requested"] else "")
    reason = f" at step {data['stopped_at']}: {data['reason']}" if data["stopped_at"] is not None else ""
    return dashboard_views.section(
        f"Chain {data['id']}",
        Html(
            f'<p>status <span class="status chain {h(data["status"])}">{h(state)}</span>{h(reason)}</p>'
            + dashboard_views.table(["step", "type", "job", "status", "result or error"], rows, cls="steps")
            + cancel
        ),
        note="The chain record and one BatchGetItem of its steps; a result is read per finished step.",
        anchor="chain",
    )


def workflow_router(app: App, *, refresh_s: float, headers: Mapping[str, str]) -> APIRouter:
    """``/ui/batches/{id}``, ``/ui/chains/{id}`` and their cancel POSTs.

    ``headers`` are the dashboard's security headers (cross-origin POSTs never reach here: ``sqsjobs.api.security``).
    """
    router = APIRouter(include_in_schema=False)
    secure = dict(headers)

    def missing(what: str, ident: str) -> HTMLResponse:
        body = dashboard_views.section(f"No such {what}", Html(f"<p>No {h(what)} {h(ident)!s}.</p>"))
        return HTMLResponse(dashboard_views.page(f"{what} not found", body), status_code=404, headers=secure)

    async def batch_or_404(batch_id: str, work: Awaitable[T]) -> T | HTMLResponse:
        """What ``work`` (a read or change of batch ``batch_id``) returns, or the 404 page when there is no such batch."""
        try:
            return await work
        except BatchNotFound:
            return missing("batch", batch_id)

    async def chain_or_404(chain_id: str, work: Awaitable[T]) -> T | HTMLResponse:
        """What ``work`` (a read or change of chain ``chain_id``) returns, or the 404 page when there is no such chain."""
        try:
            return await work
        except ChainNotFound:
            return missing("chain", chain_id)

    @router.get("/ui/batches/{batch_id}", response_class=HTMLResponse)
    async def batch_page(batch_id: BatchId) -> HTMLResponse:
        node = await batch_or_404(batch_id, app.arun(batch_views.tree_flow(env_of(app.kernel), batch_id)))
        if isinstance(node, HTMLResponse):
            return node
        return HTMLResponse(
            dashboard_views.page(f"batch {batch_id}", batch_body(node), refresh_s=refresh_s), headers=secure
        )

    @router.post("/ui/batches/{batch_id}/cancel")
    async def cancel_batch(batch_id: BatchId, request: Request) -> Response:
        if isinstance(done := await batch_or_404(batch_id, app.batches.acancel(batch_id)), HTMLResponse):
            return done
        audit(app, request, "cancel_batch", batch_id=batch_id)
        return RedirectResponse(f"/ui/batches/{quote(batch_id, safe='')}", status_code=303, headers=secure)

    @router.get("/ui/chains/{chain_id}", response_class=HTMLResponse)
    async def chain_page(chain_id: ChainId) -> HTMLResponse:
        status = await chain_or_404(chain_id, app.chains.aget(chain_id))
        if isinstance(status, HTMLResponse):
            return status
        data = chain_to_dict(status)
        for step in data["steps"]:
            if step["status"] in ("succeeded", "dead"):
                job = job_to_dict(await app.aget(step["job_id"]))
                step["result"], step["error"] = job["result"], job["last_error"]
        return HTMLResponse(
            dashboard_views.page(f"chain {chain_id}", chain_body(data), refresh_s=refresh_s), headers=secure
        )

    @router.post("/ui/chains/{chain_id}/cancel")
    async def cancel_chain(chain_id: ChainId, request: Request) -> Response:
        result = await chain_or_404(chain_id, app.chains.acancel(chain_id))
        if isinstance(result, HTMLResponse):
            return result
        audit(app, request, "cancel_chain", chain_id=chain_id, result=result)
        return RedirectResponse(f"/ui/chains/{quote(chain_id, safe='')}", status_code=303, headers=secure)

    return router
