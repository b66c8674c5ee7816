"""The archive, from outside: a worker process runs jobs, the sweeper's stream reader archives them, the records go.

MiniStack, with batched writes off (MiniStack 1.5.33 records no PartiQL write in the change stream;
AWS records every write: docs/events.md, "Locally"). Evidence is read raw: the S3 objects under
``archive/``, the table's items, and ``sqsjobs jobs get`` in a process of its own once the records
are deleted as the TTL deletes them.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import subprocess
import sys
import uuid

import pytest

from sqsjobs import JobStatus, sweep_once
from sqsjobs._aws import Call, one
from sqsjobs.archive import records
from sqsjobs.archive.plugin import ArchiveReader
from sqsjobs.store.codec import av_s
from tests.apps import results
from tests.integration.helpers import kill_group, wait_until, worker_env, worker_process

pytestmark = pytest.mark.slow

APP = "tests.apps.results:app"
ENV = {"SQSJOBS_BATCH_WRITES": "0", "SQSJOBS_ARCHIVE_DAYS": "30"}
KEY = re.compile(r"archive/day=(\d{4}-\d{2}-\d{2})/job_type=([^/]+)/(\d+)\.jsonl\.gz")


@pytest.fixture
def app(ministack_url, make_app):
    made = make_app(
        ministack_url, f"t{uuid.uuid4().hex[:10]}", archive_days=30, event_relay=True, batch_writes=False
    )
    made.registry = results.app.registry
    made.provision()
    return made


def archive_objects(app) -> dict[str, bytes]:
    bucket = app.settings.payload_bucket
    listed = app.run(one(Call("s3", "list_objects_v2", {"Bucket": bucket, "Prefix": "archive/"})))
    return {
        o["Key"]: app.run(one(Call("s3", "get_object", {"Bucket": bucket, "Key": o["Key"]})))["Body"]
        for o in listed.get("Contents", [])
    }


def lines(objects: dict[str, bytes]) -> list[dict]:
    return [
        json.loads(text) for body in objects.values() for text in gzip.decompress(body).decode().splitlines()
    ]


def test_finished_jobs_land_in_the_archive_by_day_and_type_and_are_found_once_their_records_are_gone(app):
    # GIVEN jobs of two types that a worker process runs to their ends: two successes, one death
    ids = {
        "sum": app.enqueue("add", {"a": 2, "b": 3}),
        "sum2": app.enqueue("add", {"a": 4, "b": 5}),
        "dead": app.enqueue("boom", {"what": "the invoice"}),
    }
    worker = worker_process(app, APP, **ENV)
    try:
        wait_until(lambda: all(app.get(i).status.terminal for i in ids.values()), 30, "jobs ended")
    finally:
        kill_group(worker)

    # WHEN the sweeper's stream reader runs (twice: the second finds nothing new)
    archived = asyncio.run(sweep(app)).repaired["archive"]
    assert sorted(archived) == sorted(ids.values())
    objects = archive_objects(app)
    assert asyncio.run(sweep(app)).repaired["archive"] == [] and archive_objects(app) == objects
    # ... and a reader that starts over (a relay restarted: it reads the stream from its start) writes
    # the same objects, byte for byte, under the same keys
    again = asyncio.run(sweep(app, ArchiveReader(app.settings, app.arun)))
    assert sorted(again) == sorted(ids.values()) and archive_objects(app) == objects

    # THEN one object per day and type, laid out as the Athena table's location template says
    partitions = {KEY.fullmatch(key).group(1, 2) for key in objects}  # type: ignore[union-attr]
    assert {job_type for _, job_type in partitions} == {"add", "boom"} and len(objects) == 2
    ddl = records.athena_ddl("t", app.settings.payload_bucket, ["add", "boom"], "2026-01-01")
    template = re.search(r"'storage.location.template' = '([^']+)'", ddl).group(1)  # type: ignore[union-attr]
    for key in objects:
        day, job_type, _ = KEY.fullmatch(key).groups()  # type: ignore[union-attr]
        expected = template.replace("${day}", day).replace("${job_type}", job_type)
        assert f"s3://{app.settings.payload_bucket}/{key}".startswith(expected)
    # ... each job once, with Athena's columns, and the record whole
    by_id = {line["id"]: line for line in lines(objects)}
    assert sorted(by_id) == sorted(ids.values()) and len(lines(objects)) == 3
    assert by_id[ids["dead"]]["status"] == "dead" and by_id[ids["dead"]]["type"] == "boom"
    assert set(by_id[ids["sum"]]) == set(records.ATHENA_COLUMNS)

    # WHEN the table's TTL removes the records (deleted here as it deletes them)
    for job_id in ids.values():
        key = {"TableName": app.settings.table_name, "Key": {"id": av_s(job_id)}}
        app.run(one(Call("dynamodb", "delete_item", key)))

    # THEN jobs get still finds each one, from the archive, as it ended
    shown = cli_json(app, "jobs", "get", ids["sum"])
    assert (shown["status"], shown["result"], shown["type"]) == ("succeeded", 5, "add")
    dead = app.archive.get(ids["dead"])
    assert dead.status is JobStatus.DEAD and "the invoice" in (
        dead.last_error.message if dead.last_error else ""
    )
    gone = subprocess.run(
        [sys.executable, "-m", "sqsjobs", "jobs", "get", "never-was", "--app", APP],
        env=worker_env(app, **ENV),
        capture_output=True,
        timeout=60,
    )
    assert gone.returncode != 0 and b"live or archived" in gone.stderr


async def sweep(app, reader: ArchiveReader | None = None):
    """One sweep (or ``reader``'s pass alone) with the async clients of this loop, closed after."""
    try:
        return await (sweep_once(app) if reader is None else reader.sweep(app.clock.now()))
    finally:
        await app.aclose()


def cli_json(app, *argv: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "sqsjobs", *argv, "--app", APP, "--json"],
        env=worker_env(app, **ENV),
        capture_output=True,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)
