"""``POST /signals``: send a signal over HTTP (``app.signals.send``; docs/signals.md).

A webhook or another service tells the jobs that something happened: the jobs waiting for that
signal with equal key values wake with its data, and the jobs of a ``cancel_on`` type that match
are cancelled. Behind the API's guard like every route (a state-changing request: the operator
role). 422: data without one of the name's declared keys, or over ``MAX_DATA_BYTES``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, Field

from sqsjobs.api.deps import AppDep, problems

router = APIRouter(tags=["signals"])


class SignalBody(BaseModel):
    """The body of ``POST /signals``."""

    name: str = Field(min_length=1, max_length=200, description="The signal's name (``order.paid``)")
    data: Any = Field(default=None, description="Its data (JSON): what a waiting job's wait returns")


class SignalSentModel(BaseModel):
    """``POST /signals``: what the send did."""

    name: str
    answered: int = Field(description="Waiting jobs woken with the data")
    cancelled: int = Field(description="Jobs of a cancel_on type cancelled (or asked to stop)")


@router.post(
    "/signals",
    response_model=SignalSentModel,
    responses=problems(422),
    summary="Send a signal to the jobs waiting for it",
)
async def send_signal(app: AppDep, body: Annotated[SignalBody, Body()]) -> SignalSentModel:
    """Wake the jobs waiting for this signal with equal key values; cancel the matching ``cancel_on`` jobs."""
    sent = await app.signals.asend(body.name, body.data)
    return SignalSentModel(name=body.name, answered=len(sent.answered), cancelled=len(sent.cancelled))
