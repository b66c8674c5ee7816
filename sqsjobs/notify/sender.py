"""The delivery job's handler: tell one target that a job ended (``sqsjobs.notify``, registered by every App).

- a webhook (``Notify(url=, secret=)``): an HTTP POST of the event as JSON, signed per the Standard
  Webhooks spec (``webhook-id``: the delivery's job id, the same on every retry; ``webhook-timestamp``;
  ``webhook-signature``, made by the ``standardwebhooks`` package with the secret configured under
  the target's name: ``SQSJOBS_WEBHOOK_SECRET_<NAME>``, the secret itself or the ARN of a Secrets
  Manager secret holding it). Only ``address_guard``'s addresses are reached, redirects included.
  A 2xx is delivered; 408, 429 and 5xx (or no answer) are retried; any other answer is final;
- an SQS queue (``Notify(queue=)``): one message, the event as its body;
- an EventBridge bus (``Notify(bus=)``): one event, source ``sqsjobs``, detail type ``job.<status>``.

A delivery is an ordinary job: retried with backoff (``DELIVERY_RETRY``) up to ``DELIVERY_ATTEMPTS``,
then dead, its message in the DLQ with the last error, where ``sqsjobs dlq list``, the API and the
console show it as a dead ``sqsjobs.notify`` job (replayable once the receiver is back).
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from sqsjobs._aws import Call, one
from sqsjobs.errors import AwsError, DeliveryFailed, PermanentError
from sqsjobs.job import Notify
from sqsjobs.notify.plugin import DELIVERY_TYPE
from sqsjobs.registry import HandlerSpec
from sqsjobs.retry import RetryPolicy

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqsjobs.context import JobContext
    from sqsjobs.runtime.kernel import Kernel

#: How often a delivery is tried, and its backoff: about 2 s, 4 s, ... capped at 5 minutes, ~20 minutes in all.
DELIVERY_ATTEMPTS = 8
DELIVERY_RETRY = RetryPolicy(base_s=2.0, max_delay_s=300.0)
#: A webhook's answer must come within this (a receiver that takes longer should queue and answer).
WEBHOOK_TIMEOUT_S = 15.0
MAX_REDIRECTS = 3
#: Where a target's signing secret is configured: the secret, or a Secrets Manager ARN holding it.
SECRET_ENV_PREFIX = "SQSJOBS_WEBHOOK_SECRET_"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_RETRIED = frozenset({408, 429})


def secret_env(name: str) -> str:
    """The environment variable that holds the signing secret named ``name``."""
    return SECRET_ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


class Sender:
    """Delivers notifications for one App (its kernel read at each delivery)."""

    def __init__(self, kernel: Callable[[], Kernel]) -> None:
        self._kernel = kernel
        self._secrets: dict[str, str] = {}

    async def __call__(self, payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        """Deliver ``payload["event"]`` to ``payload["target"]``; what the target answered."""
        target = Notify.of(payload["target"])
        body = json.dumps(payload["event"], separators=(",", ":"))
        if target.url is not None:
            return await self._webhook(target, body, ctx.job_id)
        kernel = self._kernel()
        try:
            if target.queue is not None:
                sent = await kernel.arun(
                    one(Call("sqs", "send_message", {"QueueUrl": target.queue, "MessageBody": body}))
                )
                return {"queue": target.queue, "message_id": sent.get("MessageId")}
            event = payload["event"]
            entry = {
                "EventBusName": target.bus,
                "Source": "sqsjobs",
                "DetailType": event["type"],
                "Detail": body,
            }
            put = await kernel.arun(one(Call("events", "put_events", {"Entries": [entry]})))
        except AwsError as exc:
            raise DeliveryFailed(str(exc)) from exc
        if put.get("FailedEntryCount"):
            raise DeliveryFailed(f"EventBridge refused the event: {put.get('Entries')}")
        return {"bus": target.bus}

    async def _webhook(self, target: Notify, body: str, delivery_id: str) -> dict[str, Any]:
        import aiohttp  # imported by the worker's own clients; a producer never loads it here

        from sqsjobs.notify.address_guard import AddressGuard, GuardedResolver

        kernel = self._kernel()
        guard = AddressGuard(kernel.settings.webhook_allow)
        headers = {"content-type": "application/json", "user-agent": "sqsjobs-webhooks/1"}
        headers |= await self._signature(target, body, delivery_id)
        url = str(target.url)
        connector = aiohttp.TCPConnector(resolver=GuardedResolver(guard), force_close=True)
        timeout = aiohttp.ClientTimeout(total=WEBHOOK_TIMEOUT_S)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session:
            for _ in range(MAX_REDIRECTS + 1):
                await guard.check_url(url)
                try:
                    async with session.post(url, data=body, headers=headers, allow_redirects=False) as answer:
                        status, location = answer.status, answer.headers.get("location")
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    raise DeliveryFailed(f"webhook {url[:200]} did not answer: {exc}") from exc
                if status in _REDIRECTS and location:
                    url = urljoin(url, location)
                    continue
                if 200 <= status < 300:
                    return {"url": url, "status": status}
                if status in _RETRIED or status >= 500:
                    raise DeliveryFailed(f"webhook {url[:200]} answered {status}")
                raise PermanentError(f"webhook {url[:200]} answered {status}: not retried")
        raise PermanentError(f"webhook {str(target.url)[:200]} redirected more than {MAX_REDIRECTS} times")

    async def _signature(self, target: Notify, body: str, delivery_id: str) -> dict[str, str]:
        """The Standard Webhooks headers; unsigned (no ``webhook-signature``) for a target without a secret."""
        now = datetime.now(UTC)
        headers = {"webhook-id": delivery_id, "webhook-timestamp": str(int(now.timestamp()))}
        if target.secret is None:
            return headers
        from standardwebhooks import Webhook

        headers["webhook-signature"] = Webhook(await self._secret(target.secret)).sign(delivery_id, now, body)
        return headers

    async def _secret(self, name: str) -> str:
        """The signing secret named ``name``: its variable's value, or the Secrets Manager secret it names."""
        if name not in self._secrets:
            value = os.environ.get(secret_env(name), "")
            if not value:
                raise PermanentError(f"no webhook secret named {name!r}: set {secret_env(name)}")
            if value.startswith("arn:aws:secretsmanager:"):
                answer = await self._kernel().arun(
                    one(Call("secretsmanager", "get_secret_value", {"SecretId": value}))
                )
                value = str(answer["SecretString"])
            self._secrets[name] = value
        return self._secrets[name]


def delivery_spec(kernel: Callable[[], Kernel]) -> HandlerSpec:
    """The ``sqsjobs.notify`` job type of an App whose kernel ``kernel`` reads."""
    sender = Sender(kernel)

    async def deliver(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        return await sender(payload, ctx)

    return HandlerSpec(
        name=DELIVERY_TYPE,
        fn=deliver,
        max_attempts=DELIVERY_ATTEMPTS,
        retry=DELIVERY_RETRY,
        payload_type=dict[str, Any],
    )
