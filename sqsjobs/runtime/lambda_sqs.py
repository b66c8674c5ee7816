"""Lambda SQS batch → the shared execution core → a validated partial batch response.

The same App and handlers run here as in the ECS worker: each record becomes a ``Delivery`` and goes
through ``Execution.handle`` (claim → run → record), and the ``Ack`` it returns is applied the way an
SQS event source mapping (ESM) needs it. The ESM deletes every record the response does not list,
so the response names exactly those whose message must stay::

    Ack            before returning                          reported
    delete         -                                         success (the ESM deletes it)
    rearm          ChangeMessageVisibility(delay)            failure (comes back when the retry is due)
    resend         SendMessage: a fresh copy, delayed        success (the message was too old, or gone)
    dead_letter    SendMessage to the DLQ, with the reason   success (the ESM deletes the original)
    release        ChangeMessageVisibility(0)                failure
    leave          -                                         failure (back after the visibility timeout)
    not started    ChangeMessageVisibility(0)                failure (deadline guard; no attempt used)

Delivery is at least once here too. The ESM may hand one message to two invocations, or a message
whose job already finished; ownership comes only from the conditional claim, exactly as in the
worker, and a job that outlives half its lease has the lease renewed during the invocation, its
message kept hidden with it (``_extend_running``). The lease (``Settings.lease_s``), not the
function timeout, is what keeps a job from running twice. A running job whose message is gone
(deleted by hand, purged: the extension is refused as an invalid receipt) gets its witness in its
record and a fresh copy for its retry, through the host the ECS worker shares
(``DeliveryHost.messages_gone``).

Deadlines (no silent trap). A job type without an explicit timeout runs with the
time the invocation has left, less ``DEADLINE_MARGIN_S`` to record the outcome and ack, as its
deadline: past it, the run is a ``JobTimeout`` failure, retried by the type's policy like any other.
A type with an explicit timeout is started only if that timeout plus the margin fits in the time
left (the deadline guard)::

    invocation start                                               Lambda deadline
    │ record A: timeout_s + margin fits → run ──────────┤             │
    │ record C: no explicit timeout → run, deadline = Lambda deadline - margin ──┤
    │            record B waits for a slot ─ its timeout_s + margin no longer fits ─▶ not started:
    │            no claim (the attempt is not used), visibility 0, reported as failure, WARNING

A type whose explicit timeout plus the margin exceeds a whole invocation can never run here: each
invocation that sees its queue logs it at ERROR with both numbers, and ``sqsjobs doctor`` and
``infra/`` refuse it before deployment (``sqsjobs.deploy.rules.check_lambda_timeout``).

AWS fails the whole batch when a ``batchItemFailures`` entry is empty or names no record of the
batch; MiniStack instead deletes the whole batch as if it succeeded. Either way a wrong id loses or
loops messages, so the response is built only from the batch's message ids and checked before it
is returned (``batch_response``).
"""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sqsjobs import envelope as envelope_format
from sqsjobs._aws import Call, one
from sqsjobs.errors import (
    AwsError,
    ConfigurationError,
    EnvelopeError,
    HandlerNotFound,
)
from sqsjobs.registry import DEFAULT_TIMEOUT_S
from sqsjobs.runtime.batching import Collectors, under
from sqsjobs.runtime.execution import DeliveryHost, apply
from sqsjobs.runtime.kernel import kernel_from_path, kernel_of
from sqsjobs.runtime.lambda_event import BatchResponse, SqsRecord, batch_response, parse_event, to_delivery
from sqsjobs.runtime.worker import make_worker_id
from sqsjobs.transport import routes, sqs
from sqsjobs.transport.queues import dlq_key

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.delivery import Ack, Delivery
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.runtime.kernel import Kernel, SupportsKernel

