"""What events need besides the table and queues: the table's change stream, and the bus.

``sqsjobs provision`` (and ``sqsjobs dev``) call ``ensure_flow``: the stream when the App names an
``event_bus`` or archives (``archive_days``: the archive reads the same stream), the bus for the
first; in AWS, infra/ creates both (and the Lambda that reads the stream).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs._aws import Call
from sqsjobs.errors import ConfigurationError, EventsError

if TYPE_CHECKING:
    from sqsjobs._aws import Flow
    from sqsjobs.config import Settings

#: What the stream records of each write: the catalogue compares the old state with the new.
STREAM_VIEW = "NEW_AND_OLD_IMAGES"


def ensure_flow(settings: Settings) -> Flow[list[str]]:
    """Turn the table's stream on and create the bus when missing; what it created."""
    if not settings.event_bus and settings.archive_days <= 0:
        return []
    created: list[str] = []
    table = settings.table_name
    described = yield Call("dynamodb", "describe_table", {"TableName": table})
    spec = described["Table"].get("StreamSpecification") or {}
    if not spec.get("StreamEnabled"):
        yield Call(
            "dynamodb",
            "update_table",
            {
                "TableName": table,
                "StreamSpecification": {"StreamEnabled": True, "StreamViewType": STREAM_VIEW},
            },
        )
        created.append(f"{table} change stream")
    elif spec.get("StreamViewType") != STREAM_VIEW:
        raise ConfigurationError(
            f"table {table} has a {spec.get('StreamViewType')} stream; events need {STREAM_VIEW}"
        )
    bus = settings.event_bus
    if bus and bus != "default" and not bus.startswith("arn:"):
        try:
            yield Call("events", "create_event_bus", {"Name": bus})
            created.append(f"event bus {bus}")
        except EventsError as exc:
            if exc.code != "ResourceAlreadyExistsException":
                raise
    return created
