"""Wait tokens: a job waits for a human or a webhook; ``app.tokens.complete`` / ``fail`` answer it.

``ctx.create_token(timeout=)`` records the token as the step ``token-<n>`` (its id and timeout): the
id names the job (``<job id>.t<n>``), so an answer needs no index and no item of its own.
``ctx.wait_for_token(token)`` reads the answer (``tok:<n>`` on the record); without one it ends the
run like a sleep until the timeout — held in the record with its payload, so that an answer can wake
it — and the woken run raises ``TokenTimeout`` if nobody answered by then.

An answer is one conditional write (the job created the token; nobody answered yet), then a wake: a
job asleep on it is made due now and its hint sent. A second answer is accepted and changes nothing
(the first wins); an unknown token is ``TokenNotFound`` (404), one past its timeout ``TokenExpired``
(409).
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pydantic_core import to_jsonable_python

from sqsjobs._aws import Call, async_verb, one, sync_verb
from sqsjobs.errors import AwsError, TokenExpired, TokenNotFound
from sqsjobs.producer import route_of
from sqsjobs.runtime.kernel import Namespace
from sqsjobs.steps.records import ANSWER_PREFIX, answer, steps_of, wake
from sqsjobs.store import enqueue, requests
from sqsjobs.store.apply import Refused, apply
from sqsjobs.store.codec import canonical_json, job_from_item

if TYPE_CHECKING:
    from sqsjobs._aws import Flow
    from sqsjobs.config import Settings
    from sqsjobs.transport.queues import QueueUrls


class Tokens(Namespace):
    """``app.tokens``: answer a job's wait token (docs/steps.md)."""

    def _complete(
        self, token_id: str, value: Any = None, *, error: str | None = None, key: str | None = None
    ) -> Flow[str]:
        """Answer a job's wait token: ``"answered"`` or ``"already answered"`` (the first answer stands).

        ``error``: fail it instead (``fail``). ``key``: the token's answer key (its URL's), checked
        when given. ``TokenNotFound``; ``TokenExpired`` past its timeout.
        """
        k = self.kernel
        return answer_flow(k.settings, k.queue_urls, token_id, k.clock.now(), value, error, key=key)

    def _fail(self, token_id: str, error: str) -> Flow[str]:
        """Fail a job's wait token: its ``wait_for_token`` raises ``TokenFailed(error)`` in the job."""
        k = self.kernel
        return answer_flow(k.settings, k.queue_urls, token_id, k.clock.now(), error=error)

    complete, acomplete = sync_verb(_complete), async_verb(_complete)
    fail, afail = sync_verb(_fail), async_verb(_fail)


@dataclass(frozen=True)
class Token:
    """A wait token: hand ``id`` to whoever answers with credentials, or ``url(...)`` to whoever has none."""

    id: str
    #: Epoch seconds after which an answer is refused and the waiting job raises ``TokenTimeout``.
    timeout_at: float
    #: The token's answer key: 192 random bits kept in the job's record with the token, which the
    #: answer URL carries. None for a token made before keys existed (it has no URL).
    key: str | None = None

    @property
    def path(self) -> str:
        """``/tokens/<id>/answer?key=<key>``: POSTing the answer there needs no API token.

        The key is the credential: the path answers this token only, and only until its timeout.
        """
        if self.key is None:
            raise TokenNotFound(f"token {self.id!r} was made without an answer key: it has no URL")
        return f"/tokens/{quote(self.id, safe='')}/answer?key={quote(self.key, safe='')}"

    def url(self, api_url: str) -> str:
        """The answer URL on the API served at ``api_url`` (``https://jobs.example.com``)."""
        return api_url.rstrip("/") + self.path


def token_id(job_id: str, n: int) -> str:
    """The id of the job's ``n``-th token."""
    return f"{job_id}.t{n}"


def parse(token: str) -> tuple[str, int]:
    """(job id, n) of a token id; ``TokenNotFound`` when it is not one."""
    job_id, _, n = token.rpartition(".t")
    if not job_id or not n.isdigit():
        raise TokenNotFound(f"no such token: {token!r}")
    return job_id, int(n)


def answer_flow(
    settings: Settings,
    queue_urls: QueueUrls,
    token: str,
    now: float,
    value: Any = None,
    error: str | None = None,
    *,
    key: str | None = None,
) -> Flow[str]:
    """Answer ``token``: ``"answered"``, or ``"already answered"`` (the first answer stands).

    ``key``: the answer key of the token's URL (``Token.path``), for a caller without credentials;
    a wrong one reads as no such token, before anything about the token is told.
    """
    job_id, n = parse(token)
    read = requests.get(settings.table_name, job_id)
    item = (yield from one(Call("dynamodb", "get_item", read))).get("Item")
    created = steps_of(item or {}).get(f"token-{n}")
    kept = created.result if item is not None and created is not None else None
    made: dict[str, Any] | None = kept if isinstance(kept, dict) else None
    if key is not None and not (made is not None and _key_matches(made.get("key"), key)):
        # one answer for both: a URL's holder learns nothing of a token that is not its own
        raise TokenNotFound(f"no such token, or not its key: {token!r} (use the URL its job made)")
    if item is None or made is None:
        raise TokenNotFound(f"no such token: {token!r}")
    if f"{ANSWER_PREFIX}{n}" in item:
        return "already answered"
    if now > float(made["timeout_at"]):
        raise TokenExpired(f"token {token!r} timed out: job {job_id} stopped waiting for it")
    text = None if error is not None else canonical_json(to_jsonable_python(value))
    write = answer(settings.table_name, job_id, n, now=now, value=text, error=error)
    if isinstance((yield from apply(write)), Refused):
        return "already answered"  # a concurrent answer landed first
    # A job asleep on the token runs now; one still running (a refusal) reads the answer itself.
    woke = yield from apply(wake(settings.table_name, job_id, now))
    if isinstance(woke, Refused) or woke.attributes is None:
        return "answered"
    job = job_from_item(dict(woke.attributes))
    try:  # the held entry is due now: if SQS refuses this hint, the sweeper sends one
        body = enqueue.envelope_of(job).to_body()
        yield from queue_urls.send_flow(
            route_of(job), body, tenant=job.tenant, serialize_key=job.serialize_key, trace=job.trace
        )
    except AwsError:
        pass
    return "answered"


def _key_matches(kept: Any, given: str) -> bool:
    """Compared in constant time: how long a wrong key took tells nothing of the right one."""
    return isinstance(kept, str) and bool(kept) and hmac.compare_digest(kept.encode(), given.encode())


def answer_of(item: dict[str, Any], n: int) -> tuple[bool, Any, str | None]:
    """(answered, value, error message) of the ``n``-th token on a record."""
    av = item.get(f"{ANSWER_PREFIX}{n}")
    if av is None:
        return False, None, None
    m = av["M"]
    if "e" in m:
        return True, None, str(m["e"]["S"])
    return True, json.loads(m["v"]["S"]), None