#: Seconds kept back from the deadline to record an outcome, ack the message and flush metrics.
DEADLINE_MARGIN_S = 2.0
#: A job type without an explicit timeout starts only with at least this long to run after the
#: margin: less would spend an attempt on a certain timeout.
MIN_RUN_S = 1.0
#: FIFO queue names end with this; their records run one at a time, in order.
FIFO_SUFFIX = ".fifo"


class LambdaContext(Protocol):
    """The part of the Lambda context object this module reads."""

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds until the function times out."""
        ...


# ── the runtime ──────────────────────────────────────────────────────────────────────────────
@dataclass
class _Result:
    """What became of one record."""

    ok: bool
    #: Set the message's visibility to this before replying (None: leave it).
    visibility_s: int | None = None


def lambda_log_fields(context: Any, *, cold_start: bool) -> dict[str, Any]:
    """The fields Powertools' ``inject_lambda_context`` adds to each line, read from the invocation's context.

    Not the decorator itself: the adapter is an object called per invocation, and its logger is the
    App's, shared with the jobs' own lines. Fields the context lacks are left out.
    """
    fields: dict[str, Any] = {"cold_start": cold_start}
    for key, attribute in (
        ("function_name", "function_name"),
        ("function_memory_size", "memory_limit_in_mb"),
        ("function_arn", "invoked_function_arn"),
        ("function_request_id", "aws_request_id"),
    ):
        value = getattr(context, attribute, None)
        if value is not None:
            fields[key] = value
    return fields


class LambdaWorker:
    """Runs SQS batches for one App; create it once per container (cold start) and call it per invocation."""

    def __init__(
        self,
        app: Kernel | SupportsKernel,
        *,
        margin_s: float = DEADLINE_MARGIN_S,
        worker_id: str | None = None,
    ) -> None:
        """``app``: the App (or its kernel) whose jobs this function runs."""
        self.kernel = kernel = kernel_of(app)
        self.margin_s = margin_s
        self.worker_id = worker_id or f"lambda-{make_worker_id()}"
        self._pool = ThreadPoolExecutor(
            max_workers=kernel.settings.concurrency, thread_name_prefix="sqsjobs-handler"
        )
        #: The current invocation's time (one invocation at a time per container).
        self._budget: _Budget | None = None
        #: A batch type's records wait for each other until none of the invocation's is on its way.
        self._batches = Collectors(kernel, pool=self._pool, until_idle=True)
        self._host = DeliveryHost(
            kernel,
            self.worker_id,
            pool=self._pool,
            default_timeout_s=self._time_left_to_run,
            what="record",
            batches=self._batches,
            # A finish leaves at once: the invocation (billed by its duration) ends only after its
            # last finish, and its records' finishes come together when their handlers do anyway.
            finish_linger_s=0.0,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        #: This invocation's records reported as a success, by receipt handle: their messages wait for
        #: the ESM's delete, which comes only once the whole invocation returns (``_extend_running``).
        self._done: dict[str, Delivery] = {}
        #: Receipts of the current invocation's messages that SQS no longer honours.
        self._gone: set[str] = set()
        #: Invocations handled by this container, for logs and tests.
        self.invocations = 0

    def __call__(self, event: Mapping[str, Any], context: LambdaContext | None = None) -> BatchResponse:
        """The Lambda handler: sync, as the Python runtime calls it."""
        # Lambda calls a sync function and the execution core is async, so this owns an
        # event loop. One loop for the container's life rather than asyncio.run per invocation: the
        # aiobotocore clients belong to the loop that opened them, and keeping it keeps their
        # connections warm across invocations (asyncio.run would close it under the cached clients).
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self.handle_event(event, context))

    def close(self) -> None:
        """Close the clients, the loop and the thread pool (tests; Lambda just freezes the process)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.run_until_complete(self.kernel.aclose())
            self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def handle_event(self, event: Mapping[str, Any], context: LambdaContext | None) -> BatchResponse:
        """Run one batch and return the records to keep; metrics are flushed before returning."""
        self.invocations += 1
        records = parse_event(event)
        if context is not None:  # every log line of this invocation names it
            self.kernel.logger.append_keys(**lambda_log_fields(context, cold_start=self.invocations == 1))
        tracer = self.kernel.tracer
        if tracer is None:
            return await self._handle(records, context)
        from sqsjobs.observability.tracing import delivered_trace

        traces = [(r.message_id, delivered_trace(r.message_attributes, r.attributes)) for r in records]
        with tracer.invocation(context, traces, cold_start=self.invocations == 1):
            return await self._handle(records, context)

    async def _handle(self, records: list[SqsRecord], context: LambdaContext | None) -> BatchResponse:
        # Jobs that outlive half their lease have it renewed, and their message kept hidden, as the
        # ECS worker's heartbeat does: a beat every third of the shorter of the two, so neither the
        # lease nor the message's visibility timeout runs out between beats.
        settings = self.kernel.settings
        beat_s = max(min(settings.lease_s, settings.visibility_timeout_s) / 3.0, 0.2)
        self._done = {}
        self._gone = set()
        keeper = asyncio.create_task(self._host.keep_leases(beat_s, extend=self._extend_running))
        try:
            results = await self._run_batch(records, context)
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            self.kernel.metrics.flush()
        failed = [r.message_id for r, res in zip(records, results, strict=True) if not res.ok]
        response = batch_response([r.message_id for r in records], failed)
        self.kernel.logger.debug(
            "batch done", extra={"records": len(records), "failed": len(response["batchItemFailures"])}
        )
        return response

    async def _run_batch(self, records: list[SqsRecord], context: LambdaContext | None) -> list[_Result]:
        # A queue with priority levels or serialize keys has several SQS queues (transport/routes.py).
        keys = {r.queue_name: self._route(r.queue_name) for r in records}
        logical = {key: routes.split(key)[0] for key in keys.values()}
        urls = await self.kernel.arun(
            self.kernel.queue_urls.flow(sorted({*keys.values(), *logical.values()}))
        )
        deliveries = [
            to_delivery(r, queue=logical[keys[r.queue_name]], queue_url=urls[keys[r.queue_name]])
            for r in records
        ]
        budget = self._budget = _Budget(context)
        self._check_timeouts(budget, {d.queue for d in deliveries})
        slots = asyncio.Semaphore(self.kernel.settings.concurrency)
        self._batches.call_slot = lambda deliveries: under(
            slots
        )  # a batch call takes one slot, its records none
        if any(r.queue_name.endswith(FIFO_SUFFIX) for r in records):  # one at a time: calls of one
            results = await self._run_in_order(deliveries, urls, budget)
        else:
            batched = {d.message_id for d in deliveries if self._batch_of(d)}

            async def run(d: Delivery) -> _Result:
                if d.message_id in batched:
                    return await self._run_one(d, urls[dlq_key(d.queue)], budget)
                async with slots:
                    return await self._run_one(d, urls[dlq_key(d.queue)], budget)

            results = list(await asyncio.gather(*(run(d) for d in deliveries)))
        await self._set_visibility(
            [
                (d, r.visibility_s)
                for d, r in zip(deliveries, results, strict=True)
                if r.visibility_s is not None
            ]
        )
        return results

    async def _run_in_order(
        self, deliveries: list[Delivery], urls: Mapping[str, str], budget: _Budget
    ) -> list[_Result]:
        """FIFO: one at a time; after the first failure the rest stay unstarted, so order holds."""
        results: list[_Result] = []
        for d in deliveries:
            if results and not results[-1].ok:
                results.append(_Result(ok=False))
                continue
            results.append(await self._run_one(d, urls[dlq_key(d.queue)], budget))
        return results

    def _batch_of(self, delivery: Delivery) -> bool:
        """True for a record of a batch type: expected by its collector, which calls once all arrived."""
        spec = self._spec_of(delivery.body)
        if spec is not None and spec.batch is not None:
            self._batches.expect(spec, delivery.message_id)
        return spec is not None and spec.batch is not None

    async def _run_one(self, delivery: Delivery, dlq_url: str, budget: _Budget) -> _Result:
        try:
            result = await self._run_record(delivery, dlq_url, budget)
            if result.ok:  # the ESM deletes it after the reply: kept hidden until then
                self._done[delivery.receipt_handle] = delivery
            return result
        finally:  # claimed or not, this record no longer holds its batch type's call back
            self._batches.settled(delivery.message_id)

    async def _run_record(self, delivery: Delivery, dlq_url: str, budget: _Budget) -> _Result:
        spec = self._spec_of(delivery.body)
        need_s = self._needed_s(spec)
        if not budget.fits(need_s):
            never = not budget.fitted_at_start(need_s)
            what = _needs(spec, self.margin_s)
            if never:
                self.kernel.logger.error(
                    f"record not started: {what}, more than this function's whole "
                    f"{budget.at_start_s():.1f} s timeout: it can never run here, and its message "
                    "waits out the visibility timeout until the redrive policy moves it to the DLQ; "
                    f"{_FIX}",
                    extra=self._not_started_extra(delivery, spec, need_s, budget),
                )
            else:
                self.kernel.logger.warning(
                    f"record not started: {what}, more than the {budget.left_s():.1f} s this "
                    "invocation has left; it is visible again at once for another invocation",
                    extra=self._not_started_extra(delivery, spec, need_s, budget),
                )
            # No claim was made, so no attempt is used. Visible again at once for an invocation
            # with time left, unless no invocation can ever fit it (then it waits for the timeout).
            return _Result(ok=False, visibility_s=None if never else 0)
        return await self._apply(delivery, await self._host.handle(delivery), dlq_url)

    def _check_timeouts(self, budget: _Budget, queues: set[str]) -> None:
        """Each invocation: name the job types of ``queues`` that no invocation of this function fits.

        Every invocation, not once per container: these types' messages cycle until redrive, and
        an ERROR line per invocation is what a log alarm sees (the deploy-time checks are the fix).
        """
        never = sorted(
            (
                s
                for s in self.kernel.registry
                if s.queue in queues and not budget.fitted_at_start(self._needed_s(s))
            ),
            key=lambda s: s.name,
        )
        if never:
            self.kernel.logger.error(
                f"job types that can never run on this function ({budget.at_start_s():.1f} s timeout): "
                + "; ".join(_needs(s, self.margin_s) for s in never)
                + f"; {_FIX}",
                extra={
                    "job_types": {s.name: s.explicit_timeout_s for s in never},
                    "function_timeout_s": round(budget.at_start_s(), 1),
                    "margin_s": self.margin_s,
                },
            )

    def _spec_of(self, body: str) -> HandlerSpec | None:
        """The record's job type, or None for what runs no handler (a fire, a malformed body, an unknown type)."""
        try:
            return self.kernel.registry.get(envelope_format.Envelope.from_body(body).job_type)
        except (EnvelopeError, HandlerNotFound):
            return None

    def _needed_s(self, spec: HandlerSpec | None) -> float:
        """The time a record needs to start: its explicit timeout (or ``MIN_RUN_S``) plus the margin."""
        if spec is None:
            return self.margin_s
        run_s = MIN_RUN_S if spec.explicit_timeout_s is None else spec.explicit_timeout_s
        return run_s + self.margin_s

    def _time_left_to_run(self) -> float:
        """The timeout of a job type without its own: the invocation's time left, less the margin."""
        left = self._budget.left_s() if self._budget is not None else math.inf
        # No context (a direct call, not Lambda): no deadline to inherit, the ECS worker's default.
        return left - self.margin_s if math.isfinite(left) else DEFAULT_TIMEOUT_S

    def _not_started_extra(
        self, delivery: Delivery, spec: HandlerSpec | None, need_s: float, budget: _Budget
    ) -> dict[str, Any]:
        return {
            "message_id": delivery.message_id,
            "job_type": spec.name if spec else None,
            "timeout_s": spec.explicit_timeout_s if spec else None,
            "needed_s": need_s,
            "left_s": round(budget.left_s(), 3),
            "function_timeout_s": round(budget.at_start_s(), 1),
        }

    async def _apply(self, delivery: Delivery, ack: Ack, dlq_url: str) -> _Result:
        """Map an Ack to the reply (see the module docstring); the record is already written."""
        reply = _Reply(self.kernel)
        await apply(ack, delivery, dlq_url, reply)
        await self._host.yielded(delivery, ack)
        return reply.result

    async def _extend_running(self) -> None:
        """Keep each running job's message hidden until its lease would have expired, and then some.

        The event source mapping hides a message for the queue's visibility timeout only: a run
        longer than that would see its message come back to another invocation, whose claim could
        only re-arm it (one receive more toward the redrive). Extended at each beat, the message
        stays hidden while the invocation runs the job; if the invocation dies, it comes back just
        after the last renewed lease expired, when its claim rescues the job at once.

        A record already reported as a success is extended too: the ESM deletes its message only
        once the whole invocation returns, and a longer record beside it would otherwise let it come
        back (a finished job received again; a dead letter copied twice). A record to be re-armed or
        released is not: its visibility change is applied at the reply, and until then the claim of
        a copy that came back decides anew.

        An extension refused as an invalid receipt means the message is gone (deleted by hand, a
        purge): it can bring nothing back, so a running job gets the witness of a run outliving its
        message, and a retry it asks for a fresh copy (``DeliveryHost.messages_gone``), as in the
        ECS worker. It is not extended again.
        """
        settings = self.kernel.settings
        hide_s = sqs.clamp_visibility(max(settings.visibility_timeout_s, math.ceil(settings.lease_s) + 1))
        running = [ctx.delivery for ctx in self._host.running.values() if ctx.delivery is not None]
        held = {d.receipt_handle: d for d in running} | self._done
        for receipt in self._gone:
            held.pop(receipt, None)
        if held:
            gone = await self._set_visibility([(d, hide_s) for d in held.values()])
            if gone:
                self._gone |= gone
                self._host.messages_gone(gone)

    async def _set_visibility(self, changes: list[tuple[Delivery, int]]) -> set[str]:
        """Re-arm or release messages, ten to a request, before the reply reports them as failed.

        Returns the receipt handles SQS refused as invalid: their message is gone (or was received
        again by someone else).
        """
        invalid: set[str] = set()
        by_queue: dict[str, list[tuple[Delivery, int]]] = {}
        for delivery, seconds in changes:
            by_queue.setdefault(delivery.queue_url, []).append((delivery, seconds))
        for queue_url, items in by_queue.items():
            for batch in sqs.chunks(items):
                entries = [(str(i), d.receipt_handle, s) for i, (d, s) in enumerate(batch)]
                try:
                    response = await self.kernel.arun(
                        one(
                            Call(
                                "sqs",
                                "change_message_visibility_batch",
                                sqs.change_visibility_batch(queue_url, entries),
                            )
                        )
                    )
                except AwsError as exc:
                    # Reported as failed anyway: the message returns after its visibility timeout and
                    # the record (already written) decides what it is worth then.
                    self.kernel.logger.warning("visibility change failed", extra={"error": str(exc)})
                    continue
                for entry_id, code in sqs.failed_entries(response).items():
                    delivery = batch[int(entry_id)][0]
                    if code in sqs.INVALID_RECEIPT:
                        invalid.add(delivery.receipt_handle)
                    self.kernel.logger.warning(
                        "visibility change refused",
                        extra={"message_id": delivery.message_id, "code": code},
                    )
        return invalid

    def _route(self, queue_name: str) -> str:
        prefix = f"{self.kernel.settings.queue_prefix}-"
        key = routes.route_from_name(self.kernel.settings, queue_name)
        if key is None:
            raise ConfigurationError(
                f"event from queue {queue_name!r}, which is not one of app {self.kernel.name!r}'s queues "
                f"(they are named {prefix}<queue>); check the event source mapping and SQSJOBS_QUEUE_PREFIX"
            )
        return key


