"""``/tokens``: answer a job's wait token over HTTP (``app.tokens.complete`` / ``app.tokens.fail``; docs/steps.md).

A webhook or an approval page posts the answer; the waiting job wakes with it. Behind the API's one
token like every route. 404: no such token; 409: its timeout passed; a second answer is a 200 that
changes nothing (``already answered``: the first stands).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path
from pydantic import BaseModel, Field

from sqsjobs.api.deps import AppDep, problems

router = APIRouter(tags=["tokens"])

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
