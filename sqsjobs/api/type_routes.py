"""``GET /types``: the App's job types as its registry declares them, Python and external alike.

What a producer in another language needs to enqueue one (its name, queue and payload schema) and
what an HTTP worker needs to run one (``runs_in: http``: lease it with ``POST /leases``). Read from
the registry in memory: no AWS request.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field, TypeAdapter

from sqsjobs.api.deps import AppDep  # noqa: TC001 (FastAPI reads the annotations at runtime)

router = APIRouter(tags=["types"])


class JobTypeInfo(BaseModel):
    """One job type."""

    name: str
    queue: str
    runs_in: Literal["python", "http"] = Field(description="http: an external type, run by HTTP workers")
    max_attempts: int
    timeout_s: float | None = Field(description="None: the runtime's default")
    payload_version: int
    priority: str | None
    limits: list[str]
    pausable: bool
    expires_after_s: float | None
    payload_schema: dict[str, Any] = Field(description="The payload's JSON Schema")


class JobTypes(BaseModel):
    """``GET /types``: every type, by name."""

    types: list[JobTypeInfo]


def _schema(payload_type: Any) -> dict[str, Any]:
    try:
        schema: dict[str, Any] = TypeAdapter(payload_type).json_schema()
    except Exception:  # a type pydantic cannot describe: any JSON is what it says
        return {}
    return schema


@router.get("/types", response_model=JobTypes, summary="Every job type: Python and external (HTTP workers)")
async def list_types(app: AppDep) -> JobTypes:
    """Name, queue, where it runs, its options and its payload's JSON Schema, sorted by name."""
    return JobTypes(
        types=[
            JobTypeInfo(
                name=spec.name,
                queue=spec.queue,
                runs_in="http" if spec.external else "python",
                max_attempts=spec.max_attempts,
                timeout_s=spec.explicit_timeout_s,
                payload_version=spec.version,
                priority=spec.priority,
                limits=list(spec.limits),
                pausable=spec.pausable,
                expires_after_s=spec.expires_after_s,
                payload_schema=_schema(spec.payload_type),
            )
            for spec in sorted(app.registry, key=lambda s: s.name)
        ]
    )
