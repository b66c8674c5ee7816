"""HTML of the dashboard: pure functions from the ops flows' dataclasses to escaped markup.

Every value that reaches a page goes through ``h`` (job payloads, reasons, errors and tracebacks
come from handlers and producers, so they are untrusted); only ``Html`` (markup built here) is
inserted as it is. The pages load one stylesheet and one script from ``/ui/static/`` and the
``Content-Security-Policy`` set by ``sqsjobs.api.dashboard`` forbids inline scripts, so a payload
that slipped past the escaping still could not run.
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from sqsjobs.api.auth import current_principal
from sqsjobs.api.principals import OPEN_ACCESS
from sqsjobs.job import JobStatus, Progress

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from sqsjobs.ops.inspect import JobRow
    from sqsjobs.ops.replay import ReplayItem, ReplaySummary
    from sqsjobs.ops.stats import Stats
    from sqsjobs.ops.worker_views import WorkerInfo


class Html(str):
    """Markup built by this module: inserted as it is, never escaped again."""

    __slots__ = ()


def h(value: object) -> Html:
    """``value`` as text in HTML (quotes too, so it is safe in attributes); ``Html`` is kept."""
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def join(parts: Iterable[object]) -> Html:
    """Concatenate, escaping what is not ``Html``."""
    return Html("".join(h(p) for p in parts))


def ago(ts: float | None, now: float) -> Html:
    """``12 s ago`` with the ISO time as a tooltip, or ``-``."""
    if ts is None:
        return Html("-")
    delta = now - ts
    span = abs(delta)
    text = (
        f"{span:.0f} s" if span < 120 else f"{span / 60:.0f} min" if span < 7200 else f"{span / 3600:.1f} h"
    )
    text = f"{text} ago" if delta >= 0 else f"in {text}"
    return Html(f'<time title="{h(datetime.fromtimestamp(ts, UTC).isoformat())}">{h(text)}</time>')


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return (
        f"{seconds:.0f} s"
        if seconds < 120
        else f"{seconds / 60:.0f} min"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h"
    )


#: Statuses with a colour: a job's, and a worker's (``sqsjobs.ops.worker_views``).
_BADGES = frozenset({s.value for s in JobStatus} | {"live", "draining", "silent"})


def status_badge(status: str) -> Html:
    """The status as a coloured label (the class name is one of ours, or ``unknown``)."""
    css = status if status in _BADGES else "unknown"
    return Html(f'<span class="status {css}">{h(status)}</span>')


def job_link(job_id: str) -> Html:
    """A link to the job's page."""
    return Html(f'<a class="job" href="/ui/jobs/{h(quote(job_id, safe=""))}">{h(job_id)}</a>')


