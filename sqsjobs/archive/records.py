"""What the archive writes: JSON Lines objects in S3 by date and type, and a pointer per job in the table.

A page of the table's change stream becomes, for each (finish date, job type) it holds, one
gzipped JSON Lines object::

    s3://<payload bucket>/archive/day=2026-11-30/job_type=reports.build/<first sequence number>.jsonl.gz

Its key is the page's own (the first stream record's sequence number in it), so a page read again
(a relay that failed, a Lambda batch retried) writes the same object again: an object holds each job
at most once. A batch the Lambda mapping bisects writes its halves under their own keys, so a job
may be in two objects: count distinct ids (docs/archive.md). Each line holds the columns Athena
reads (``ATHENA_COLUMNS``) and the record itself as DynamoDB JSON (``item``), from which ``jobs get``
rebuilds the job.

The pointer (``archived#<id>``: the object's reference, its status and finish) is how a job is found
by id once its record is gone: one small item per archived job, kept ``archive_days``, written 25 to a
BatchWriteItem. It has no ``type`` or ``status`` attribute, so listings skip it.
"""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from sqsjobs.job import JobStatus
from sqsjobs.store.codec import av_n, av_s, job_from_item, num_attr, str_attr
from sqsjobs.store.schema import TTL_ATTRIBUTE
from sqsjobs.transport.objects import ARCHIVE

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sqsjobs.job import Job
    from sqsjobs.store.codec import Item

#: A pointer's id prefix (job ids are hex or key-derived: they never start so).
POINTER_PREFIX = "archived#"
#: The columns of the Athena table (docs/archive.sql), in its order.
ATHENA_COLUMNS = (
    "id",
    "type",
    "queue",
    "status",
    "tenant",
    "attempt",
    "created_at",
    "started_at",
    "finished_at",
    "reason",
    "error_class",
    "tags",
    "item",
)


def ended(record: Mapping[str, Any]) -> Item | None:
    """The job a change-stream record shows entering an end state, or None (any other write)."""
    change = record.get("dynamodb", {})
    new, old = change.get("NewImage"), change.get("OldImage") or {}
    if not new or "type" not in new or "status" not in new or str(new["id"]["S"]).count("#"):
        return None  # a removal, or not a job (a control item: its id holds '#')
    status = str_attr(new, "status")
    if status is None or not JobStatus(status).terminal or str_attr(old, "status") == status:
        return None
    return dict(new)


def line(item: Item) -> dict[str, Any]:
    """One job's line: Athena's columns, and the record whole (``item``)."""
    job = job_from_item(item)
    return {
        "id": job.id,
        "type": job.type,
        "queue": job.queue,
        "status": job.status.value,
        "tenant": job.tenant,
        "attempt": job.attempt,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at or job.updated_at),
        "reason": job.reason,
        "error_class": job.last_error.error_class if job.last_error else None,
        "tags": dict(job.tags),
        "item": json.dumps(item, separators=(",", ":"), sort_keys=True),
    }


def _iso(when: datetime | None) -> str | None:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if when else None


def partition_of(item: Item) -> tuple[str, str]:
    """(the finish's UTC date, the job's type): where its line goes."""
    finished = num_attr(item, "finished_at") or num_attr(item, "updated_at") or 0.0
    return datetime.fromtimestamp(finished, UTC).strftime("%Y-%m-%d"), str(item["type"]["S"])


def object_key(date: str, job_type: str, sequence: str) -> str:
    """The key of one page's object for one partition (a type is URL-quoted: any character may be in it)."""
    return f"{ARCHIVE}day={date}/job_type={quote(job_type, safe='')}/{sequence}.jsonl.gz"


def body(items: Sequence[Item]) -> bytes:
    """The gzipped JSON Lines of ``items`` (``mtime=0``: a page written again is the same bytes)."""
    text = "".join(json.dumps(line(i), separators=(",", ":"), sort_keys=True) + "\n" for i in items)
    return gzip.compress(text.encode(), mtime=0)


def pointer_id(job_id: str) -> str:
    """The pointer item of ``job_id``."""
    return POINTER_PREFIX + job_id


def pointer(job_id: str, reference: str, item: Item, *, now: float, archive_days: int) -> Item:
    """The pointer to ``job_id``'s line, kept as long as the object is."""
    return {
        "id": av_s(pointer_id(job_id)),
        "ref": av_s(reference),
        "ended": item["status"],
        "archived_at": av_n(now),
        TTL_ATTRIBUTE: av_n(int(now + archive_days * 86_400)),
    }


def job_in(body: bytes, job_id: str) -> Job | None:
    """The job ``job_id`` as its archive object holds it, or None (not in it)."""
    for text in gzip.decompress(body).decode().splitlines():
        archived = json.loads(text)
        if archived.get("id") == job_id:
            return job_from_item(json.loads(archived["item"]))
    return None


#: The Athena table over the archive: its columns are ``line``'s, its partitions the keys' (``day``,
#: ``job_type``), projected (no crawler, no ``MSCK REPAIR``): ``athena_ddl`` fills in the bucket, the
#: App's job types and the first day.
ATHENA_TEMPLATE = """CREATE EXTERNAL TABLE IF NOT EXISTS {table} (
  id string,
  type string,
  queue string,
  status string,
  tenant string,
  attempt int,
  created_at timestamp,
  started_at timestamp,
  finished_at timestamp,
  reason string,
  error_class string,
  tags map<string,string>,
  item string
)
PARTITIONED BY (day string, job_type string)
ROW FORMAT SERDE 'org.openx.data.jsonserde.JsonSerDe'
LOCATION 's3://{bucket}/{prefix}'
TBLPROPERTIES (
  'projection.enabled' = 'true',
  'projection.day.type' = 'date',
  'projection.day.format' = 'yyyy-MM-dd',
  'projection.day.range' = '{first_day},NOW',
  'projection.day.interval' = '1',
  'projection.day.interval.unit' = 'DAYS',
  'projection.job_type.type' = 'enum',
  'projection.job_type.values' = '{job_types}',
  'storage.location.template' = 's3://{bucket}/{prefix}day=${{day}}/job_type=${{job_type}}/'
)"""


def athena_ddl(table: str, bucket: str, job_types: Sequence[str], first_day: str) -> str:
    """The ``CREATE EXTERNAL TABLE`` of the archive (``sqsjobs archive ddl`` prints it for an App)."""
    return ATHENA_TEMPLATE.format(
        table=table,
        bucket=bucket,
        prefix=ARCHIVE,
        first_day=first_day,
        job_types=",".join(quote(t, safe="") for t in sorted(job_types)),
    )
