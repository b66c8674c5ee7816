"""The rules the server enforces, stated in the OpenAPI document where JSON Schema can state them.

The request models are the App's and every App's alike; what one App accepts depends on its
registry: which job types exist, what each one's payload is, which queues its handlers use. Written
into the document once, as FastAPI writes it (``extend``), so a client generated from it (or a
property-based tester) sends what this server takes: ``type`` an enum of the registered types, and
a ``oneOf`` branch per type pairing it with its handler's payload schema (the discriminator);
``queue`` an enum of the handlers' queues; and the dedup and start options that exclude each
other as a ``not`` (two modes, ``delay`` with ``run_at``, a mode without its key, ``debounce_max``
without ``debounce``).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.registry import Registry

#: The request schemas that name a job (type, payload, queue): one job, a chain's step, a batch's item.
_JOB_SCHEMAS = ("EnqueueRequest", "JobSpec", "BatchItem")
_MODES = ("unique", "dedupe_for", "throttle", "debounce")
#: ``since`` (``sqsjobs.api.models.since_seconds``): a duration (``90``, ``15m``, ``2h``, ``7d``, ``1w``,
#: as ``parse_duration`` reads it), or an instant with its time zone.
SINCE = {"anyOf": [{"pattern": r"^\s*\d+(\.\d+)?\s*[smhdwSMHDW]?\s*$"}, {"format": "date-time"}]}
#: Other request members that name a registered job type: ``(schema, member)``.
_TYPE_MEMBERS = (("BatchRequest", "on_complete"), ("BulkCancelRequest", "type"), ("PriorityRequest", "type"))


def _exclusions(settings: Settings) -> dict[str, Any]:
    """``EnqueueRequest``'s members that exclude or need each other, as one ``not``.

    A ``serialize_key`` or a ``priority`` needs a queue that takes it (``serialized_queues``,
    ``priority_queues``): stated as needing ``queue``, naming one of those.
    """
    refused: list[dict[str, Any]] = [{"required": [a, b]} for a, b in itertools.combinations(_MODES, 2)]
    for member, queues in (
        ("serialize_key", settings.serialized_queues),
        ("priority", settings.priority_queues),
    ):
        refused.append({"required": [member], "properties": {"queue": {"not": {"enum": sorted(queues)}}}})
    refused.append({"required": ["delay", "run_at"]})
    refused.append({"required": ["debounce_max"], "not": {"required": ["debounce"]}})
    refused.extend({"required": [mode], "not": {"required": ["idempotency_key"]}} for mode in _MODES)
    return {"not": {"anyOf": refused}}


def _payload_schema(spec_type: Any, components: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The payload's JSON Schema (its models moved into ``components``), and whether it may be left out."""
    adapter: TypeAdapter[Any] = TypeAdapter(spec_type)
    schema = adapter.json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in schema.pop("$defs", {}).items():
        components.setdefault(name, definition)
    try:
        adapter.validate_python(None)
    except ValidationError:
        return schema, False
    return schema, True


def extend(document: dict[str, Any], registry: Registry, settings: Settings) -> None:
    """Write ``registry``'s types, payloads and queues, and the exclusions, into ``document``."""
    components: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    specs = sorted(registry, key=lambda s: s.name)
    names = [s.name for s in specs]
    queues = registry.queues()
    branches = []
    for spec in specs:
        payload, optional = _payload_schema(spec.payload_type, components)
        branch: dict[str, Any] = {"properties": {"type": {"const": spec.name}, "payload": payload}}
        if not optional:
            branch["required"] = ["type", "payload"]
        branches.append(branch)
    for name in _JOB_SCHEMAS:
        schema = components.get(name)
        if schema is None or not names:
            continue
        schema["properties"]["type"]["enum"] = names
        queue = schema["properties"].get("queue")
        if queue is not None:
            for option in queue.get("anyOf", [queue]):
                if option.get("type") == "string":
                    option["enum"] = queues
        schema["oneOf"] = branches
    if "EnqueueRequest" in components:
        components["EnqueueRequest"].update(_exclusions(settings))
    if not names:
        return
    for name, member in _TYPE_MEMBERS:
        schema = components.get(name)
        if schema is not None:
            _enum(schema["properties"][member], names)
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", ()):
                if parameter.get("name") in ("job_type", "type"):
                    _enum(parameter["schema"], names)
                elif parameter.get("name") == "queue" and parameter.get("in") == "query":
                    _enum(parameter["schema"], queues)
                elif parameter.get("name") == "since":
                    for option in parameter["schema"].get("anyOf", [parameter["schema"]]):
                        if option.get("type") == "string":
                            option.update(SINCE)
    _selections(components)


def _selections(components: dict[str, Any]) -> None:
    """Requests that must name the jobs they act on: ``POST /jobs/priority``, a replay's payload."""
    priority = components.get("PriorityRequest")
    if priority is not None:
        priority["anyOf"] = [
            {"required": ["job_ids"], "properties": {"job_ids": {"type": "array", "minItems": 1}}},
            {"required": ["type"], "properties": {"type": {"type": "string"}}},
        ]
    replay = components.get("ReplayRequest")
    if replay is not None:
        for option in replay["properties"]["since"].get("anyOf", []):
            if option.get("type") == "string":
                option.update(SINCE)
    if replay is not None:  # a corrected payload needs job_id or type to say whose it is
        replay["not"] = {
            "required": ["payload"],
            "properties": {"job_id": {"maxItems": 0}, "type": {"maxItems": 0}},
        }


def _enum(schema: dict[str, Any], names: list[str]) -> None:
    """Restrict a string (or an array of strings, or either of them or null) to ``names``."""
    for option in schema.get("anyOf", [schema]):
        if option.get("type") == "string":
            option["enum"] = names
        elif option.get("type") == "array" and option.get("items", {}).get("type") == "string":
            option["items"]["enum"] = names
