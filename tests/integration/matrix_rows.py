"""The stranding matrix's rows: one job of each feature, as every column enqueues them.

Shared by the columns of ``test_stranding_matrix.py`` (its docstring says what the matrix is). Each
job runs a type of ``tests/apps/stranding.py``, which appends ``<job id> <attempt>`` to the payload's
``runs`` file per run (and ``<job id>:<step>`` per call of a durable step's function), so a cell
counts runs whatever the workers believe.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING

from sqsjobs import Debounce, JobStatus, WhileActive
from sqsjobs.envelope import Fire
from sqsjobs.schedules.expressions import parse_instant
from sqsjobs.schedules.plugin import idempotency_key
from sqsjobs.store.codec import idempotent_job_id
from tests.integration.helpers import send_raw

if TYPE_CHECKING:
    from pathlib import Path

FEATURES = (
    "plain",
    "priority level",
    "serialized",
    "s3 payload",
    "batch item",
    "chain step",
    "transaction",
    "limited",
)
#: A batch handler's job, a job of two durable steps (the disturbance hits between them), one asleep
#: when it hits (``ctx.sleep``), and two dedup modes, ``unique="while_active"`` and ``debounce`` (its
#: window open when it hits; the key's later enqueue gives the payload that runs).
NEWEST = ("batch handler", "stepped", "asleep", "while_active", "debounced")
#: Jobs that reach the matrix another way: one waiting on a token when the disturbance hits (its run
#: ended until the answer comes; ``tests/apps/stranding.py``'s ``token.run``), a hook's job (an
#: ``on_succeeded`` hook enqueued by its ended job's finish), a schedule's fire (its message as
#: EventBridge Scheduler sends it, which a worker turns into the occurrence's job), and an outbox
#: row (committed in a Postgres transaction, moved by a relay process: ``outboxed``).
ARRIVING = ("token wait", "hook's job", "schedule fire", "outbox row")
#: Every row of the matrix: the features above, and those a flow-control feature gates or that
#: arrive from outside sqsjobs.
MATRIX_ROWS = (
    "plain",
    "chain step",
    "batch item",
    "serialized",
    "limited",
    "paused",
    "breaker-deferred",
    "priority level",
    "transaction",
    "s3 payload",
    "foreign message",
    *NEWEST,
    *ARRIVING,
)


def runs(path: Path) -> Counter[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(line.split()[0] for line in lines)


def one_of_each(app, log: Path, **extra: object) -> tuple[dict[str, str], str, str]:
    """One job per feature (its id), the batch's id and the chain's id."""
    p = {"runs": str(log), **extra}
    jobs = {
        "plain": app.enqueue("plain", p),
        "priority level": app.enqueue("work.run", p, priority="high"),
        "serialized": app.enqueue("device.run", p, serialize_key="k1"),
        "s3 payload": app.enqueue("plain", {**p, "blob": "x" * 4096}),
        "limited": app.enqueue("limited.run", p),
    }
    batch = app.batches.create("batch.done")
    jobs["batch item"] = batch.add("plain", p)
    batch.seal()
    chain_id = app.chains.start([("plain", p), ("plain", {"runs": str(log)})])
    jobs["chain step"] = app.chains.get(chain_id).steps[0].job_id
    with app.transaction() as tx:
        jobs["transaction"] = tx.enqueue("plain", p)
    assert set(jobs) == set(FEATURES)
    assert app.get(jobs["s3 payload"], load_result=False).payload_ref is not None  # claim-checked
    return jobs, batch.id, chain_id


def newest(
    app, log: Path, tag: str, *, options: dict[str, object] | None = None, **extra: object
) -> dict[str, str]:
    """One job of each of the rows in ``NEWEST`` but the asleep one (``fall_asleep``) and the
    debounced one (``debounce_first``); ``options`` go to each enqueue, ``extra`` into each payload."""
    p, o = {"runs": str(log), **extra}, options or {}
    return {
        "batch handler": app.enqueue("batched.run", p, **o),
        "stepped": app.enqueue("stepped.run", p, **o),
        "while_active": app.enqueue("plain", p, idempotency_key=f"wa-{tag}", dedupe=WhileActive(), **o),
    }


def fall_asleep(app, log: Path, nap_s: float, naps: int = 1, **options: object) -> str:
    """The asleep row's job: it takes its first step, sleeps ``naps`` times ``nap_s``, then its second.

    It is sent no first-attempt disturbance: a sleep gives its attempt back, so its woken run would
    meet it again.
    """
    return app.enqueue("stepped.run", {"runs": str(log), "nap_s": nap_s, "naps": naps}, **options)


def asleep_now(app, log: Path, job_id: str) -> bool:
    """The job took its first step and sleeps (queued until it wakes)."""
    return (
        steps_called(log, job_id) == (1, 0) and app.get(job_id, load_result=False).status is JobStatus.QUEUED
    )


def debounce_first(
    app, log: Path, tag: str, quiet_s: float, max_s: float | None = None, **options: object
) -> str:
    """A debounced job's first enqueue: its payload logs to a file no cell counts (``stale``)."""
    stale = {"runs": str(log.with_name("stale"))}
    mode = Debounce(quiet_s, max=max_s)
    return app.enqueue("plain", stale, idempotency_key=f"db-{tag}", dedupe=mode, **options)


