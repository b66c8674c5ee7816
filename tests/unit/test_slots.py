"""The worker's slot accounting (``sqsjobs.runtime.slots``), driven as the worker and run stage drive it.

The integration test (tests/integration/test_slots.py) checks the same promises on a real worker
process; these pin the rules a batch call or a new receive path relies on, without timing.
"""

from __future__ import annotations

import asyncio

from sqsjobs.runtime.slots import Slots


async def _received(slots: Slots, queue: str, n: int) -> list:
    assert await slots.reserve(queue, most=n) == n
    return [slots.hold(queue) for _ in range(n)]


def test_handlers_never_exceed_concurrency_and_free_slots_go_in_receive_order():
    async def main() -> list[int]:
        slots = Slots(2, {}, held_ahead=5)
        holds = await _received(slots, "q", 5)
        assert slots.free_ahead("q") == 0  # five held ahead: the bound, no more receives
        order: list[int] = []
        gates = [asyncio.Event() for _ in holds]

        async def run(i: int) -> None:
            async with slots.slot([holds[i]]) as granted:
                assert granted
                order.append(i)
                assert slots.running <= 2
                await gates[i].wait()
            slots.release(holds[i])

        tasks = [asyncio.create_task(run(i)) for i in (0, 1)]
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(run(i)) for i in (4, 3, 2)]  # ask out of receive order
        await asyncio.sleep(0)
        assert order == [0, 1] and slots.running == 2 and slots.ahead == 3
        for i in (0, 1, 2, 3, 4):
            gates[i].set()
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        assert (slots.running, slots.ahead, slots.behind, slots.peak_running) == (0, 0, 0, 2)
        return order

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]


def test_a_queue_at_its_cap_lets_the_next_queue_pass():
    async def main() -> None:
        slots = Slots(2, {"serial": 1}, held_ahead=4, queues=2)
        serial = await _received(slots, "serial", 1)
        assert slots.free_ahead("serial") == 0  # a queue holds no more ahead than its cap
        first = slots.slot([serial[0]])
        assert await first.__aenter__()
        serial += await _received(slots, "serial", 1)
        other = await _received(slots, "other", 1)
        second = asyncio.ensure_future(slots.slot([serial[1]]).__aenter__())
        third = slots.slot([other[0]])
        assert await third.__aenter__()  # received after the second serial job, started before it
        await asyncio.sleep(0)
        assert not second.done()
        await first.__aexit__(None, None, None)
        assert await second
        assert slots.running_by_queue == {"serial": 1, "other": 1}

    asyncio.run(main())


def test_what_finishes_pauses_receives_and_a_batch_takes_one_slot():
    async def main() -> None:
        slots = Slots(1, {}, held_ahead=2)
        batch = await _received(slots, "q", 2)
        async with slots.slot(batch) as granted:  # a batch call: two messages, one slot
            assert granted and slots.running == 1 and slots.ahead == 0
        assert slots.behind == 2 and slots.free_ahead("q") == 0  # two finishing: receives wait
        slots.release(batch[0])
        assert slots.free_ahead("q") == 2
        slots.release(batch[1])

    asyncio.run(main())


def test_close_refuses_waiting_requests_and_an_interrupt_ends_a_wait():
    async def main() -> None:
        slots = Slots(1, {}, held_ahead=3)
        running, waiting, cancelled = await _received(slots, "q", 3)
        hold_slot = slots.slot([running])
        assert await hold_slot.__aenter__()
        interrupt = asyncio.Event()
        by_interrupt = asyncio.ensure_future(slots.slot([cancelled], interrupt).__aenter__())
        by_close = asyncio.ensure_future(slots.slot([waiting]).__aenter__())
        await asyncio.sleep(0)
        interrupt.set()
        assert await by_interrupt is False
        slots.close()
        assert await by_close is False
        assert slots.running == 1 and slots.free_ahead("q") == 0
        await hold_slot.__aexit__(None, None, None)
        for hold in (running, waiting, cancelled):
            slots.release(hold)
        assert (slots.running, slots.ahead, slots.behind) == (0, 0, 0)

    asyncio.run(main())


def test_unset_held_ahead_holds_more_only_while_handlers_are_short():
    """Claims ahead keep short handlers busy; long handlers get no more than ``concurrency`` ahead."""

    async def run_one(slots: Slots, seconds: float) -> None:
        [hold] = await _received(slots, "q", 1)
        async with slots.slot([hold]) as granted:
            assert granted
            await asyncio.sleep(seconds)
        slots.release(hold)

    async def main() -> list[int]:
        slots = Slots(2, {}, held_ahead=None)
        bounds = [slots.free_ahead("q")]  # before any handler ran: concurrency
        for _ in range(3):  # short handlers: two full receives ahead
            await run_one(slots, 0)
        bounds.append(slots.free_ahead("q"))
        for _ in range(12):  # then long ones (0.2 s: what the slots get through in AHEAD_WAIT_S)
            await run_one(slots, 0.2)
        bounds.append(slots.free_ahead("q"))
        return bounds

    assert asyncio.run(main()) == [2, 20, 2]
    # a bound that is set stays as set, whatever the handlers' time
    fixed = Slots(2, {}, held_ahead=3)
    fixed.run_s = 0.0
    assert fixed.free_ahead("q") == 3
