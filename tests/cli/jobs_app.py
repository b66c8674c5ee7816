"""The app the CLI tests load with ``--app tests.cli.jobs_app:current`` (a fixture sets ``current``).

A CLI run as a subprocess cannot see ``current``: it loads ``tests.cli.jobs_app:app``, the same job
types under a fixed name, pointed at a populated app's table with ``SQSJOBS_TABLE``.

Three job types on two queues: ``orders.ok`` succeeds, ``orders.flaky`` fails its first attempt,
``mail.send`` dies while ``BROKEN`` is set (a ValueError that exhausts its attempts, or a
PermanentError for addresses starting with ``perm``). ``register(app, strict=True)`` is the
"new deploy" whose mail payload model requires a subject, so old payloads no longer validate.
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel

from sqsjobs import App, JobContext, PermanentError, RetryPolicy
from sqsjobs.retry import Backoff

NO_WAIT = RetryPolicy(backoff=Backoff.FIXED, base_s=0, jitter=False)

current: App | None = None
BROKEN = {"mail": True}
#: Handler runs per job id (to prove a replayed job runs once more, not twice).
RUNS: Counter[str] = Counter()


class Order(BaseModel):
    order_id: str


class Mail(BaseModel):
    to: str


class MailV2(BaseModel):
    to: str
    subject: str


def ok(payload: Order, ctx: JobContext) -> dict[str, str]:
    RUNS[ctx.job_id] += 1
    return {"order": payload.order_id}


def flaky(payload: Order, ctx: JobContext) -> str:
    RUNS[ctx.job_id] += 1
    if ctx.attempt == 1:
        raise RuntimeError("transient glitch")
    return "second time lucky"


def send_mail(payload: Mail, ctx: JobContext) -> str:
    RUNS[ctx.job_id] += 1
    if BROKEN["mail"]:
        if payload.to.startswith("perm"):
            raise PermanentError(f"mailbox {payload.to} is gone")
        raise ValueError(f"smtp refused {payload.to}")
    return f"sent to {payload.to}"


def send_mail_v2(payload: MailV2, ctx: JobContext) -> str:
    RUNS[ctx.job_id] += 1
    return f"sent {payload.subject}"


def register(app: App, *, strict: bool = False) -> App:
    app.job("orders.ok", max_attempts=3)(ok)
    app.job("orders.flaky", max_attempts=3, retry=NO_WAIT)(flaky)
    app.job("mail.send", queue="mail", max_attempts=2, retry=NO_WAIT)(send_mail_v2 if strict else send_mail)
    return app


app = register(App("cli-subprocess"))
