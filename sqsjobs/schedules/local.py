"""The local firing loop of ``sqsjobs dev``: the app's schedules fire in-process, without AWS.

It sends the same ``Fire`` envelope EventBridge Scheduler would (the scheduled time already
substituted) into the job's queue on the emulator, so the worker turns it into a job exactly as
in production. Fire instants are computed by sqsjobs (``sqsjobs.schedules.expressions``): cron in the
schedule's time zone with its DST rules, rate counted from the loop's start (the first fire is at
the start, as Scheduler does for a schedule without a StartDate), at() once.

The clock is injectable: ``due()`` and ``tick()`` read ``clock.now()`` and never sleep, so tests
step a ``FakeClock``. Each occurrence fires at most once; if the clock jumps over several
occurrences (a laptop that slept), only the latest fires, as Scheduler does not backfill either.

Schedules made at runtime (``app.schedules.create``) fire here too: each tick reads their items
(``runtime.items_flow``: ListSchedules of the runtime group on the emulator, one BatchGetItem) and sends
what came due since the last fire the item shows, the loop's own last send or the schedule's resume,
whichever is latest: after a restart of the loop (the firing side's outage), the occurrences within
the schedule's catch-up window are each sent once, older ones are counted ``missed``. A paused one
sends nothing; its resume sends what it missed (``runtime.resume_flow``).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqsjobs._aws import Call
from sqsjobs.envelope import Fire
from sqsjobs.errors import AwsError
from sqsjobs.schedules import records, runtime
from sqsjobs.schedules.expressions import iso_utc
from sqsjobs.schedules.sync import Scheduling, check_declarations
from sqsjobs.store.apply import apply
from sqsjobs.store.codec import num_attr, str_attr
from sqsjobs.transport import sqs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqsjobs._aws import Flow
    from sqsjobs._clock import Clock

#: The loop wakes at least this often, so a stop or a clock change is noticed.
MAX_SLEEP_S = 1.0
#: A fire due this close to now is sent now rather than after another sleep.
MIN_SLEEP_S = 0.05


@dataclass(frozen=True)
class LocalFire:
    """One occurrence, ready to send."""

    schedule: str
    #: The occurrence's instant (epoch seconds): the fire's scheduled time.
    slot: float
    queue: str
    body: str


class LocalScheduler:
    """Fires an App's schedule declarations into its queues, reading an injectable clock."""

    def __init__(self, app: Scheduling, *, clock: Clock | None = None) -> None:
        """Validate the declarations and start counting from ``clock.now()``."""
        self.app = app
        self.clock = clock or app.kernel.clock
        self._payloads = check_declarations(app)
        self._queues = {s.name: app.registry.get(s.job).queue for s in app.schedules}
        #: Where rates start counting.
        self.anchor = self.clock.now()
        # "At or after the start": a rate's first fire, or a cron occurrence exactly now, counts.
        self._next = {s.name: s.next_fire(self.anchor - 1e-3, anchor=self.anchor) for s in app.schedules}
        #: Every fire sent, in order (for tests and the dev console).
        self.sent: list[LocalFire] = []
        #: Runtime schedules: the instant up to which this loop has sent each one's fires.
        self._runtime_upto: dict[str, float] = {}

    def next_due(self) -> float | None:
        """The earliest upcoming fire instant, or None when nothing will fire again."""
        pending = [t for t in self._next.values() if t is not None]
        return min(pending) if pending else None

    def due(self) -> list[LocalFire]:
        """The fires due at ``clock.now()``, one per schedule (the latest occurrence reached)."""
        now = self.clock.now()
        fires: list[LocalFire] = []
        for spec in self.app.schedules:
            nxt = self._next[spec.name]
            if nxt is None or nxt > now:
                continue
            slot = max(spec.slot_at_or_before(now, anchor=self.anchor) or nxt, nxt)
            body = Fire(spec.name, iso_utc(slot), spec.job, self._payloads[spec.name]).to_body()
            fires.append(LocalFire(spec.name, slot, self._queues[spec.name], body))
        return fires

    def mark_sent(self, fires: Sequence[LocalFire]) -> None:
        """Move each schedule past the occurrence it just fired (never fires that slot again)."""
        for fire in fires:
            spec = self.app.schedules.get(fire.schedule)
            assert spec is not None
            self._next[fire.schedule] = spec.next_fire(fire.slot, anchor=self.anchor)
            self.sent.append(fire)

    def send_flow(self, fires: Sequence[LocalFire]) -> Flow[None]:
        """Send each fire to its queue, as Scheduler's SQS target does."""
        urls = yield from self.app.kernel.queue_urls.flow(sorted({f.queue for f in fires}))
        for fire in fires:
            yield Call("sqs", "send_message", sqs.send_one(urls[fire.queue], fire.body))

    def runtime_flow(self) -> Flow[list[LocalFire]]:
        """Send the runtime schedules' fires due since each one's last (in its catch-up window)."""
        k, now = self.app.kernel, self.clock.now()
        items = yield from runtime.items_flow(k)
        fires: list[LocalFire] = []
        for key, item in items.items():
            if str_attr(item, "state") == records.PAUSED:
                continue
            spec = runtime.spec_of(key, item)
            created = num_attr(item, "created_at") or now
            marks = (records.last_slot(item), num_attr(item, "resumed_at"), self._runtime_upto.get(key))
            since = max([created - 1e-3, *(m for m in marks if m is not None)])
            slots, older = runtime.catch_up(spec, since=since, now=now, anchor=created)
            payload = records.payload_of(item)
            queue = self.app.registry.get(spec.job).queue
            fires += [
                LocalFire(key, s, queue, Fire(key, iso_utc(s), spec.job, payload).to_body()) for s in slots
            ]
            if older:
                yield from apply(records.count(k.settings.table_name, key, "missed", older, runtime=True))
            self._runtime_upto[key] = now
        if fires:
            yield from self.send_flow(fires)
            self.sent += fires
        return fires

    async def tick(self) -> list[LocalFire]:
        """Send what is due now; a failed send is retried at the next tick."""
        fires = self.due()
        if fires:
            await self.app.kernel.arun(self.send_flow(fires))
            self.mark_sent(fires)
        fires += await self.app.kernel.arun(self.runtime_flow())
        for fire in fires:
            self.app.kernel.logger.info(
                "schedule fired locally",
                extra={"schedule": fire.schedule, "slot": iso_utc(fire.slot), "queue": fire.queue},
            )
        return fires

    async def run(self, stop: asyncio.Event) -> None:
        """Fire until ``stop`` is set."""
        while not stop.is_set():
            try:
                await self.tick()
            except AwsError as exc:
                self.app.kernel.logger.warning(
                    "local schedule fire failed; retrying", extra={"error": str(exc)}
                )
            nxt = self.next_due()
            wait = MAX_SLEEP_S if nxt is None else min(max(nxt - self.clock.now(), MIN_SLEEP_S), MAX_SLEEP_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
