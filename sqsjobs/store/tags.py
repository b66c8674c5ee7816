"""Tags: what a job is about (``tags={"customer": "42"}``), kept on its record and found by exact tag.

The record keeps the tags (``tags``, a map). Finding jobs by one of them takes an index, and
DynamoDB indexes one value per item, so each tag is one small item of its own beside the record::

    id = "tag#customer=42#<job id>"   tag = "customer=42"   tagged_at = <created_at>   expires_at

keyed in the sparse, keys-only ``tags`` index on (``tag``, ``tagged_at``): a query reads a tag's
jobs newest first, and the records are then read by id. Only tagged jobs pay: one tag item is one
write unit in the table and one in the index, written when the job is created (a job with no tags
writes nothing more). A tag item outlives its job's record (``expires_at``: the longest a job can
wait for its message, and the record's retention after that); a search skips the ids whose record
is gone.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sqsjobs.errors import TagsInvalid
from sqsjobs.store import batched
from sqsjobs.store.codec import av_n, av_s
from sqsjobs.store.schema import TAG, TAGGED_AT, TAGS_INDEX

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sqsjobs._aws import Flow
    from sqsjobs.config import Settings
    from sqsjobs.store.codec import Item
    from sqsjobs.store.enqueue import NewJob

PREFIX = "tag#"
#: A job's tags: at most this many (each is an item and an index entry: its cost is per tag).
MAX_TAGS = 10
#: A tag's name: a short identifier (no ``=``, so ``name=value`` reads back one way).
NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")
MAX_VALUE_CHARS = 256


def checked(tags: Mapping[str, Any] | None) -> dict[str, str] | None:
    """``tags`` as stored, or None when there are none.

    Raises:
        TagsInvalid: not a mapping of names to strings, more than ``MAX_TAGS``, a name outside
            ``NAME``, or a value empty, longer than ``MAX_VALUE_CHARS`` or holding a control character.
    """
    if tags is None or tags == {}:
        return None
    if not isinstance(tags, dict):
        raise TagsInvalid(f"tags must be an object of names to strings, got {type(tags).__name__}")
    if len(tags) > MAX_TAGS:
        raise TagsInvalid(f"a job takes at most {MAX_TAGS} tags, got {len(tags)}")
    for name, value in tags.items():
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise TagsInvalid(f"tag name {str(name)[:80]!r} must be 1 to 64 letters, digits or _.:/-")
        if not isinstance(value, str) or not 0 < len(value) <= MAX_VALUE_CHARS:
            raise TagsInvalid(f"tag {name!r} must be a string of 1 to {MAX_VALUE_CHARS} characters")
        if any(ord(c) < 32 for c in value):
            raise TagsInvalid(f"tag {name!r} holds a control character")
    return dict(tags)


def parse(text: str) -> tuple[str, str]:
    """``customer=42`` (a CLI argument, a query parameter) as (name, value).

    Raises:
        TagsInvalid: no ``=``, or a name or value ``checked`` refuses.
    """
    name, sep, value = text.partition("=")
    if not sep:
        raise TagsInvalid(f"a tag is name=value, got {text[:80]!r}")
    checked({name: value})
    return name, value


def inherited(parent: Mapping[str, str] | None, own: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """The tags of a job made under ``parent`` (a chain, a batch, a running job): both, its own winning."""
    if not parent:
        return own
    return {**parent, **(own or {})}


def tag_items(
    table: str, job_id: str, tags: Mapping[str, str], *, created_at: float, expires_at: float
) -> list[Item]:
    """One item per tag. Written again (the same job enqueued again), an item is the same item."""
    return [
        {
            "id": av_s(f"{PREFIX}{name}={value}#{job_id}"),
            TAG: av_s(f"{name}={value}"),
            TAGGED_AT: av_n(created_at),
            "expires_at": av_n(int(expires_at)),
        }
        for name, value in tags.items()
    ]


def write_jobs_flow(settings: Settings, jobs: Sequence[NewJob]) -> Flow[None]:
    """The tag items of ``jobs`` just written (an untagged job writes none), 25 to a request.

    Each lives as long as its job can: its due time, plus the message's retention, plus the record's.
    """
    keep_s = settings.message_retention_s + settings.longest_retention_s
    items = [
        item
        for job in jobs
        if job.tags
        for item in tag_items(
            settings.table_name,
            job.id,
            job.tags,
            created_at=job.now,
            expires_at=max(job.run_at, job.now) + keep_s,
        )
    ]
    if items:
        yield from batched.put_items(settings.table_name, items)


def query(
    table: str,
    name: str,
    value: str,
    *,
    limit: int,
    since: float | None = None,
    start_key: Item | None = None,
) -> dict[str, Any]:
    """A page of the ids of the jobs tagged ``name=value``, newest first (keys only).

    ``since``: only jobs enqueued at or after it (a condition on the index's sort key).
    """
    condition = "#tag = :tag" if since is None else f"#tag = :tag AND {TAGGED_AT} >= :since"
    values = {":tag": av_s(f"{name}={value}")} | ({} if since is None else {":since": av_n(since)})
    params: dict[str, Any] = {
        "TableName": table,
        "IndexName": TAGS_INDEX,
        "KeyConditionExpression": condition,
        "ExpressionAttributeNames": {"#tag": TAG},
        "ExpressionAttributeValues": values,
        "ScanIndexForward": False,
        "Limit": limit,
    }
    if start_key:
        params["ExclusiveStartKey"] = start_key
    return params


def job_ids(response: Mapping[str, Any]) -> list[str]:
    """The job ids of a ``query`` page, in its order."""
    return [item["id"]["S"].rpartition("#")[2] for item in response.get("Items", [])]
