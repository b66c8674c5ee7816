"""A job a tagged job's handler enqueues inherits its tags, sync handler or async, one claim at a time or batched.

A real worker on MiniStack runs parents that enqueue a child each (the child's own tag wins over
the inherited one of the same name); the children's records carry the parents' tags, and the tag
search finds parents and children alike. An untagged parent's child has its own tags only.
"""

from __future__ import annotations

import uuid

import pytest

from sqsjobs import JobContext
from sqsjobs.ops import inspect as inspect_ops
from sqsjobs.testing import work_until


def _register(app, children: dict[str, str]) -> None:
    @app.job("tags.parent_sync")
    def parent_sync(payload: dict, ctx: JobContext) -> None:
        children[ctx.job.id] = app.enqueue("tags.child", {"of": ctx.job.id}, tags={"step": "child"})

    @app.job("tags.parent_async")
    async def parent_async(payload: dict, ctx: JobContext) -> None:
        children[ctx.job.id] = await app.aenqueue("tags.child", {"of": ctx.job.id})

    @app.job("tags.child")
    def child(payload: dict, ctx: JobContext) -> None:
        return None


@pytest.mark.parametrize("concurrency", [1, 8])
def test_children_inherit_their_parents_tags(ministack_url, make_app, concurrency):
    app = make_app(ministack_url)
    children: dict[str, str] = {}
    _register(app, children)
    app.provision()
    customer = uuid.uuid4().hex[:8]
    tagged = {"customer": customer, "step": "parent"}
    parents = [
        *app.enqueue_many([{"type": "tags.parent_sync", "payload": {}, "tags": tagged} for _ in range(4)]),
        *app.enqueue_many([{"type": "tags.parent_async", "payload": {}, "tags": tagged} for _ in range(4)]),
    ]
    plain = app.enqueue("tags.parent_sync", {})

    everyone = [*parents, plain]
    work_until(
        app,
        lambda: (
            all(p in children for p in everyone)
            and all(app.get(c).status.terminal for c in children.values())
        ),
        concurrency=concurrency,
        timeout_s=60,
    )

    for parent in parents:
        child = app.get(children[parent])
        own = {"step": "child"} if app.get(parent).type == "tags.parent_sync" else {}
        assert child.tags == {**tagged, **own}, parent
    assert app.get(children[plain]).tags == {"step": "child"}  # its own only: nothing to inherit
    # AND the tag search finds the parents and their children, and nothing else
    page = app.run(
        inspect_ops.list_flow(
            app.settings, inspect_ops.ListQuery(tag=f"customer={customer}", limit=100), app.clock.now()
        )
    )
    assert {r.id for r in page.rows} == {*parents, *(children[p] for p in parents)}
