"""The gate before the claim: pause, breakers, concurrency slots and start rates, checked fleet-wide.

The limits feature's ``AdmissionGuard`` and ``FinishHook`` (``runtime/seams.py``; registered by
``limits_plugin``): the execution asks ``admit`` after the handler lookup and before the claim. A job whose type
is neither limited nor pausable passes without a read or a write. Otherwise the gate reads what
it needs through a short cache (one BatchGetItem per ``CACHE_S`` per worker at most, half a read
unit per item) and refuses from the cache alone when it can: a refused job is *deferred* — its
message re-armed for a delay that fits the reason, never holding a worker slot, its attempt
untouched (the claim never happened). Only when the cache says there is room does it write, each
write one conditional write that may be refused (a write unit) and tells, by ``ALL_OLD``, what
the item holds now::

    paused?  ── yes ─▶ defer (recheck grows with the pause: 5 s..``Settings.defer_recheck_max_s``)
    breaker open, cooldown left? ── defer until it ends;  cooldown over ── become the one probe (1 write)
    concurrency: a free slot in the cache? ── no ─▶ defer 1-3 s;  yes ── take it (1 write)
    rate: room in the start log? ── no ─▶ defer to the next free start;  yes ── log the start (1 write)
    ─▶ admitted at ``Held.at``: the claim uses that instant as the job's ``started_at``

The admitted job's slots are renewed with its lease (``renew``) and given back when its finish
landed (``landed``, the ``FinishHook``), or at once when the claim after the gate was refused
(``give_back``). A worker killed holding a slot stops renewing it: the slot is free again when
its lease (``Settings.lease_s``) runs out. docs/flow-control-limits.md has the costs and ceilings.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, one
from sqsjobs.delivery import Ack
from sqsjobs.errors import AwsError, LimitWait
from sqsjobs.job import AttemptOutcome
from sqsjobs.limits import records as limit_records
from sqsjobs.runtime.seams import Plugin
from sqsjobs.store.apply import Landed, Refused, apply
from sqsjobs.store.codec import job_from_item, nonce, num_attr, str_attr
from sqsjobs.store.requests import get as get_record
from sqsjobs.transport import lifespan

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from sqsjobs.delivery import Delivery, Finish
    from sqsjobs.envelope import Envelope
    from sqsjobs.limits.declarations import Limit, Limits
    from sqsjobs.registry import HandlerSpec
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.store.codec import Item
    from sqsjobs.store.write import Delete, Entry, Put, Write

#: How long a read of a limit's items serves admissions (slots, rate log, breaker).
CACHE_S = 1.0
#: How long a read of a pause item serves: a pause stops starts fleet-wide within about this.
PAUSE_CACHE_S = 2.0
#: A paused job is looked at again after a quarter of the pause so far, at least this long; at most
#: ``Settings.defer_recheck_max_s`` (which also caps this floor and the two waits below).
PAUSE_RECHECK_MIN_S = 5.0
#: A job waiting for a concurrency slot is looked at again after this long (uniform, seconds).
SLOT_WAIT_S = (1.0, 3.0)
#: While a breaker's probe runs, a job is looked at again when the probe's lease ends, within these
#: bounds (then +0..50 %).
PROBE_WAIT_S = (1.0, 5.0)
#: Writes one admission may try on one limit before it defers (each refused write: a write unit).
MAX_TRIES = 2

DEFERRED = "JobsDeferred"


@dataclass
class Held:
    """What one admitted job holds until its finish lands."""

    job_id: str
    #: The admission's instant: the claim records it as the job's ``started_at``.
    at: float
    #: (slot item id, token) of each concurrency slot taken.
    slots: list[tuple[str, str]] = field(default_factory=list)
    #: Breaker items this job is the probe of.
    probes: list[str] = field(default_factory=list)
    #: The limits with a breaker that this job's failures count toward.
    breakers: list[Limit] = field(default_factory=list)
    #: When its slots were last renewed: an entry no renewal reaches (its run lost its lease) is dropped.
    renewed: float = 0.0


class Gate:
    """One per kernel (the process's worker and finish hook share it): the admissions, holdings and caches of its jobs."""

    def __init__(self, kernel: Kernel, limits: Limits) -> None:
        limits.check(kernel.registry)  # an unknown limit name fails the worker's start, not a job
        self.kernel = kernel
        self.limits = limits
        self._table = kernel.settings.table_name
        self._cache: dict[str, tuple[float, Item | None]] = {}
        #: Admitted jobs, by id, until their finish lands or their claim is refused.
        self.held: dict[str, Held] = {}
        #: Rate limits: how far ahead this worker has already sent waiting jobs (spreads them out).
        self._booked: dict[tuple[str, str | None], float] = {}
        #: Deferrals by (reason, limit or type), and refused writes by limit: for metrics and tests.
        self.deferred: Counter[tuple[str, str]] = Counter()
        self.refused_writes: Counter[str] = Counter()
        self._unreported: Counter[tuple[str, str]] = Counter()
        self._reported_refusals: Counter[str] = Counter()
        if limits or any(s.pausable for s in kernel.registry):
            kernel.metrics.add_source(self._metric_lines)

    # ── admission ─────────────────────────────────────────────────────────────────────────
    async def admit(self, spec: HandlerSpec, envelope: Envelope, delivery: Delivery) -> Held | Ack | None:
        """None: the type is not gated; a ``Held``: admitted (claim now); an ``Ack``: deferred."""
        if not spec.pausable:
            return None
        held = Held(envelope.job_id, self.kernel.clock.now())
        try:
            await self._check_pause(spec.name)
            limits = [self.limits.get(n) for n in spec.limits]
            if limits:
                await self._admit(held, limits, envelope)
        except LimitWait as wait:
            await self._undo(held)
            return await self._defer(spec, envelope, delivery, wait)
        except AwsError as exc:  # DynamoDB unreachable: nothing taken stays taken; the message returns
            await self._undo(held)
            self.kernel.logger.warning(
                "limit check failed; the message comes back", extra={"error": str(exc)}
            )
            return Ack("leave")
        self._forget_stale(held.at)
        held.renewed = held.at
        self.held[held.job_id] = held
        return held

    def _forget_stale(self, now: float) -> None:
        """Drop holdings no finish will end (a run that lost its lease): their slots expire by lease."""
        horizon = now - 2 * self.kernel.settings.lease_s
        for job_id in [j for j, h in self.held.items() if h.renewed < horizon]:
            del self.held[job_id]

    async def _check_pause(self, job_type: str) -> None:
        item = (await self._read([limit_records.pause_id(job_type)], PAUSE_CACHE_S))[
            limit_records.pause_id(job_type)
        ]
        if item is not None:
            paused_for = self.kernel.clock.now() - (num_attr(item, "paused_at") or 0.0)
            high = self.kernel.settings.defer_recheck_max_s
            recheck = max(paused_for / 4 * random.uniform(0.8, 1.2), PAUSE_RECHECK_MIN_S)
            raise LimitWait("paused", job_type, min(recheck, high))

    async def _admit(self, held: Held, limits: Sequence[Limit], envelope: Envelope) -> None:
        keys = {lim.name: lim.key_of(*await self._key_source(lim, envelope)) for lim in limits}
        shards = {lim.name: random.randrange(lim.rate.shards) for lim in limits if lim.rate}
        ids = [i for lim in limits for i in _ids(lim, keys[lim.name], shards.get(lim.name, 0))]
        items = await self._read(ids, CACHE_S)
        now = self.kernel.clock.now()
        for lim in limits:  # refusals the cache alone can tell: no write
            if lim.breaker:
                self._breaker_wait(lim, items[limit_records.breaker_id(lim.name)], now)
            if lim.concurrency and not self._free_slots(lim, keys[lim.name], items, now):
                raise LimitWait("concurrency", lim.name, self._slot_wait())
            if lim.rate:
                rid = limit_records.rate_id(lim.name, shards[lim.name], keys[lim.name])
                self._rate_wait(lim, items[rid], now, shards[lim.name], keys[lim.name])
        for lim in limits:
            if lim.concurrency:
                await self._take_slot(held, lim, keys[lim.name], items)
        for lim in limits:
            if lim.breaker:
                held.breakers.append(lim)
                if (
                    limit_records.breaker_state(items[limit_records.breaker_id(lim.name)])
                    != limit_records.CLOSED
                ):
                    await self._become_probe(held, lim, items[limit_records.breaker_id(lim.name)])
        held.at = self.kernel.clock.now()
        for lim in limits:
            if lim.rate:
                await self._log_start(held, lim, shards[lim.name], keys[lim.name])

    async def _key_source(self, lim: Limit, envelope: Envelope) -> tuple[str | None, Any]:
        """(tenant, payload) for the limit's key: the message's, or the record's for a bare hint."""
        if lim.key is None or envelope.has_payload:
            return envelope.tenant, envelope.payload
        response = await self.kernel.arun(
            one(Call("dynamodb", "get_item", get_record(self._table, envelope.job_id)))
        )
        if not response.get("Item"):
            return None, None  # no record: the claim will say so
        job = job_from_item(response["Item"])
        return job.tenant, job.payload

    def _breaker_wait(self, lim: Limit, item: Item | None, now: float) -> None:
        state = limit_records.breaker_state(item)
        if state == limit_records.OPEN and (until := num_attr(item or {}, "until") or 0.0) > now:
            raise LimitWait("breaker", lim.name, until - now + random.uniform(0.0, 1.0))
        if (
            state == limit_records.HALF_OPEN
            and (probe_until := num_attr(item or {}, "probe_until") or 0.0) > now
        ):
            low, high = PROBE_WAIT_S
            wait = min(max(probe_until - now, low), high) * random.uniform(1, 1.5)
            raise LimitWait("breaker", lim.name, min(wait, self.kernel.settings.defer_recheck_max_s))

    def _free_slots(
        self, lim: Limit, key: str | None, items: Mapping[str, Item | None], now: float
    ) -> list[str]:
        assert lim.concurrency is not None
        slots = [limit_records.slot_id(lim.name, n, key) for n in range(lim.slots(key))]
        return [s for s in slots if limit_records.slot_is_free(items.get(s), now)]

    def _rate_wait(self, lim: Limit, item: Item | None, now: float, shard: int, key: str | None) -> None:
        assert lim.rate is not None
        allowed = lim.rate.shard_starts(shard)
        opens = limit_records.next_start(
            limit_records.starts_of(item), allowed=allowed, window_s=lim.rate.window_s
        )
        if opens > now:
            # Send waiting jobs back one start interval apart, so they do not all return at once.
            # Booked per key: one key's waiting jobs never push another key's back.
            booked = max(self._booked.get((lim.name, key), 0.0), opens)
            self._booked[(lim.name, key)] = booked + lim.rate.window_s / lim.rate.starts
            raise LimitWait("rate", lim.name, booked - now + random.uniform(0.0, 0.5))

    async def _take_slot(
        self, held: Held, lim: Limit, key: str | None, items: dict[str, Item | None]
    ) -> None:
        now = self.kernel.clock.now()
        free = self._free_slots(lim, key, items, now)
        random.shuffle(free)  # workers that read the same free slots rarely race for the same one
        token = nonce()
        lease_s = self.kernel.settings.lease_s
        for slot in free[:MAX_TRIES]:
            put = limit_records.take_slot(
                self._table, slot, job_id=held.job_id, token=token, now=now, lease_s=lease_s
            )
            if await self._conditional(put, lim.name, items, slot, token=token):
                held.slots.append((slot, token))
                self._remember(slot, dict(put.item))
                return
        raise LimitWait("concurrency", lim.name, self._slot_wait())

    def _slot_wait(self) -> float:
        return min(random.uniform(*SLOT_WAIT_S), self.kernel.settings.defer_recheck_max_s)

    async def _become_probe(self, held: Held, lim: Limit, item: Item | None) -> None:
        bid = limit_records.breaker_id(lim.name)
        write = limit_records.become_probe(
            self._table,
            bid,
            version=limit_records.version_of(item),
            job_id=held.job_id,
            now=self.kernel.clock.now(),
            lease_s=self.kernel.settings.lease_s,
        )
        items: dict[str, Item | None] = {}
        if not await self._conditional(write, lim.name, items, bid, probe=held.job_id):
            self._breaker_wait(lim, items.get(bid), self.kernel.clock.now())
            raise LimitWait("breaker", lim.name, random.uniform(1.0, 3.0))
        held.probes.append(bid)
        self._cache.pop(bid, None)
        self.kernel.logger.info("breaker probe admitted", extra={"limit": lim.name, "job_id": held.job_id})

    async def _log_start(self, held: Held, lim: Limit, shard: int, key: str | None) -> None:
        assert lim.rate is not None
        rid = limit_records.rate_id(lim.name, shard, key)
        allowed = lim.rate.shard_starts(shard)
        items = {rid: self._cache.get(rid, (0.0, None))[1]}
        for _ in range(MAX_TRIES):
            item = items.get(rid)
            starts = limit_records.starts_of(item)
            now = held.at
            if limit_records.next_start(starts, allowed=allowed, window_s=lim.rate.window_s) > now:
                self._rate_wait(lim, item, now, shard, key)
            wid = nonce()
            write = limit_records.record_start(
                self._table,
                rid,
                starts=starts,
                version=limit_records.version_of(item),
                now=now,
                allowed=allowed,
                wid=wid,
            )
            if await self._conditional(write, lim.name, items, rid, wid=wid):
                self._remember(rid, {"id": {"S": rid}, "starts": write.value(":s"), "v": write.value(":n")})
                return
            held.at = self.kernel.clock.now()
        raise LimitWait("rate", lim.name, lim.rate.window_s / lim.rate.starts + random.uniform(0.0, 0.5))

    async def _conditional(
        self,
        write: Write | Put,
        limit: str,
        items: dict[str, Item | None],
        item_id: str,
        **own: str,
    ) -> bool:
        """One conditional write; on refusal the item it found goes to the cache and ``items``.

        A refusal that shows this very write (``own``: its token, probe or nonce — botocore retried
        a write whose answer was lost) counts as landed.
        """
        shows_own = (lambda found: _shows(found, own)) if own else None  # no mark: nothing shows it
        outcome = await self.kernel.arun(apply(write, own=shows_own))
        if isinstance(outcome, Landed):
            return True
        self.refused_writes[limit] += 1
        self._remember(item_id, outcome.item)
        items[item_id] = outcome.item
        return False

    async def _defer(self, spec: HandlerSpec, envelope: Envelope, delivery: Delivery, wait: LimitWait) -> Ack:
        delay = max(1, math.ceil(wait.delay_s))
        self.deferred[(wait.reason, wait.limit)] += 1
        self._unreported[(wait.reason, wait.limit)] += 1
        self.kernel.metrics.count(DEFERRED, spec.name, envelope.tenant)
        if envelope.run_at is not None:  # a due job held back: its wait counts in its type's oldest
            self.kernel.metrics.waiting(spec.name, self.kernel.clock.now() - envelope.run_at)
        self.kernel.logger.info(
            "job deferred",
            extra={
                "job_id": envelope.job_id,
                "job_type": spec.name,
                "reason": wait.reason,
                "limit": wait.limit,
                "delay_s": delay,
                "receive_count": delivery.receive_count,
            },
        )
        # Re-armed (a FIFO queue keeps a serialize key's order while its head stays in place), or,
        # close to the redrive limit, replaced by a fresh copy, so a job that only waits is never
        # moved to a DLQ. On a FIFO queue the copy (and the key's members this worker holds,
        # ``runtime/levels.py``) go to the back of the key's group: its order yields, its job is kept.
        redrive = lifespan.redrive_limit(self.kernel.settings, self.kernel.registry.max_attempts())
        return lifespan.waiting(delivery, delay, redrive)

    # ── holding ───────────────────────────────────────────────────────────────────────────
    async def give_back(self, job_id: str) -> None:
        """The claim after the gate did not take the job: free what the admission took, now."""
        held = self.held.pop(job_id, None)
        if held is not None:
            await self._undo(held)

    async def _undo(self, held: Held) -> None:
        await self._release(held)
        for bid in held.probes:
            await self._quiet(limit_records.end_probe(self._table, bid, job_id=held.job_id))

    async def _release(self, held: Held) -> None:
        for slot, token in held.slots:
            await self._quiet(limit_records.give_back_slot(self._table, slot, token=token))
            self._cache.pop(slot, None)
        held.slots = []

    async def renew(self, job_ids: Iterable[str], now: float) -> None:
        """Extend the slots and probes of these running jobs (their leases were just renewed)."""
        lease_s = self.kernel.settings.lease_s
        writes = []
        for job_id in job_ids:
            held = self.held.get(job_id)
            if held is None:
                continue
            held.renewed = now
            writes += [
                limit_records.renew_slot(self._table, s, token=t, now=now, lease_s=lease_s)
                for s, t in held.slots
            ]
            writes += [
                limit_records.renew_probe(self._table, b, job_id=job_id, now=now, lease_s=lease_s)
                for b in held.probes
            ]
        await asyncio.gather(*(self._quiet(w, lost="limit slot lost at renewal") for w in writes))

    async def _quiet(self, write: Write | Delete, *, lost: str = "") -> bool:
        """A write whose failure is logged, never raised (a slot left behind expires with its lease)."""
        try:
            outcome = await self.kernel.arun(apply(write))
        except AwsError as exc:
            self.kernel.logger.warning(
                lost or "limit write failed", extra={"item": write.key, "error": str(exc)}
            )
            return False
        if isinstance(outcome, Refused) and lost:
            self.kernel.logger.warning(lost, extra={"item": write.key, "error": str(outcome.error)})
        return isinstance(outcome, Landed)

    # ── FinishHook ────────────────────────────────────────────────────────────────────────
    async def entries(self, finish: Finish) -> Sequence[Entry]:
        """None: a slot's release need not commit with the finish (a crash leaves it to its lease)."""
        return ()

    async def landed(self, finish: Finish) -> None:
        """Give the job's slots back; count a failure toward its breakers; a probe's outcome decides."""
        held = self.held.pop(finish.job.id, None)
        if held is None:
            return
        try:
            await self._release(held)
            failed = finish.outcome in (AttemptOutcome.RETRY, AttemptOutcome.DEAD)
            for lim in held.breakers:
                bid = limit_records.breaker_id(lim.name)
                if bid in held.probes:
                    await self._verdict(lim, held.job_id, finish.outcome)
                elif failed:
                    await self._count_failure(lim)
        except Exception:  # a FinishHook never raises: the finish itself is recorded
            self.kernel.logger.exception(
                "limit bookkeeping after a finish failed", extra={"job_id": held.job_id}
            )

    async def _verdict(self, lim: Limit, job_id: str, outcome: AttemptOutcome) -> None:
        assert lim.breaker is not None
        bid = limit_records.breaker_id(lim.name)
        item = (await self._read([bid], 0.0))[bid]
        if item is None or str_attr(item, "probe") != job_id:
            return  # no longer this job's verdict (its probe lease ran out and another took over)
        version, now = limit_records.version_of(item), self.kernel.clock.now()
        if outcome is AttemptOutcome.SUCCEEDED:
            verdict = limit_records.close_breaker(self._table, bid, version=version)
        elif outcome in (AttemptOutcome.RETRY, AttemptOutcome.DEAD):
            verdict = limit_records.open_breaker(
                self._table, bid, version=version, now=now, cooldown_s=lim.breaker.cooldown_s
            )
        else:
            verdict = limit_records.end_probe(self._table, bid, job_id=job_id)
        if await self._quiet(verdict):
            self._cache.pop(bid, None)
            self.kernel.logger.info(
                "breaker probe decided", extra={"limit": lim.name, "outcome": str(outcome)}
            )

    async def _count_failure(self, lim: Limit) -> None:
        assert lim.breaker is not None
        bid, now = limit_records.breaker_id(lim.name), self.kernel.clock.now()
        landed = await self.kernel.arun(apply(limit_records.record_failure(self._table, bid, now=now)))
        item = dict(landed.attributes or {}) if isinstance(landed, Landed) else {}
        recent = [t for t in limit_records.failures_of(item) if t >= now - lim.breaker.window_s]
        version = limit_records.version_of(item)
        if limit_records.breaker_state(item) == limit_records.CLOSED and len(recent) >= lim.breaker.failures:
            opening = limit_records.open_breaker(
                self._table, bid, version=version, now=now, cooldown_s=lim.breaker.cooldown_s
            )
            if await self._quiet(opening):
                self._cache.pop(bid, None)
                self.kernel.logger.warning(
                    "breaker opened",
                    extra={"limit": lim.name, "failures": len(recent), "cooldown_s": lim.breaker.cooldown_s},
                )
        elif len(limit_records.failures_of(item)) > 2 * lim.breaker.failures:
            await self._quiet(limit_records.trim_failures(self._table, bid, version=version, keep=recent))

    # ── cache ─────────────────────────────────────────────────────────────────────────────
    async def _read(self, ids: Sequence[str], max_age_s: float) -> dict[str, Item | None]:
        """The items, from the cache when read within ``max_age_s``, else in one BatchGetItem per 100."""
        now = self.kernel.clock.now()
        # Taken before the first await: another delivery on this loop may drop an entry (a slot
        # released, a breaker moved) while this one reads, so the answer never re-reads the cache.
        fresh = {i: c[1] for i in ids if (c := self._cache.get(i)) is not None and now - c[0] <= max_age_s}
        stale = [i for i in dict.fromkeys(ids) if i not in fresh]
        if stale:
            found = await self.kernel.arun(limit_records.batch_get(self._table, stale))
            for i in stale:
                fresh[i] = found.get(i)
                self._remember(i, fresh[i])
        return {i: fresh[i] for i in ids}

    def _remember(self, item_id: str, item: Item | None) -> None:
        self._cache[item_id] = (self.kernel.clock.now(), item)

    def _metric_lines(self) -> list[tuple[dict[str, str], dict[str, float]]]:
        """EMF lines: per limit, slots held now and deferrals and refused writes since the last flush.

        The slots held are this worker's: their sum over workers is what runs under the limit.
        Per paused type, ``JobsPaused`` counts the jobs sent back to wait.
        """
        unreported, self._unreported = self._unreported, Counter()
        refused, self._reported_refusals = self.refused_writes - self._reported_refusals, +self.refused_writes
        held = Counter(s.split("#")[1] for h in self.held.values() for s, _ in h.slots)
        out: list[tuple[dict[str, str], dict[str, float]]] = []
        for lim in self.limits:
            waits = sum(
                n for (reason, name), n in unreported.items() if name == lim.name and reason != "paused"
            )
            values = {"LimitSlotsHeld": float(held[lim.name]), DEFERRED: float(waits)}
            out.append(({"limit": lim.name}, values | {"LimitWritesRefused": float(refused[lim.name])}))
        for (reason, name), n in sorted(unreported.items()):
            if reason == "paused":
                out.append(({"job_type": name}, {"JobsPaused": float(n)}))
        return out


def _ids(lim: Limit, key: str | None, shard: int) -> list[str]:
    """Every item an admission under ``lim`` may need, read in one batch."""
    ids = [limit_records.slot_id(lim.name, n, key) for n in range(lim.slots(key))]
    if lim.breaker:
        ids.append(limit_records.breaker_id(lim.name))
    if lim.rate:
        ids.append(limit_records.rate_id(lim.name, shard, key))
    return ids


def limits_plugin(kernel: Kernel, limits: Limits) -> Plugin:
    """Pause, limits and breakers: an admission guard before the claim, and slots given back at the finish."""
    gate = Gate(kernel, limits)
    gated = frozenset(s.name for s in kernel.registry if s.pausable)  # only these are admitted
    return Plugin("limits", guard=gate, finish=gate, types=gated)


def _shows(found: Item, own: Mapping[str, str]) -> bool:
    """True when a refused write's item carries what only that write wrote (a token, a probe, a wid)."""
    return all(str_attr(found, k) == v for k, v in own.items())
