"""The gate's item cache is shared by every delivery on a worker's loop: a read answers from what it read.

Found by CI: a delivery's admission read a slot's cached item, awaited DynamoDB for another, and in
between a second delivery released that slot (dropping its cache entry); the first then failed with a
``KeyError`` on a slot it had already read. Reproduced here on the emulator behind a proxy that holds
the read's BatchGetItem back while the release's DeleteItem goes through.
"""

from __future__ import annotations

import asyncio

from bench.proxy import AwsProxy, Pending, Step
from sqsjobs.limits.plugin import Gate, Held
from sqsjobs.limits.records import slot_id

#: How long the batch read is held back: the release (one DeleteItem) ends well inside it.
READ_DELAY_S = 1.0


class SlowBatchReads(AwsProxy):
    async def _before_forward(self, pending: Pending, writer: asyncio.StreamWriter) -> Step:
        if pending.action == "BatchGetItem":
            await asyncio.sleep(READ_DELAY_S)
        return "forward"


def test_a_read_that_overlaps_a_release_of_an_entry_it_read_answers_from_what_it_read(
    ministack_url, make_app
):
    proxy = SlowBatchReads(ministack_url)
    app = make_app(proxy.start())
    try:
        app.limit("geo-api", concurrency=2)
        app.job("geocode", limits=["geo-api"])(lambda payload, ctx: None)
        app.provision()
        gate = Gate(app.kernel, app.limits)
        first, second = slot_id("geo-api", 0, None), slot_id("geo-api", 1, None)

        async def overlap() -> dict:
            try:
                await gate._read([first], max_age_s=60)  # cached: fresh for the next read
                reading = asyncio.create_task(gate._read([first, second], max_age_s=60))
                await asyncio.sleep(0)  # the read now waits on DynamoDB for the second slot only
                released = Held("j-other", app.kernel.clock.now(), slots=[(first, "token")])
                await gate._release(released)  # another delivery gives the first slot back
                assert not reading.done(), "the release must land inside the read"
                return await reading
            finally:
                await app.kernel.aclose()

        assert set(asyncio.run(overlap())) == {first, second}
    finally:
        proxy.stop()
