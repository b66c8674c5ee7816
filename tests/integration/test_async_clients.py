"""The async API and the worker's clients come from aiobotocore's own session: aioboto3 is not needed.

A fresh interpreter in which importing aioboto3 fails (as in the Lambda zip and the image, which no
longer carry it) enqueues, reads and runs a job through the async clients against the emulator.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.integration.helpers import worker_env

pytestmark = pytest.mark.slow  # each test starts a process

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    sys.modules["aioboto3"] = None  # any import of it now raises ImportError
    from sqsjobs import App, JobStatus
    from sqsjobs.runtime.worker import Worker

    app = App(sys.argv[1], endpoint_url=sys.argv[2], visibility_timeout_s=5, receive_wait_s=1, lease_s=5.0)

    @app.job("t.double")
    def double(payload: dict, ctx: object) -> int:
        return payload["n"] * 2

    async def main() -> None:
        app.provision()
        job_id = await app.aenqueue("t.double", {"n": 21})
        stop = asyncio.Event()
        worker = asyncio.create_task(Worker(app, concurrency=1).run(stop))
        for _ in range(300):
            job = await app.aget(job_id)
            if job.status is JobStatus.SUCCEEDED:
                break
            await asyncio.sleep(0.1)
        stop.set()
        await worker
        print(job.status.value, job.result)

    asyncio.run(main())
    """
)


def test_the_async_clients_work_without_aioboto3(ministack_url, make_app):
    app = make_app(ministack_url)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, app.name, ministack_url],
        env=worker_env(app),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["succeeded", "42"], done.stdout
