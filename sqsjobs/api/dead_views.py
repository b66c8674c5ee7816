"""HTML of the dashboard's ``/ui/dead`` pages: dead jobs by error signature, a group's dry run, its retry.

Rendered like the rest of the dashboard (``dashboard_views``): every value escaped with ``h``, no
inline script or style. The numbers are ``sqsjobs.ops.dead_groups``'s, the same as ``GET /dead/groups``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqsjobs.api.dashboard_views import Html, ago, h, job_link, join, section, table

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqsjobs.ops.dead_groups import DeadGroups


def groups_body(found: DeadGroups, now: float) -> Html:
    """Each group with its count, first and last seen, job types, an example, and a dry-run button."""
    rows = []
    for g in found.groups:
        dry = Html(
            '<form method="post" action="/ui/dead/dry-run" class="inline">'
            f'<input type="hidden" name="signature" value="{h(g.signature)}">'
            '<button type="submit" class="retry">retry group…</button></form>'
        )
        rows.append(
            [
                Html(f'<span class="error sig">{h(g.signature)}</span>'),
                Html(f'<span class="n dead count">{h(g.count)}</span>'),
                ago(g.first_seen, now),
                ago(g.last_seen, now),
                ", ".join(sorted(g.types)),
                Html(f'<span class="error">{h(g.example)}</span>'),
                dry,
            ]
        )
    content = (
        table(["signature", "jobs", "first died", "last died", "types", "example", ""], rows, cls="groups")
        if rows
        else Html('<p class="muted">No dead jobs.</p>')
    )
    capped = " Only the newest were read: more jobs are dead." if found.truncated else ""
    return section(
        f"Dead jobs by error: {found.jobs} job(s) in {len(found.groups)} group(s)",
        content,
        note="The attention index's dead shards, newest first, and their last errors; a signature is the "
        f"error class and its message with ids, numbers, addresses and URLs taken out.{capped}",
        anchor="groups",
    )


def group_confirm(sig: str, job_ids: list[str]) -> Html:
    """The dry run of a group retry, and a form that retries exactly the jobs it listed."""
    listed = (
        table(["job"], [[job_link(i)] for i in job_ids])
        if job_ids
        else Html('<p class="muted">No dead job has this signature now.</p>')
    )
    hidden = Html(f'<input type="hidden" name="signature" value="{h(sig)}">') + join(
        Html(f'<input type="hidden" name="job_id" value="{h(i)}">') for i in job_ids
    )
    confirm = (
        Html(
            '<form method="post" action="/ui/dead/retry" class="confirm">'
            f'{hidden}<button type="submit" id="confirm-group">Retry these {len(job_ids)} job(s)</button> '
            '<a href="/ui/dead">cancel</a></form>'
        )
        if job_ids
        else Html('<p><a href="/ui/dead">back</a></p>')
    )
    return section(
        f"Dry run: {len(job_ids)} job(s) would be retried",
        Html(f'<p class="error sig">{h(sig)}</p>' + listed + confirm),
        note="Nothing changed. The confirmation retries only these jobs, each if it is still dead with "
        "this signature; a job that dies in the group meanwhile is not included.",
    )


def group_result(sig: str, retried: list[str], skipped: Mapping[str, str]) -> Html:
    """What a confirmed group retry did."""
    rows = [[job_link(i), "retried", ""] for i in retried] + [
        [job_link(i), "skipped", why] for i, why in skipped.items()
    ]
    return section(
        f"Retried {len(retried)} job(s)",
        Html(
            f'<p class="error sig">{h(sig)}</p>'
            + table(["job", "outcome", "why"], rows)
            + Html(f'<p>{h(len(skipped))} skipped. <a href="/ui/dead">back</a></p>')
        ),
    )
