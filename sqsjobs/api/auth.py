"""The bearer token: ``Authorization: Bearer <token>``, compared in constant time.

One dependency guards every route of the API, the OpenAPI document, the interactive docs and every
router added with ``create_app(extra_routers=...)``. Without a configured token it checks nothing:
then ``sqsjobs api`` listens on a loopback address only (``sqsjobs.cli.api``), and in AWS the API
Gateway in front of the function authorises each request with IAM (infra/).
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

#: Environment variable the CLI and the Lambda handler read the token from.
TOKEN_ENV = "SQSJOBS_API_TOKEN"
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="sqsjobs"'}
# auto_error=False: a missing header is answered here, as a problem body, not by FastAPI's 403.
_bearer = HTTPBearer(auto_error=False, description="The token given to `sqsjobs api` (SQSJOBS_API_TOKEN)")


def require_token(token: str | None) -> Callable[..., Awaitable[None]]:
    """The dependency that admits a request carrying ``token``; with ``None``, every request.

    The comparison is ``hmac.compare_digest`` on the UTF-8 bytes, so how long it takes does not tell
    how much of a guess was right. Refused requests get 401 with a ``WWW-Authenticate`` challenge.
    """
    if token is None:

        async def open_access() -> None:
            return None

        return open_access
    if not token.strip():
        raise ValueError("the API token is empty; give a real token or none")
    expected = token.encode()

    async def bearer(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        if credentials is None:
            raise HTTPException(401, "send Authorization: Bearer <token>", headers=_CHALLENGE)
        if not hmac.compare_digest(credentials.credentials.encode(), expected):
            raise HTTPException(401, "the bearer token is not the one configured", headers=_CHALLENGE)

    return bearer