def table(headers: Iterable[str], rows: Iterable[Iterable[object]], *, cls: str = "") -> Html:
    """A table; cells are escaped unless they are ``Html``."""
    head = join(Html(f"<th>{h(x)}</th>") for x in headers)
    body = join(Html("<tr>" + join(Html(f"<td>{h(c)}</td>") for c in row) + "</tr>") for row in rows)
    return Html(f'<table class="{h(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def page(title: str, body: Html, *, refresh_s: float | None = None, flash: str | None = None) -> Html:
    """A whole page. ``refresh_s`` makes dashboard.js re-fetch it and swap ``#live`` in place."""
    live = f' data-refresh-s="{h(refresh_s)}"' if refresh_s else ""
    note = Html(f'<p class="flash" role="status">{h(flash)}</p>') if flash else Html("")
    return Html(
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{h(title)} · sqsjobs</title>"
        '<link rel=stylesheet href="/ui/static/dashboard.css">'
        '<script src="/ui/static/dashboard.js" defer></script>'
        '<script src="/ui/static/job_live.js" defer></script></head>'
        f'<body><header><a href="/">sqsjobs</a> <span class="muted">{h(title)}</span>'
        '<nav><a href="/ui/jobs">jobs</a> <a href="/ui/charts">charts</a> <a href="/ui/dead">dead by error</a> <a href="/ui/controls">controls</a> <a href="/ui/schedules">schedules</a> <a href="/ui/priority">priority</a></nav>'
        '<span id="refresh-state" class="muted"></span>'
        f"{_signed_in()}</header>"
        f'<main id="live"{live}>{note}{body}</main></body></html>'
    )


def _signed_in() -> Html:
    """Who is signed in, and the sign-out button; nothing on an open (tokenless) API."""
    who = current_principal.get()
    if who is None or who is OPEN_ACCESS:
        return Html("")
    return Html(
        f'<form class="session" method=post action="/ui/logout"><span class="muted">{h(who.name)} '
        f'({h(who.role)})</span> <button type=submit id="sign-out">Sign out</button></form>'
    )


def section(title: str, body: Html, *, note: str = "", anchor: str = "") -> Html:
    """A titled panel with an optional line saying where its numbers come from."""
    ident = f' id="{h(anchor)}"' if anchor else ""
    small = Html(f'<p class="muted source">{h(note)}</p>') if note else Html("")
    return Html(f"<section{ident}><h2>{h(title)}</h2>{body}{small}</section>")


def queues_panel(stats: Stats, queue_of: Mapping[str, str]) -> Html:
    """Queue depths from SQS, and the oldest due job per queue from the capped record scan."""
    oldest: dict[str, float] = {}
    for t in stats.types:
        name = queue_of.get(t.type)
        if name is not None and t.oldest_due_s is not None:
            oldest[name] = max(oldest.get(name, 0.0), t.oldest_due_s)
    rows = []
    for q in stats.queues:
        dlq = Html(f'<span class="bad">{h(q.dlq)}</span>') if q.dlq else h(q.dlq)
        rows.append(
            [
                q.queue,
                q.visible
                if not q.levels
                else f"{q.visible} ({', '.join(f'{k} {n}' for k, n in q.levels.items())})",
                q.in_flight,
                q.delayed,
                dlq,
                _duration(oldest.get(q.queue)),
                q.error,
            ]
        )
    return section(
        "Queues",
        table(["queue", "waiting", "in flight", "delayed", "DLQ", "oldest due job", "error"], rows),
        note="Depths: SQS GetQueueAttributes (approximate on AWS). Oldest due job: the capped record scan below.",
        anchor="queues",
    )


def types_panel(stats: Stats, max_entries: int) -> Html:
    """Jobs by status per type: finished ones over the window, every unfinished one."""
    statuses = [s.value for s in JobStatus]
    rows = []
    for t in stats.types:
        cells: list[object] = [t.type]
        cells += [
            Html(f'<span class="n {s}">{t.counts.get(s, 0)}</span>') if t.counts.get(s) else "0"
            for s in statuses
        ]
        cells += [t.held, t.expired_leases, _duration(t.oldest_due_s)]
        rows.append(cells)
    capped = (
        f"capped: only the first {max_entries:,} records read, a sample of the table"
        if stats.truncated
        else f"all records read (the scan stops at {max_entries:,})"
    )
    window = f"{stats.window_s / 3600:g} h" if stats.window_s >= 3600 else f"{stats.window_s:.0f} s"
    return section(
        f"Jobs by type (finished in the last {window}, and every unfinished one)",
        table(["type", *statuses, "held", "expired leases", "oldest due"], rows, cls="counts"),
        note=f"One bounded DynamoDB Scan per refresh (sqsjobs.ops.stats); {capped}.",
        anchor="types",
    )


def dead_panel(rows: list[JobRow], errors: Mapping[str, Mapping[str, str]], now: float, more: bool) -> Html:
    """Dead jobs newest first, each with its reason, its last error and a retry button."""
    body = []
    for r in rows:
        err = errors.get(r.id) or {}
        error = f"{err.get('class', '')}: {err.get('message', '')}" if err else "-"
        retry = Html(
            f'<form method="post" action="/ui/jobs/{h(quote(r.id, safe=""))}/retry" class="inline">'
            '<button type="submit" class="retry">retry</button></form>'
        )
        body.append(
            [
                job_link(r.id),
                r.type,
                r.queue,
                Html(f'<span class="reason">{h(r.reason)}</span>'),
                Html(f'<span class="error">{h(error)}</span>'),
                ago(r.at, now),
                retry,
            ]
        )
    content = (
        table(["job", "type", "queue", "reason", "error", "died", ""], body, cls="dead")
        if rows
        else Html('<p class="muted">No dead jobs.</p>')
    )
    more_note = " More dead jobs exist: `sqsjobs jobs list --status dead` pages through them." if more else ""
    return section(
        "Dead jobs",
        content,
        note=f"The attention index's dead shards, newest first (cheap, whatever the table size).{more_note}",
        anchor="dead",
    )


def replay_form(types: list[str], queues: list[str]) -> Html:
    """Filters for a DLQ replay; submitting it only runs a dry run."""
    type_opts = join(Html(f'<option value="{h(t)}">{h(t)}</option>') for t in types)
    queue_opts = join(Html(f'<option value="{h(q)}">{h(q)}</option>') for q in queues)
    return section(
        "Replay dead-letter queues",
        Html(
            '<form method="post" action="/ui/replay/dry-run" class="replay">'
            f'<label>type <select name="type"><option value="">any</option>{type_opts}</select></label> '
            f'<label>queue <select name="queue"><option value="">all</option>{queue_opts}</select></label> '
            '<label>error class <input name="error_class" placeholder="e.g. ValueError" size=14></label> '
            '<label>dead since <input name="since" placeholder="e.g. 2h" size=6></label> '
            '<button type="submit" id="dry-run">Dry run…</button></form>'
        ),
        note="A dry run reads the DLQs and changes nothing; the next page lists what would be replayed and asks to confirm.",
        anchor="replay",
    )


def workers_panel(workers: list[WorkerInfo] | None, now: float, problem: str = "") -> Html:
    """Workers from the registry (``sqsjobs.ops.worker_views``), or why there are none to show."""
    if workers is None:
        return section(
            "Workers",
            Html(f'<p class="muted">{h(problem or "worker registry not available")}</p>'),
            anchor="workers",
        )
    rows = []
    for w in workers:
        more = w.running_count - len(w.running)
        running = join([*(job_link(j) for j in w.running), *([Html(f" +{more}")] if more > 0 else [])])
        drain = (
            Html(
                f'<form method="post" action="/ui/workers/{h(quote(w.id, safe=""))}/drain" class="inline">'
                f'<button type="submit" class="drain" data-worker="{h(w.id)}">drain</button></form>'
            )
            if w.status.value == "live"
            else Html("")
        )
        rows.append(
            [
                Html(f'<span class="worker" data-worker="{h(w.id)}">{h(w.id)}</span> {drain}'),
                w.host,
                w.pid,
                w.version,
                status_badge(w.status.value),
                ", ".join(w.queues),
                ", ".join(w.job_types),
                w.concurrency,
                ago(_ts(w.started_at), now),
                ago(_ts(w.last_seen), now),
                running,
            ]
        )
    content = (
        table(
            [
                "id",
                "host",
                "pid",
                "version",
                "status",
                "queues",
                "job types",
                "concurrency",
                "started",
                "last seen",
                "running",
            ],
            rows,
        )
        if rows
        else Html('<p class="muted">No worker has registered.</p>')
    )
    return section(
        "Workers", content, note="The worker registry (sqsjobs.ops.worker_views).", anchor="workers"
    )


def _ts(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value) if isinstance(value, int | float) else None


def replay_subject(item: ReplayItem) -> Html | str:
    """A replay row's job, or the DLQ message it could not read (the operator needs its id to act on it)."""
    return job_link(item.job_id) if item.job_id else f"message {item.message_id}"


def replay_confirm(summary: ReplaySummary, form: Mapping[str, str], limit: int) -> Html:
    """The dry run's outcome, and a form that replays exactly the jobs it listed."""
    would = [i for i in summary.items if i.outcome == "would_replay"]
    rows = [[replay_subject(i), i.job_type, i.queue, i.outcome, i.reason] for i in summary.items]
    listed = (
        table(["job", "type", "queue", "outcome", "reason"], rows)
        if rows
        else Html('<p class="muted">No message in the DLQs matches.</p>')
    )
    hidden = join(
        Html(f'<input type="hidden" name="{h(k)}" value="{h(v)}">') for k, v in form.items() if v
    ) + join(Html(f'<input type="hidden" name="job_id" value="{h(i.job_id)}">') for i in would if i.job_id)
    capped = f" (at most {limit} per replay)" if len(would) >= limit else ""
    confirm = (
        Html(
            '<form method="post" action="/ui/replay" class="confirm">'
            f'{hidden}<button type="submit" id="confirm-replay">Replay these {len(would)} job(s)</button> '
            '<a href="/">cancel</a></form>'
        )
        if would
        else Html('<p><a href="/">back</a></p>')
    )
    return section(
        f"Dry run: {len(would)} job(s) would be replayed{capped}",
        Html(listed + confirm),
        note=f"Nothing changed. Skipped messages stay in the DLQ with their reason; {summary.unmatched} did not match the filters.",
    )


def replay_result(summary: ReplaySummary) -> Html:
    """What a confirmed replay did."""
    counts = summary.to_dict()["counts"]
    rows = [[replay_subject(i), i.job_type, i.outcome, i.reason] for i in summary.items]
    text = ", ".join(f"{k} {v}" for k, v in counts.items())
    return section(
        f"Replayed {counts['replayed']} job(s)",
        Html(
            table(["job", "type", "outcome", "reason"], rows)
            + Html(f'<p>{h(text)}. <a href="/">back</a></p>')
        ),
    )


def progress_section(job_id: str, status: str, progress: Mapping[str, Any] | None) -> Html:
    """The job's last progress report, and (while it runs) the hook job_live.js follows it by.

    ``job_live.js`` opens ``GET /jobs/{id}/events`` (the session cookie rides on it: same origin)
    and moves the bar with each report as the lease renewal writes it.
    """
    report = progress or {}
    fraction = report.get("fraction")
    value = f' value="{h(fraction)}"' if isinstance(fraction, int | float) else ""
    summary = Progress.of({k: v for k, v in report.items() if k != "at"}).summary() if report else ""
    written = f"  (report {report.get('report')}, written {report.get('at')})" if report else "no report yet"
    line = summary + written
    events = ""
    if not JobStatus(status).terminal:
        url = f"/jobs/{quote(job_id, safe='')}/events"
        events = f'<div id="job-events" data-events="{h(url)}" hidden></div>'
    return section(
        "Progress",
        Html(
            f'<p>status <b id="job-live-status">{h(status)}</b></p>'
            f'<progress id="job-progress" max="1"{value} data-report="{h(report.get("report", 0))}"></progress> '
            f'<span id="job-progress-text">{h(line)}</span>{events}'
        ),
        note="ctx.progress, as the job's lease renewal wrote it; followed live while the job runs",
        anchor="progress",
    )


def no_history(data: Mapping[str, Any]) -> Html:
    """What the attempts panel says without history entries: a first attempt that succeeded keeps none."""
    if data["status"] == JobStatus.SUCCEEDED.value and data["attempt"] == 1:
        return Html(
            f'<p class="muted">Attempt 1 succeeded: started {h(data.get("started_at") or "-")}, finished '
            f"{h(data.get('finished_at') or '-')} (a first attempt that succeeds keeps no history entry).</p>"
        )
    if not data["attempt"]:
        return Html('<p class="muted">Not started yet.</p>')
    return Html('<p class="muted">No attempt recorded.</p>')


def job_page_body(data: Mapping[str, Any], now: float) -> Html:
    """A job's record: summary, last error, attempts, audit, payload and result, parent/root ids."""
    status = str(data["status"])
    summary_rows = [
        ["status", status_badge(status)],
        ["type", data["type"]],
        ["queue", data["queue"]],
        ["attempt", f"{data['attempt']}/{data['max_attempts'] if data['max_attempts'] is not None else '?'}"],
        ["reason", data.get("reason") or "-"],
    ]
    if flag := data.get("running_long"):  # the slow-run watch's flag (sqsjobs.slow_runs)
        summary_rows.append(
            [
                "running long",
                Html(
                    f'<span class="badge running-long">{h(flag["times_p95"])}x its type\'s p95</span> '
                    f"flagged {h(flag['at'])} after {h(flag['elapsed_s'])} s (p95 {h(flag['p95_s'])} s, "
                    f"factor {h(flag['factor'])})"
                ),
            ]
        )
    for key in ("created_at", "updated_at", "run_at", "started_at", "finished_at", "lease_expires"):
        summary_rows.append([key.replace("_", " "), data.get(key) or "-"])
    for key in ("lease_owner", "tenant", "idempotency_key", "parent_id", "root_id", "batch_id"):
        value = data.get(key)
        if value:
            summary_rows.append(
                [
                    key.replace("_", " "),
                    job_link(str(value)) if key.endswith(("parent_id", "root_id")) else value,
                ]
            )
    for name, value in sorted((data.get("tags") or {}).items()):  # each a search for its other jobs
        search = urlencode({"tag": f"{name}={value}"})
        summary_rows.append([f"tag {name}", Html(f'<a href="/ui/jobs?{h(search)}">{h(value)}</a>')])
    actions = Html("")
    if status in (JobStatus.DEAD.value, JobStatus.CANCELLED.value):
        actions = Html(
            f'<form method="post" action="/ui/jobs/{h(quote(str(data["id"]), safe=""))}/retry">'
            '<button type="submit" class="retry">retry this job</button></form>'
        )
    parts = [section(f"Job {data['id']}", Html(table(["", ""], summary_rows, cls="kv") + actions))]
    if data.get("progress") or not JobStatus(status).terminal:
        parts.append(progress_section(str(data["id"]), status, data.get("progress")))
    error = data.get("last_error")
    if error:
        parts.append(
            section(
                "Last error",
                Html(
                    f'<p class="error"><b>{h(error["class"])}</b>: {h(error["message"])}</p>'
                    f"<pre>{h(error.get('traceback') or '')}</pre>"
                ),
            )
        )
    history = [
        [
            x["attempt"],
            status_badge(str(x["outcome"])),
            x["started_at"],
            x["finished_at"],
            x["worker"],
            x["error"] or "",
        ]
        for x in data.get("history") or []
    ]
    parts.append(
        section(
            "Attempts",
            table(["attempt", "outcome", "started", "finished", "worker", "error"], history)
            if history
            else no_history(data),
        )
    )
    steps = [
        [
            x["name"],
            x["attempt"],
            x["started_at"],
            f"{x['duration_s']:g} s",
            x["result_ref"] or json.dumps(x["result"])[:80],
        ]
        for x in data.get("steps") or []
    ]
    if steps:
        parts.append(section("Steps", table(["step", "attempt", "started", "duration", "result"], steps)))
    audit = data.get("audit") or []
    if audit:
        keys = sorted({k for entry in audit for k in entry})
        parts.append(section("Audit", table(keys, [[entry.get(k, "") for k in keys] for entry in audit])))
    payload = json.dumps(data.get("payload"), indent=2, default=str)
    parts.append(
        section(
            "Payload",
            Html(f"<pre>{h(payload)}</pre>"),
            note=f"version {data.get('payload_version')}, {data.get('payload_size')} bytes"
            + (f", kept at {data['payload_ref']}" if data.get("payload_ref") else ""),
        )
    )
    if data.get("result") is not None or data.get("result_ref"):
        parts.append(
            section("Result", Html(f"<pre>{h(json.dumps(data.get('result'), indent=2, default=str))}</pre>"))
        )
    if data.get("batch_id"):
        batch = h(quote(str(data["batch_id"]), safe=""))
        parts.append(Html(f'<p>Item of batch <a href="/ui/batches/{batch}">{h(data["batch_id"])}</a>.</p>'))
    if data.get("chain"):
        chain = data["chain"]
        parts.append(
            Html(
                f"<p>Step {h(chain['step'])} of {h(chain['steps'])} of chain "
                f'<a href="/ui/chains/{h(quote(str(chain["id"]), safe=""))}">{h(chain["id"])}</a>.</p>'
            )
        )
    return join(parts)
