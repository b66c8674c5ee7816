"""A job's timeline for its dashboard page: enqueued → due → each attempt's start and end → finished.

Drawn from the record alone (``ops.job_views.job_to_dict``, the page's one GetItem): the creation and
due times, the capped attempt history, and the record's own start and finish for the attempt the
history does not hold (the running one, or one that succeeded: the happy path writes no history).
Each step shows how long after the one before it came, so the queue wait (enqueued or due → first
start) and each run (start → end) read off directly; a running attempt shows its holder and lease.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqsjobs.api.dashboard_views import Html, h, section, status_badge, table

if TYPE_CHECKING:
    from collections.abc import Mapping


def _at(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _span(seconds: float) -> str:
    return (
        f"{seconds * 1000:.0f} ms"
        if seconds < 1
        else f"{seconds:.1f} s"
        if seconds < 120
        else f"{seconds / 60:.1f} min"
    )


def steps(data: Mapping[str, Any]) -> list[tuple[str, datetime, str]]:
    """``(what, when, detail)`` in time order."""
    out: list[tuple[str, datetime, str]] = []
    created, run_at = _at(data.get("created_at")), _at(data.get("run_at"))
    if created:
        out.append(("enqueued", created, ""))
    if run_at and created and run_at > created and not data.get("history"):
        out.append(("due", run_at, "delayed"))
    seen = set()
    for x in data.get("history") or []:
        seen.add(x["attempt"])
        if (begun := _at(x.get("started_at"))) is not None:
            out.append((f"attempt {x['attempt']} started", begun, x.get("worker") or ""))
        if (ended := _at(x.get("finished_at"))) is not None:
            out.append((f"attempt {x['attempt']} {x['outcome']}", ended, x.get("error") or ""))
    attempt, status = data.get("attempt") or 0, str(data.get("status"))
    begun, ended = _at(data.get("started_at")), _at(data.get("finished_at"))
    if attempt and attempt not in seen and begun is not None:
        holder = (
            f"held by {data.get('lease_owner')} until {data.get('lease_expires')}"
            if status == "running"
            else ""
        )
        out.append((f"attempt {attempt} started", begun, holder))
        if ended is not None and status != "running":
            out.append((f"attempt {attempt} {status}", ended, ""))
    elif ended is not None and status in ("cancelled", "expired") and (not out or out[-1][1] != ended):
        out.append((status, ended, data.get("reason") or ""))
    return sorted(out, key=lambda s: s[1])


def timeline_section(data: Mapping[str, Any]) -> Html:
    """The timeline as a table (step, time, after the previous step, detail), and the trace id."""
    rows = []
    previous: datetime | None = None
    for what, when, detail in steps(data):
        after = _span((when - previous).total_seconds()) if previous else ""
        rows.append(
            [
                Html(f'<span class="step">{h(what)}</span>'),
                when.isoformat(),
                Html(f'<span class="after">{h(after)}</span>'),
                detail,
            ]
        )
        previous = when
    trace = data.get("trace")
    note = f"trace {trace}" if trace else "no trace context recorded"
    body = (
        table(["step", "at", "after", ""], rows, cls="timeline")
        if rows
        else Html('<p class="muted">Nothing recorded yet.</p>')
    )
    return section(
        "Timeline",
        Html(body + Html(f'<p class="trace">status {status_badge(str(data.get("status")))} · {h(note)}</p>')),
        anchor="timeline",
    )