def regather(
    app,
    log: Path,
    jobs: dict[str, str],
    tag: str,
    quiet_s: float,
    extra: dict | None = None,
    max_s: float | None = None,
    **options: object,
) -> None:
    """The keys enqueued again while their jobs wait: the same jobs, the debounced one's last payload.

    The last payload (``extra`` in it) logs to ``log``: a cell counts the debounced job's runs only
    if it ran that one.
    """
    last = {"runs": str(log), **(extra or {})}
    mode = Debounce(quiet_s, max=max_s)
    debounced = app.enqueue("plain", last, idempotency_key=f"db-{tag}", dedupe=mode, **options)
    assert (debounced, debounced.deduplicated) == (jobs["debounced"], True), "its window had closed"
    live = app.enqueue("plain", {"runs": str(log)}, idempotency_key=f"wa-{tag}", dedupe=WhileActive())
    assert (live, live.deduplicated) == (jobs["while_active"], True)


def keep_gathering(app, log: Path, jobs: dict[str, str], tag: str, quiet_s: float, times: int) -> None:
    """A burst: the debounced key enqueued ``times`` more, every quarter quiet period (the last payload wins).

    Each enqueue pushes the job's ``run_at`` on, so its bare hint, once a worker receives it, is
    re-armed (not yet due) again and again: a receive each time.
    """
    for _ in range(times):
        time.sleep(quiet_s / 4)  # the burst's pace: it is the disturbance, not a wait for a condition
        again = app.enqueue(
            "plain", {"runs": str(log)}, idempotency_key=f"db-{tag}", dedupe=Debounce(quiet_s)
        )
        assert (again, again.deduplicated) == (jobs["debounced"], True), "its window had closed"


def steps_called(log: Path, job_id: str) -> tuple[int, int]:
    """How often each of a stepped job's two steps called its function."""
    found = runs(log)
    return found[f"{job_id}:one"], found[f"{job_id}:two"]


#: The rows whose job takes two durable steps (the token's job waits between them), and what each cell expects of them: each step's
#: function called once, whatever befell the runs around it.
STEPPED = ("stepped", "asleep", "token wait")
ONCE_EACH = dict.fromkeys(STEPPED, (1, 1))


def step_calls(log: Path, jobs: dict[str, str]) -> dict[str, tuple[int, int]]:
    """How often each stepped row's job called each of its steps' functions."""
    return {f: steps_called(log, jobs[f]) for f in STEPPED}


def wait_on_token(app, log: Path, **options: object) -> str:
    """The token row's job: it takes its first step and waits on a token (answered by ``answer``)."""
    return app.enqueue("token.run", {"runs": str(log)}, **options)


def token_of(log: Path, job_id: str) -> str | None:
    """The id of the token the job waits on, once it handed it out."""
    path = log.with_name(f"{log.name}.{job_id}.token")
    return path.read_text() if path.exists() else None


def waiting_on_token(app, log: Path, job_id: str) -> bool:
    """The job took its first step, handed its token out, and waits (queued until the answer)."""
    return token_of(log, job_id) is not None and asleep_now(app, log, job_id)


def answer(app, log: Path, job_id: str) -> None:
    """The token's answer, as a person gives it (``app.tokens.complete``): the job wakes."""
    assert app.tokens.complete(str(token_of(log, job_id)), "go") == "answered"


def hooked(app, log: Path, job_type: str = "hooked.run", **hook: object) -> str:
    """An ended job's id, whose ``on_succeeded`` hook's job is the row (``hook``: that job's first attempt)."""
    return app.enqueue(job_type, {"runs": str(log), "hook": hook})


def hook_of(app, ended_id: str) -> str | None:
    """The hook's job of ``ended_id`` (its id derives from the finish's claim token: found by its parent)."""
    ddb = app.clients.boto3.get("dynamodb")
    params = {
        "TableName": app.settings.table_name,
        "FilterExpression": "parent_id = :p",
        "ExpressionAttributeValues": {":p": {"S": ended_id}},
        "ProjectionExpression": "id",
        "ConsistentRead": True,
    }
    found: list[str] = []
    while True:
        page = ddb.scan(**params)
        found += [item["id"]["S"] for item in page.get("Items", [])]
        if "LastEvaluatedKey" not in page:
            break
        params["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    assert len(found) <= 1, found  # one hook's job per transition
    return found[0] if found else None


#: The occurrence every fire of the matrix stands for (Scheduler substitutes it in the fire's input).
FIRE_AT = "2026-01-01T00:00:00Z"


def fire_body(log: Path, tag: str, job_type: str = "plain", **extra: object) -> str:
    """A schedule's fire, as EventBridge Scheduler sends it to the queue (the time substituted)."""
    return Fire(f"matrix-{tag}", FIRE_AT, job_type, {"runs": str(log), **extra}).to_body()


def fire(app, log: Path, tag: str, job_type: str = "plain", **extra: object) -> str:
    """Send a schedule's fire to the default queue: the id of the job a worker will turn it into."""
    send_raw(app, fire_body(log, tag, job_type, **extra))
    return idempotent_job_id(job_type, idempotency_key(f"matrix-{tag}", parse_instant(FIRE_AT)))


def outboxed(app, dsn: str, log: Path, *, options: dict[str, object] | None = None, **extra: object) -> str:
    """The outbox row's job: written in a committed Postgres transaction, for the relay to enqueue."""
    import psycopg

    with psycopg.connect(dsn) as conn, conn.transaction():
        job_id = app.enqueue("plain", {"runs": str(log), **extra}, connection=conn, **(options or {}))
    return str(job_id)


def relayed(dsn: str) -> bool:
    """The relay moved every committed row: the outbox table is empty."""
    import psycopg

    from sqsjobs.outbox.tables import count

    with psycopg.connect(dsn) as conn:
        return count(conn) == 0