class _Reply:
    """The Lambda adapter's ``AckTarget``: an ack becomes one record's part of the reply (a leave: failed)."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self.result = _Result(ok=False)

    def delete(self, delivery: Delivery) -> None:
        """Reported as a success: the ESM deletes it."""
        self.result = _Result(ok=True)

    def set_visibility(self, delivery: Delivery, seconds: int) -> None:
        """Reported as a failure, after its visibility is set (before the reply)."""
        self.result = _Result(ok=False, visibility_s=seconds)

    async def dead_letter(self, delivery: Delivery, dlq_url: str, attributes: dict[str, str]) -> None:
        """Like ``MessageOps.dead_letter``, without the delete: the ESM deletes what succeeded."""
        try:
            await self._kernel.arun(
                one(Call("sqs", "send_message", sqs.send_one(dlq_url, delivery.body, attributes=attributes)))
            )
        except AwsError as exc:
            self._kernel.logger.error(
                "dead-letter send failed; the message will be redelivered",
                extra={"message_id": delivery.message_id, "error": str(exc)},
            )
            return
        self.result = _Result(ok=True)

    async def resend(self, delivery: Delivery, delay_s: int) -> None:
        """A fresh copy replaces the message: a success the ESM deletes (a failure, re-armed, if the send fails)."""
        try:
            await self._kernel.arun(
                one(Call("sqs", "send_message", sqs.fresh_copy(delivery, delay_s=delay_s)))
            )
        except AwsError as exc:
            self._kernel.logger.warning(
                "re-send failed; the message is re-armed instead",
                extra={"message_id": delivery.message_id, "error": str(exc)},
            )
            self.set_visibility(delivery, sqs.clamp_visibility(delay_s))
            return
        self.result = _Result(ok=True)


class _Budget:
    """The invocation's time: what was left at the start, and what is left now."""

    def __init__(self, context: LambdaContext | None) -> None:
        self._context = context
        self._at_start = self.left_s()

    def at_start_s(self) -> float:
        """Seconds the invocation had at its start: about the function's configured timeout."""
        return self._at_start

    def left_s(self) -> float:
        """Seconds until the function's deadline (infinite without a context, e.g. a direct call)."""
        if self._context is None:
            return math.inf
        return self._context.get_remaining_time_in_millis() / 1000.0

    def fits(self, need_s: float) -> bool:
        """True when ``need_s`` seconds remain now."""
        return need_s <= self.left_s()

    def fitted_at_start(self, need_s: float) -> bool:
        """True when ``need_s`` would have fitted a whole invocation (else it never can)."""
        return need_s <= self._at_start


_FIX = (
    "lower the type's timeout, or drop it (a type without one runs in the time the invocation has "
    "left), or raise the function's timeout"
)


def _needs(spec: HandlerSpec | None, margin_s: float) -> str:
    """What a record of ``spec`` needs to start, with the numbers, for a log line."""
    if spec is None:
        return f"the record needs the {margin_s:g} s margin to be recorded"
    if spec.explicit_timeout_s is None:
        return (
            f"job type {spec.name!r} (no explicit timeout) needs at least {MIN_RUN_S:g} s to run "
            f"plus the {margin_s:g} s margin"
        )
    return (
        f"job type {spec.name!r} has a {spec.explicit_timeout_s:g} s timeout, plus the {margin_s:g} s margin"
    )


def handler_from_env() -> LambdaWorker:
    """The App named by ``SQSJOBS_APP``, wrapped for Lambda; call once per container, at import."""
    return LambdaWorker(kernel_from_path())
