"""Who may call the API: named tokens with a role, read from the environment.

One shared token cannot say who pressed "replay", and cannot let someone look without letting them
change things. So each token has a name (written into the audit trail of every operator action) and
a role:

- ``viewer``: every safe request (GET, HEAD, OPTIONS): pages, lists, the OpenAPI document.
- ``operator``: everything, including enqueue, retry, replay, cancel, pause, drain and limits.

Where they come from (``tokens_from_env``), all of them together:

- ``SQSJOBS_API_TOKENS``: a JSON list, ``[{"name": "ops-alice", "role": "operator", "token": "..."}, ...]``
  (in ECS, one secret from Secrets Manager);
- ``SQSJOBS_API_TOKENS_FILE``: the path of a file holding the same JSON;
- ``SQSJOBS_API_TOKEN``: the single token of earlier releases, an operator named ``operator``.

A token is compared in constant time against every configured one (``hmac.compare_digest``), so
the time an answer takes does not tell how much of a guess was right, nor which token it was near.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from sqsjobs.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

#: The single operator token (kept from earlier releases).
TOKEN_ENV = "SQSJOBS_API_TOKEN"
#: A JSON list of named tokens with roles.
TOKENS_ENV = "SQSJOBS_API_TOKENS"
#: A file holding that JSON list.
TOKENS_FILE_ENV = "SQSJOBS_API_TOKENS_FILE"
#: The name the single ``SQSJOBS_API_TOKEN`` is known by in the audit trail.
SINGLE_TOKEN_NAME = "operator"
#: What the audit trail calls a caller when no token is configured (loopback, or IAM in front).
OPEN_ACCESS_NAME = "local"
#: Methods that change nothing: what a viewer may send.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Role(enum.StrEnum):
    """What a token may do."""

    VIEWER = "viewer"
    OPERATOR = "operator"


class ApiToken(BaseModel):
    """One configured token: the secret, who holds it, and what it may do."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Written into the audit trail and shown on the console; letters, digits and ``._@-``.
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._@-]{1,64}$")]
    role: Role
    #: At least 16 characters: a short token is guessable over the network.
    token: Annotated[str, StringConstraints(min_length=16, max_length=512, strip_whitespace=True)] = Field(
        repr=False
    )

    @property
    def fingerprint(self) -> str:
        """A short hash of the secret: a session remembers it, so a changed token ends its sessions."""
        return hashlib.sha256(self.token.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Principal:
    """The caller of one request, as far as the API can tell."""

    name: str
    role: Role
    #: A watch token's caller (``sqsjobs.api.watch``): it reads this one job, nothing else.
    job: str | None = None

    def may(self, method: str) -> bool:
        """True when this caller's role allows a request of ``method``."""
        return self.role is Role.OPERATOR or method.upper() in SAFE_METHODS


#: The caller of every request when no token is configured.
OPEN_ACCESS = Principal(OPEN_ACCESS_NAME, Role.OPERATOR)


class Tokens:
    """The configured tokens; empty means open access (loopback only, or IAM in front)."""

    def __init__(self, tokens: Sequence[ApiToken] = ()) -> None:
        names = [t.name for t in tokens]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"two API tokens share a name: {sorted(names)}")
        secrets = [t.token for t in tokens]
        if len(set(secrets)) != len(secrets):
            raise ConfigurationError("two API tokens are the same secret: give each holder their own")
        self._tokens = tuple(tokens)

    @classmethod
    def single(cls, token: str | None) -> Tokens:
        """The one operator token of ``SQSJOBS_API_TOKEN`` (or none)."""
        if token is None:
            return cls()
        if not token.strip():
            raise ValueError("the API token is empty; give a real token or none")
        return cls([ApiToken.model_construct(name=SINGLE_TOKEN_NAME, role=Role.OPERATOR, token=token)])

    def __bool__(self) -> bool:
        return bool(self._tokens)

    def __iter__(self) -> Iterator[ApiToken]:
        return iter(self._tokens)

    def match(self, given: str) -> ApiToken | None:
        """The token ``given`` is, compared in constant time against every one; None when none."""
        found = None
        for candidate in self._tokens:
            if hmac.compare_digest(given.encode(), candidate.token.encode()):
                found = candidate
        return found

    def named(self, name: str, fingerprint: str) -> ApiToken | None:
        """The token a session was signed in with, if it is still configured unchanged."""
        for candidate in self._tokens:
            if candidate.name == name and hmac.compare_digest(candidate.fingerprint, fingerprint):
                return candidate
        return None

    def session_secret(self) -> str:
        """The key sessions are signed with, derived from the tokens.

        Every process serving the same tokens (API containers, Lambda instances) signs alike with no
        secret to share; changing or removing any token signs everyone out.
        """
        material = "\0".join(sorted(f"{t.name}\0{t.role}\0{t.token}" for t in self._tokens))
        return hmac.new(b"sqsjobs console session", material.encode(), hashlib.sha256).hexdigest()


_LIST = TypeAdapter(list[ApiToken])


def parse_tokens(text: str, source: str) -> list[ApiToken]:
    """The tokens of a JSON list; ``ConfigurationError`` naming ``source`` and what is wrong."""
    try:
        return _LIST.validate_python(json.loads(text))
    except (ValueError, ValidationError) as exc:
        # Never echo the input: it holds secrets.
        detail = (
            "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_input=False))
            if isinstance(exc, ValidationError)
            else "not JSON"
        )
        raise ConfigurationError(
            f"{source} must be a JSON list of "
            '{"name": ..., "role": "viewer" | "operator", "token": "<16+ characters>"}: '
            f"{detail}"
        ) from None


def tokens_from_env(environ: Mapping[str, str] | None = None, *, single: bool = True) -> Tokens:
    """Every token the environment configures (``SQSJOBS_API_TOKENS``, ``..._FILE``, ``SQSJOBS_API_TOKEN``).

    ``single=False`` leaves ``SQSJOBS_API_TOKEN`` out, for a caller that read it already (a CLI option).
    """
    env = os.environ if environ is None else environ
    found: list[ApiToken] = []
    if raw := env.get(TOKENS_ENV, "").strip():
        found += parse_tokens(raw, TOKENS_ENV)
    if path := env.get(TOKENS_FILE_ENV, "").strip():
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigurationError(f"{TOKENS_FILE_ENV}: cannot read {path}: {exc.strerror}") from None
        found += parse_tokens(text, f"{TOKENS_FILE_ENV} ({path})")
    if single and (one := env.get(TOKEN_ENV, "").strip()):
        found += list(Tokens.single(one))
    return Tokens(found)
