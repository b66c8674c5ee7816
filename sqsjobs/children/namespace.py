"""``ctx.children``: a handler starts child jobs and awaits them without holding its slot (docs/children.md).

::

    @app.job("pages.render_all")
    def render_all(doc: Doc, ctx: JobContext) -> str:
        pages = ctx.step("split", split, doc.id)                       # once per job
        rendered = ctx.children.map("pages.render", [{"page": p} for p in pages])   # in order
        return ctx.step("stitch", stitch, rendered)

An await is a wait token, a batch and the steps' replay (``records`` draws what is kept where):

1. the run's next token (``ctx.create_token``'s step ``token-<t>``): the same one in every run;
2. the children's batch, whose dedupe key is the token's id and whose completion callback is the
   built-in ``sqsjobs.children`` type (``plugin.wake_spec``): its items are the children, each
   added with its index as dedupe key, in pages written at once; then the batch is sealed and the
   step ``children-<n>`` keeps its id — a replay after a crash before that step adds nothing twice;
3. ``wait_for_token``: the run ends like a sleep (no attempt used, no slot, held in the record);
   the batch's callback answers the token once, which wakes the job; the woken run replays to here;
4. each child's end, read once (100 to a BatchGetItem) and kept as the step ``children-<n>-results``.

Failure policy, per call: ``on_failure="raise"`` (the batch's ``max_item_failures=0``: the first
child that fails ends the batch at once, cancels the children not started and asks the running ones
to stop; the parent raises ``ChildrenFailed`` with each failed child's reason) or ``"return"`` (the
batch ends when every child has; the parent gets each ``ChildOutcome``).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from sqsjobs._aws import together
from sqsjobs.batches.completion import seal_flow
from sqsjobs.batches.namespace import add_flow, create_flow, env_of
from sqsjobs.children import records
from sqsjobs.errors import ChildrenFailed, ConfigurationError
from sqsjobs.producer import JobRequest
from sqsjobs.steps.book import run_steps
from sqsjobs.store import batched
from sqsjobs.store.codec import av_s
from sqsjobs.transport import objects

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from sqsjobs._aws import Flow
    from sqsjobs.context import JobContext
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.steps.book import StepBook
    from sqsjobs.steps.namespace import Token

#: ``"raise"``: every child must succeed (``ChildrenFailed``); ``"return"``: each child's outcome.
OnFailure = Literal["raise", "return"]
#: How long a parent waits for its children unless ``timeout=`` says (``TokenTimeout`` after).
DEFAULT_TIMEOUT = timedelta(days=7)
#: Children written at once: one page's adds are one round trip of latency (``_aws.together``).
PAGE = 25
#: Failed children named in a ``ChildrenFailed`` message (all of them are in ``failures``).
NAMED_FAILURES = 5


@dataclass(frozen=True)
class Child:
    """One child for ``ctx.children.all``: its type (a name, also an external type's, or a handler), payload, options.

    ``options`` are ``JobRequest``'s (``queue``, ``priority``, ``tenant``, ``delay``, ``tags``...);
    ``parent_id`` is the running job's, ``idempotency_key`` the await's own.
    """

    type: Any
    payload: Any = None
    options: dict[str, Any] = field(default_factory=dict)

    def request(self, parent_id: str) -> JobRequest[Any]:
        """The child's ``JobRequest``."""
        return JobRequest(self.type, self.payload, parent_id=parent_id, **self.options)


@dataclass(frozen=True)
class ChildOutcome:
    """How one child ended (``on_failure="return"``, and ``ChildrenFailed.failures``)."""

    id: str
    type: str | None
    #: ``succeeded``, ``dead``, ``cancelled`` or ``expired`` (or ``running``/``queued``: a child
    #: still asked to stop when the ``raise`` policy ended the wait early).
    status: str | None
    result: Any = None
    #: ``<error class>: <message>`` of a child that failed (its reason).
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True for a child that succeeded."""
        return self.status == "succeeded"

    @classmethod
    def of(cls, kept: dict[str, Any]) -> ChildOutcome:
        """From the kept form (``records.outcome_of``)."""
        return cls(kept["id"], kept.get("type"), kept.get("status"), kept.get("result"), kept.get("error"))


class ChildBook:
    """The worker's side of ``ctx.children`` (the children plug-in sets it on every ``JobContext``)."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    def calls(self, ctx: JobContext) -> ChildCalls:
        """The handler's ``ctx.children``."""
        return ChildCalls(self, ctx)

    def await_flow(
        self, ctx: JobContext, calls: Sequence[Child], on_failure: OnFailure, timeout_s: float
    ) -> Flow[list[ChildOutcome]]:
        """Start ``calls`` as children (once per job) and wait for them; each one's outcome, in order."""
        if on_failure not in ("raise", "return"):
            raise ConfigurationError(f"on_failure={on_failure!r}: 'raise' or 'return'")
        book: StepBook = ctx.steps
        state = run_steps(ctx)
        state.children += 1
        n = state.children
        if not calls:
            return []
        token = yield from book._create_token(ctx, timeout_s)
        name = records.STEP.format(n=n)
        done, kept = yield from book._begin(ctx, name)
        if not done:
            started = self._kernel.clock.now()
            kept = yield from self._start(ctx, token, calls, on_failure)
            kept = yield from book._end(ctx, name, started, kept)
        answer = yield from book._wait(ctx, token)  # no answer yet: ``Sleep`` ends the run here
        results = records.RESULTS_STEP.format(n=n)
        done, outcomes = yield from book._begin(ctx, results)
        if not done:
            started = self._kernel.clock.now()
            outcomes = yield from self._read(ctx, str(kept["batch"]), calls)
            outcomes = yield from book._end(ctx, results, started, outcomes)
        ends = [ChildOutcome.of(o) for o in outcomes]
        if on_failure == "raise" and (answer.get("failed") or any(not o.ok for o in ends)):
            raise _failed(ends, answer.get("reason"))
        return ends

    def _start(
        self, ctx: JobContext, token: Token, calls: Sequence[Child], on_failure: OnFailure
    ) -> Flow[dict[str, Any]]:
        """The batch (found again by its dedupe key), its children written a page at a time, then sealed."""
        k = self._kernel
        env, now = env_of(k), k.clock.now()
        batch = yield from create_flow(
            env,
            k.registry,
            on_complete=records.WAKE_TYPE,
            parent=None,
            final_stage=False,
            dedupe_key=records.batch_dedupe_key(token.id),
            max_item_failures=0 if on_failure == "raise" else None,
            shards=records.shards_for(len(calls)),
            now=now,
        )
        for start in range(0, len(calls), PAGE):
            page = calls[start : start + PAGE]
            adds = [
                add_flow(
                    env,
                    k.registry,
                    batch,
                    c.request(ctx.job_id),
                    dedupe_key=str(start + i),
                    now=k.clock.now(),
                )
                for i, c in enumerate(page)
            ]
            for outcome in (yield from together(*adds)):
                outcome.get()  # a refused child (a payload invalid for its type) fails the run: replayed
        yield from seal_flow(env, batch.id, k.clock.now())
        return {"batch": batch.id, "token": token.id.rpartition(".t")[2], "count": len(calls)}

    def _read(self, ctx: JobContext, batch_id: str, calls: Sequence[Child]) -> Flow[list[dict[str, Any]]]:
        """Each child's end, in call order (strongly consistent, 100 to a request; large results from S3)."""
        k = self._kernel
        ids = [
            records.child_id(batch_id, i, k.registry.name_of(c.type), c.options.get("tenant"))
            for i, c in enumerate(calls)
        ]
        items = yield from batched.get_items(
            k.settings.table_name,
            [{"id": av_s(i)} for i in ids],
            consistent=True,
            attributes=records.OUTCOME_FIELDS,
        )
        found = {item["id"]["S"]: records.outcome_of(item) for item in items}
        out = []
        for child in ids:
            outcome = found.get(child, {"id": child, "status": None, "error": "no record"})
            ref = outcome.pop("result_ref", None)
            if ref is not None:
                outcome["result"] = json.loads((yield from objects.get_flow(ref)))
            out.append(outcome)
        return out


def _failed(ends: Sequence[ChildOutcome], reason: str | None) -> ChildrenFailed:
    failures = [o for o in ends if not o.ok and o.status in records.FAILED]
    # The children that failed by themselves first: the ones cancelled were stopped by that failure.
    told = sorted(failures, key=lambda o: o.status == "cancelled")
    named = "; ".join(f"{o.id} ({o.type}) {o.status}: {o.error}" for o in told[:NAMED_FAILURES])
    more = f" and {len(failures) - NAMED_FAILURES} more" if len(failures) > NAMED_FAILURES else ""
    why = named + more if failures else (reason or "the children's batch failed")
    return ChildrenFailed(f"{len(failures)} of {len(ends)} children failed: {why}", failures)


class ChildCalls:
    """``ctx.children``: start children and await them; from an async handler, ``await`` each call.

    The calls of a run are told apart by their order (the n-th is ``children-<n>``), as sleeps are:
    a handler must make them in the same order, with the same children, in every run.
    """

    def __init__(self, book: ChildBook, ctx: JobContext) -> None:
        self._book = book
        self._ctx = ctx

    def run(
        self,
        job_type: Any,
        payload: Any = None,
        *,
        on_failure: OnFailure = "raise",
        timeout: timedelta | float | None = None,
        **options: Any,
    ) -> Any:
        """One child: its result (``"return"``: its ``ChildOutcome``)."""
        return self._call([Child(job_type, payload, options)], on_failure, timeout, one=True)

    def map(
        self,
        job_type: Any,
        payloads: Iterable[Any],
        *,
        on_failure: OnFailure = "raise",
        timeout: timedelta | float | None = None,
        **options: Any,
    ) -> Any:
        """One child of ``job_type`` per payload: the results in the payloads' order (``"return"``: outcomes)."""
        return self._call([Child(job_type, p, options) for p in payloads], on_failure, timeout)

    def all(
        self, *children: Child, on_failure: OnFailure = "raise", timeout: timedelta | float | None = None
    ) -> Any:
        """Several children of any types, awaited together: their results in the order given."""
        return self._call(list(children), on_failure, timeout)

    def _call(
        self,
        calls: list[Child],
        on_failure: OnFailure,
        timeout: timedelta | float | None,
        *,
        one: bool = False,
    ) -> Any:
        limit = timeout if timeout is not None else DEFAULT_TIMEOUT
        seconds = limit.total_seconds() if isinstance(limit, timedelta) else float(limit)
        flow = self._book.await_flow(self._ctx, calls, on_failure, seconds)
        kernel = self._book._kernel
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return _shaped(kernel.run(flow), on_failure, one)
        return _ashaped(kernel.arun(flow), on_failure, one)


def _shaped(ends: list[ChildOutcome], on_failure: OnFailure, one: bool) -> Any:
    values: list[Any] = list(ends) if on_failure == "return" else [o.result for o in ends]
    return values[0] if one else values


async def _ashaped(ends: Any, on_failure: OnFailure, one: bool) -> Any:
    return _shaped(await ends, on_failure, one)
