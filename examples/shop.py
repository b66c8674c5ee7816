"""The example app of the README and ``make demo``: four job types, four fates."""

from __future__ import annotations

from pydantic import BaseModel

from sqsjobs import App, Backoff, JobContext, PermanentError, RetryPolicy

app = App("shop")


class Receipt(BaseModel):
    order_id: str
    email: str


class Charge(BaseModel):
    order_id: str
    cents: int


@app.job("receipts.send", queue="default", max_attempts=5, timeout=60)
def send_receipt(payload: Receipt, ctx: JobContext) -> dict[str, str]:
    """Succeeds at once."""
    ctx.logger.info("sending receipt", extra={"order_id": payload.order_id})
    return {"sent_to": payload.email}


@app.job(
    "inventory.sync", max_attempts=4, retry=RetryPolicy(backoff=Backoff.EXPONENTIAL, base_s=1.0, jitter=False)
)
async def sync_inventory(payload: dict[str, str], ctx: JobContext) -> str:
    """Fails on its first attempt (a flaky downstream), succeeds on the retry."""
    if ctx.attempt == 1:
        raise ConnectionError("warehouse API timed out")
    return f"synced on attempt {ctx.attempt}"


@app.job("payments.charge", max_attempts=5)
def charge(payload: Charge, ctx: JobContext) -> None:
    """Fails for good: retrying a declined card helps nobody, so it goes to the DLQ at once."""
    raise PermanentError(f"card declined for order {payload.order_id}")


@app.job("inventory.audit")
def audit_inventory(payload: dict[str, str], ctx: JobContext) -> str:
    """Runs on a schedule (EventBridge Scheduler in AWS, the local firing loop in ``sqsjobs dev``)."""
    return f"audited {payload.get('scope', 'all')}"


# One job per fire, however often Scheduler delivers it; `sqsjobs schedules apply` deploys it.
app.schedule(
    "inventory.audit-every-minute", rate="rate(1 minute)", job="inventory.audit", payload={"scope": "all"}
)


@app.job("reminders.send")
def send_reminder(payload: dict[str, str], ctx: JobContext) -> str:
    """Enqueued with a delay; runs only when due."""
    return f"reminded {payload['email']}"
