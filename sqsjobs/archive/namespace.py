"""``app.archive``: a job found by id once the table's TTL removed its record (its pointer, then its object)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs._aws import Call, async_verb, sync_verb
from sqsjobs.archive import records
from sqsjobs.errors import JobNotFound
from sqsjobs.runtime.kernel import Namespace
from sqsjobs.store.codec import av_s, str_attr
from sqsjobs.transport import objects

if TYPE_CHECKING:
    from sqsjobs._aws import Flow
    from sqsjobs.job import Job


class Archive(Namespace):
    """Archived jobs, by id (``app.archive.get``); ``jobs get`` and ``GET /jobs/{id}`` fall back to it."""

    def _get(self, job_id: str) -> Flow[Job]:
        """The job as archived: one GetItem (its pointer) and one S3 GET; ``JobNotFound`` if it is not archived."""
        return get_flow(self.kernel.settings.table_name, job_id)

    get, aget = sync_verb(_get), async_verb(_get)


def get_flow(table: str, job_id: str) -> Flow[Job]:
    """See ``Archive.get``."""
    key = {"TableName": table, "Key": {"id": av_s(records.pointer_id(job_id))}}
    answer = yield Call("dynamodb", "get_item", key)
    reference = str_attr(answer.get("Item") or {}, "ref")
    if reference is None:
        raise JobNotFound(f"no job with id {job_id!r}, live or archived")
    job = records.job_in((yield from objects.get_flow(reference)), job_id)
    if job is None:
        raise JobNotFound(f"job {job_id!r} is not in {reference}, which its pointer names")
    return job
