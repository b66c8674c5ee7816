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

import copy
import itertools
import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

if TYPE_CHECKING:
    from collections.abc import Container

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
        if queues:
            refused.append({"required": [member], "properties": {"queue": {"not": {"enum": sorted(queues)}}}})
        else:  # no queue takes it (an empty ``enum`` is no valid schema)
            refused.append({"required": [member]})
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
    title = schema.get("title")
    is_model = (
        isinstance(spec_type, type) and issubclass(spec_type, BaseModel) and title == spec_type.__name__
    )
    # A model payload becomes a component of its own, so every request naming it shares one class.
    if is_model and isinstance(title, str) and components.setdefault(title, schema) == schema:
        schema = {"$ref": f"#/components/schemas/{title}"}
    try:
        adapter.validate_python(None)
    except ValidationError:
        return schema, False
    return schema, True


def _branch_name(base: str, job_type: str, taken: Container[str]) -> str:
    """``EnqueueRequest`` + ``receipts.send`` -> ``EnqueueRequestReceiptsSend`` (a component name not ``taken``)."""
    words = "".join(w[:1].upper() + w[1:] for w in re.split(r"[^A-Za-z0-9]+", job_type) if w)
    name = f"{base}{words}"
    n = 2
    while name in taken:
        name, n = f"{base}{words}{n}", n + 1
    return name


def _per_type(
    name: str,
    schema: dict[str, Any],
    payloads: dict[str, tuple[dict[str, Any], bool]],
    components: dict[str, Any],
) -> dict[str, Any]:
    """``schema`` as a ``oneOf`` of one named object per job type, told apart by ``type``.

    Each branch is the whole request (every member, every exclusion) with ``type`` fixed to one
    name and ``payload`` that type's schema: a generated client gets one class per type whose
    payload is typed, where a ``type`` enum beside an untyped payload would accept any pairing.
    """
    branches: list[dict[str, Any]] = []
    mapping: dict[str, str] = {}
    for job_type, (shared, optional) in payloads.items():
        payload = copy.deepcopy(shared)
        branch = copy.deepcopy(schema)
        branch["title"] = f"{schema.get('title', name)} of {job_type}"
        branch["properties"]["type"] = {"type": "string", "const": job_type, "title": "Type"}
        if "$ref" not in payload:  # beside a $ref, a generator would copy the model rather than name it
            payload["description"] = schema["properties"]["payload"].get("description", "")
        branch["properties"]["payload"] = payload
        required = [m for m in branch.get("required", []) if m != "payload"]
        branch["required"] = required if optional else [*required, "payload"]
        branch_name = _branch_name(name, job_type, components)
        components[branch_name] = branch
        ref = f"#/components/schemas/{branch_name}"
        branches.append({"$ref": ref})
        mapping[job_type] = ref
    return {
        "title": schema.get("title", name),
        "description": schema.get("description", ""),
        "oneOf": branches,
        "discriminator": {"propertyName": "type", "mapping": mapping},
    }


def extend(document: dict[str, Any], registry: Registry, settings: Settings) -> None:
    """Write ``registry``'s types, payloads and queues, and the exclusions, into ``document``."""
    components: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    specs = sorted(registry, key=lambda s: s.name)
    names = [s.name for s in specs]
    queues = registry.queues()
    if "EnqueueRequest" in components:
        components["EnqueueRequest"].update(_exclusions(settings))
    # Each type's payload schema, made once for the three requests that name a job.
    payloads = {s.name: _payload_schema(s.payload_type, components) for s in specs}
    for name in _JOB_SCHEMAS:
        schema = components.get(name)
        if schema is None or not names:
            continue
        queue = schema["properties"].get("queue")
        if queue is not None:
            for option in queue.get("anyOf", [queue]):
                if option.get("type") == "string":
                    option["enum"] = queues
        components[name] = _per_type(name, schema, payloads, components)
    external = [s.name for s in specs if s.external]
    lease = components.get("LeaseRequest")
    if lease is not None and external:  # only external types are leased (docs/http-workers.md)
        _enum(lease["properties"]["types"], external)
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
        # job_ids (at least one) or type: written as "not neither", which JSON Schema reads as the
        # anyOf it is; a generator reads an anyOf of partial objects as a union it cannot build.
        priority["not"] = {
            "allOf": [
                {
                    "not": {
                        "required": ["job_ids"],
                        "properties": {"job_ids": {"type": "array", "minItems": 1}},
                    }
                },
                {"not": {"required": ["type"], "properties": {"type": {"type": "string"}}}},
            ]
        }
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
