"""``/tokens``: answer a job's wait token over HTTP (``app.tokens.complete`` / ``app.tokens.fail``; docs/steps.md).

A webhook or an approval page posts the answer; the waiting job wakes with it. ``POST
/tokens/{id}`` is behind the API's tokens like every route; ``POST /tokens/{id}/answer?key=`` is
the token's own URL (``Token.url``): its key is the credential, so service B answers service A's
job with no API token and no AWS credentials, and that URL answers that token only, until its
timeout (``open_router``, outside the guard). 404: no such token (or not its key); 409: its timeout
passed; a second answer is a 200 that changes nothing (``already answered``: the first stands).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query
from pydantic import BaseModel, Field

from sqsjobs.api.deps import AppDep, problems

router = APIRouter(tags=["tokens"])
#: The routes whose credential is in the URL itself: included without the API's guard.
open_router = APIRouter(tags=["tokens"])

TokenId = Annotated[str, Path(min_length=3, max_length=300, description="The token's id (``token.id``)")]


class TokenAnswer(BaseModel):
    """The body of ``POST /tokens/{token_id}``: a value, or an error that fails the token."""

    value: Any = Field(default=None, description="What the job's wait_for_token returns (JSON)")
    error: str | None = Field(default=None, description="Fail the token: the job's wait_for_token raises it")


class TokenAnswered(BaseModel):
    """``POST /tokens/{token_id}``."""

    id: str
    result: Literal["answered", "already answered"] = Field(
        description="answered: the job wakes with it; already answered: an earlier answer stands"
    )


@router.post(
    "/tokens/{token_id}",
    response_model=TokenAnswered,
    responses=problems(404, 409, 422),
    summary="Answer a job's wait token",
)
async def answer_token(token_id: TokenId, app: AppDep, body: Annotated[TokenAnswer, Body()]) -> TokenAnswered:
    """Complete (``value``) or fail (``error``) the token; the job waiting for it runs again at once."""
    result = await app.tokens.acomplete(token_id, body.value, error=body.error)
    return TokenAnswered(id=token_id, result=result)  # type: ignore[arg-type]


@open_router.post(
    "/tokens/{token_id}/answer",
    response_model=TokenAnswered,
    responses=problems(404, 409, 422),
    summary="Answer a job's wait token by its URL (no API token: the key is the credential)",
)
async def answer_token_by_url(
    token_id: TokenId,
    app: AppDep,
    key: Annotated[
        str, Query(min_length=16, max_length=128, description="The token's answer key, from its URL")
    ],
    body: Annotated[TokenAnswer, Body()],
) -> TokenAnswered:
    """Complete or fail the token its URL names; a wrong key is 404, as no such token is."""
    result = await app.tokens.acomplete(token_id, body.value, error=body.error, key=key)
    return TokenAnswered(id=token_id, result=result)  # type: ignore[arg-type]
