"""The relay: committed outbox rows become jobs, with the guarantees of ``App.enqueue``.

One pass, in one Postgres transaction::

    SELECT the oldest rows ... FOR UPDATE SKIP LOCKED      rows another relay holds are skipped
    pg_try_advisory_xact_lock per partition                one relay per partition at a time
    keep, per partition, the rows up to the first one      order per partition: never a row past
      this relay does not hold                               one that another relay still holds
    enqueue them (message, then record: App.enqueue_many)
    DELETE them; COMMIT

A row refused for good (``dead.refusal``: an unknown type, a payload the model rejects, a key taken
by another payload...) must not hold the outbox: when the batch's ``enqueue_many`` raises such a
refusal, the pass halves the batch and enqueues each half in id order, down to the refused rows,
which move to the dead table with their reason in the same transaction. The good rows still go in
batches, in their order; a half that failed may have sent some of its messages already, and enqueues
them again with the same keys, so the same job ids (as after a relay killed mid-pass). Any other
failure keeps every row of the pass for the next one.

A relay killed after the enqueue and before the commit leaves the rows (their locks die with its
connection); the next pass enqueues them again with the same idempotency key, so the same job ids:
the record's put finds the record there and the extra message meets the claim, which refuses a job
that runs or ran. Nothing committed is lost, nothing runs twice, and a rolled-back row never existed.

Idle, the relay sleeps on LISTEN (the table's insert trigger notifies at each commit) with a polling
fallback (``poll_s``), so a committed job waits one wake-up, not a poll interval. Its lag (the age of
the oldest row it found at a pass) is written as an EMF metric, like the worker's.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqsjobs.outbox.dead import SET_ASIDE, error_json, refusal
from sqsjobs.outbox.lag_metrics import LagMetrics
from sqsjobs.outbox.tables import CHANNEL, TABLE
from sqsjobs.producer import JobRequest

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Sequence

log = logging.getLogger("sqsjobs.outbox")

#: The first key of the relay's advisory locks (the second is the partition's hash): a constant
#: that no other user of ``pg_advisory_*`` in the same database is likely to pick.
LOCK_SPACE = 0x5153_4A42  # "QSJB"

_HEAD = f"""
SELECT id, job_id, partition, job_type, payload, options, created_at FROM {TABLE}
ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
"""
_LOCK = "SELECT pg_try_advisory_xact_lock(%(space)s, hashtext(%(partition)s))"
#: A plain read (no lock): it also sees the committed rows other relays hold, which bound our prefix.
_VISIBLE = (
    f"SELECT id, partition FROM {TABLE} WHERE partition = ANY(%(partitions)s) AND id <= %(last)s ORDER BY id"
)
_DELETE = f"DELETE FROM {TABLE} WHERE id = ANY(%(ids)s)"


@dataclass(frozen=True)
class Row:
    """One outbox row as the relay read it."""

    id: int
    partition: str
    job_type: str
    payload: Any
    options: dict[str, Any]
    created_at: datetime
    #: The id the write returned (what the dead table and the log name a set-aside row by).
    job_id: str = ""

    def request(self) -> JobRequest[Any]:
        """The enqueue this row stands for (the idempotency key makes its job id)."""
        o = self.options
        run_at = o.get("run_at")
        return JobRequest(
            self.job_type,
            self.payload,
            idempotency_key=o["idempotency_key"],
            run_at=datetime.fromtimestamp(run_at, UTC) if run_at is not None else None,
            queue=o.get("queue"),
            tenant=o.get("tenant"),
            parent_id=o.get("parent_id"),
            trace=o.get("trace"),
            # Counted from the write, not from the relay's pass: the row's wait uses the job's time. A
            # row that waited past it still becomes its job, which ends expired unrun (a deadline
            # that passed is no refusal: ``expires_after`` must be positive, so 1 ms at least).
            expires_after=max(o["expires_after_s"] - (time.time() - self.created_at.timestamp()), 0.001)
            if o.get("expires_after_s") is not None
            else None,
            priority=o.get("priority"),
            serialize_key=o.get("serialize_key"),
            tags=o.get("tags"),
        )


def in_order(held: Sequence[Row], visible: Sequence[tuple[int, str]], partitions: set[str]) -> list[Row]:
    """The rows this pass may move: per locked partition, its held rows before the first it does not hold.

    ``visible`` is every committed row of those partitions up to the last held id, in id order; a row
    in it that this pass does not hold is held by another relay (which will give it back): moving a
    later row of its partition first would break the partition's order.
    """
    mine = {r.id for r in held}
    blocked: set[str] = set()
    keep: set[int] = set()
    for row_id, partition in visible:
        if partition in blocked:
            continue
        if row_id in mine:
            keep.add(row_id)
        else:
            blocked.add(partition)
    return [r for r in held if r.partition in partitions and r.id in keep]


@dataclass
class OutboxRelay:
    """Moves committed outbox rows to SQS and DynamoDB; ``run`` until stopped, or ``move_once``.

    ``enqueue_many`` is ``App.enqueue_many`` (any callable with its contract: the requests in, their
    ids out, raising when the enqueue may not have happened).
    """

    dsn: str
    enqueue_many: Callable[[list[JobRequest[Any]]], list[str]]
    #: Rows per pass (one Postgres transaction; hints go to SQS ten to a request).
    batch_size: int = 100
    #: The polling fallback: a pass at least this often, notification or not.
    poll_s: float = 5.0
    metrics: LagMetrics = field(default_factory=lambda: LagMetrics("sqsjobs"))
    _conn: Any = None

    def _connection(self) -> Any:
        import psycopg  # the optional extra sqsjobs[postgres]

        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn)
        return self._conn

    def move_once(self) -> int:
        """One pass: the rows it may move are enqueued and deleted in one transaction.

        Returns how many rows left the outbox: moved, or set aside in the dead table.
        """
        conn = self._connection()
        with conn.transaction():
            rows = [self._row(r) for r in conn.execute(_HEAD, {"limit": self.batch_size}).fetchall()]
            now = time.time()
            self.metrics.lag(now - min(r.created_at.timestamp() for r in rows) if rows else 0.0)
            if not rows:
                return 0
            partitions = {
                p
                for p in sorted({r.partition for r in rows})
                if conn.execute(_LOCK, {"space": LOCK_SPACE, "partition": p}).fetchone()[0]
            }
            visible = conn.execute(
                _VISIBLE, {"partitions": sorted(partitions), "last": rows[-1].id}
            ).fetchall()
            moving = in_order(rows, [(v[0], v[1]) for v in visible], partitions)
            moved, refused = self._enqueue(moving) if moving else ([], [])
            if moved:
                conn.execute(_DELETE, {"ids": [r.id for r in moved]})
            for row, reason, exc in refused:
                conn.execute(SET_ASIDE, {"id": row.id, "reason": reason, "error": error_json(exc)})
        for row, reason, _ in refused:  # logged once committed: a rolled-back pass set nothing aside
            log.error(
                "outbox row %s (job %s, type %s) set aside, it cannot be enqueued: %s",
                row.id,
                row.job_id,
                row.job_type,
                reason,
                extra={
                    "outbox_id": row.id,
                    "job_id": row.job_id,
                    "job_type": row.job_type,
                    "partition": row.partition,
                    "reason": reason,
                },
            )
        self.metrics.moved(len(moved))
        if refused:
            self.metrics.dead(len(refused))
        return len(moved) + len(refused)

    def _enqueue(self, rows: list[Row]) -> tuple[list[Row], list[tuple[Row, str, BaseException]]]:
        """Enqueue ``rows`` in batches, in order; (the rows enqueued, the rows refused for good and why).

        Halves a batch that a permanent refusal failed, until the refused rows stand alone; raises
        any other failure (the pass then keeps every row).
        """
        try:
            self.enqueue_many([r.request() for r in rows])
        except Exception as exc:
            reason = refusal(exc)
            if reason is None:
                raise
            if len(rows) == 1:
                return [], [(rows[0], reason, exc)]
            half = len(rows) // 2
            first, first_refused = self._enqueue(rows[:half])
            second, second_refused = self._enqueue(rows[half:])
            return first + second, first_refused + second_refused
        return rows, []

    @staticmethod
    def _row(values: Sequence[Any]) -> Row:
        return Row(
            id=values[0],
            job_id=values[1],
            partition=values[2],
            job_type=values[3],
            payload=values[4],
            options=values[5],
            created_at=values[6],
        )

    def run(self, stop: threading.Event) -> None:
        """Move rows until ``stop`` is set: passes back to back while there is work, then LISTEN.

        A notification that arrives during a pass waits in the listening connection's queue, so the
        next wait returns at once: no commit is missed between a pass and the wait after it.
        """
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as listener:
            listener.execute(f"LISTEN {CHANNEL}")
            while not stop.is_set():
                try:
                    moved = self.move_once()
                except Exception:  # a broken connection or an AWS error: the rows stay, try again
                    log.exception("outbox relay pass failed; its rows stay for the next pass")
                    self.close()
                    stop.wait(min(self.poll_s, 1.0))
                    continue
                if moved:
                    continue
                self._wait(listener, stop)
        self.metrics.flush()
        self.close()

    def _wait(self, listener: Any, stop: threading.Event) -> None:
        """Until a notification, ``poll_s``, or ``stop`` (checked each second)."""
        deadline = time.monotonic() + self.poll_s
        while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
            if any(True for _ in listener.notifies(timeout=min(left, 1.0), stop_after=1)):
                return

    def close(self) -> None:
        """Close the relay's connection (the listening one closes with ``run``)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
