"""Server-rendered SVG charts: no library, no CDN, no build step, nothing for the CSP to allow.

Each chart is a small ``<svg>`` drawn from the numbers (``sqsjobs.ops.series``): bars per bucket for
counts, a polyline for a level over time. Every mark carries its number as data attributes
(``data-series``, ``data-bucket``, ``data-value``) and a ``<title>`` tooltip, so a person hovers to
read it and a test (or a script) reads the counts back from the page itself. Colours are
presentation attributes, not ``style`` (the dashboard's CSP allows no inline style).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqsjobs.api.dashboard_views import Html, h, join

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

WIDTH, HEIGHT, PAD = 720, 160, 28
COLOURS = {
    "started": "#1a56c9",
    "succeeded": "#2e9e4a",
    "failed": "#d08a00",
    "dead": "#b01515",
    "waiting": "#1a56c9",
    "oldest waiting (s)": "#8a1111",
}


def _label(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M")


def _axis(start: float, bucket_s: float, buckets: int, top: float, unit: str) -> Html:
    span = WIDTH - 2 * PAD
    first, last = _label(start), _label(start + buckets * bucket_s)
    return Html(
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#889"/>'
        f'<text x="{PAD}" y="{HEIGHT - 8}" font-size="10" fill="#556">{h(first)}</text>'
        f'<text x="{PAD + span}" y="{HEIGHT - 8}" font-size="10" fill="#556" text-anchor="end">{h(last)} UTC</text>'
        f'<text x="{PAD - 4}" y="{PAD}" font-size="10" fill="#556" text-anchor="end">{h(_short(top))}</text>'
        f'<text x="{PAD - 4}" y="{HEIGHT - PAD}" font-size="10" fill="#556" text-anchor="end">0</text>'
        f'<text x="{WIDTH - PAD}" y="{PAD - 10}" font-size="10" fill="#556" text-anchor="end">{h(unit)}</text>'
    )


def _short(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def _legend(names: Sequence[str], totals: Mapping[str, float]) -> Html:
    return join(
        Html(
            f'<span class="legend" data-series="{h(n)}" data-total="{h(_short(totals[n]))}">'
            f'<svg width="10" height="10" aria-hidden="true"><rect width="10" height="10" fill="{COLOURS.get(n, "#556")}"/></svg> '
            f"{h(n)} {h(_short(totals[n]))}</span> "
        )
        for n in names
    )


def bars(
    title: str, series: Mapping[str, Sequence[int]], *, start: float, bucket_s: float, ident: str
) -> Html:
    """Grouped bars: one group per bucket, one bar per series, with a legend of totals."""
    names = list(series)
    buckets = len(next(iter(series.values()), []))
    top = max([1, *(v for values in series.values() for v in values)])
    span, usable = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    slot = span / max(buckets, 1)
    width = max(slot / max(len(names), 1) - 0.5, 0.5)
    marks = []
    for i in range(buckets):
        at = _label(start + i * bucket_s)
        for k, name in enumerate(names):
            value = series[name][i]
            if not value:
                continue
            tall = usable * value / top
            x = PAD + i * slot + k * (slot / len(names))
            marks.append(
                Html(
                    f'<rect class="mark" data-series="{h(name)}" data-bucket="{i}" data-value="{value}" '
                    f'x="{x:.2f}" y="{HEIGHT - PAD - tall:.2f}" width="{width:.2f}" height="{tall:.2f}" '
                    f'fill="{COLOURS.get(name, "#556")}"><title>{h(at)} {h(name)}: {value}</title></rect>'
                )
            )
    totals = {n: float(sum(series[n])) for n in names}
    return _figure(
        title, ident, Html(_axis(start, bucket_s, buckets, top, "jobs") + join(marks)), _legend(names, totals)
    )


def line(
    title: str, name: str, values: Sequence[float], *, start: float, bucket_s: float, ident: str, unit: str
) -> Html:
    """One level over time (sampled at each bucket's end), its points marked."""
    buckets = len(values)
    top = max([1.0, *values])
    span, usable = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    slot = span / max(buckets, 1)
    points = [(PAD + (i + 1) * slot, HEIGHT - PAD - usable * v / top) for i, v in enumerate(values)]
    path = " ".join(f"{x:.2f},{y:.2f}" for x, y in points)
    colour = COLOURS.get(name, "#556")
    dots = join(
        Html(
            f'<circle class="mark" data-series="{h(name)}" data-bucket="{i}" data-value="{h(_short(v))}" '
            f'cx="{x:.2f}" cy="{y:.2f}" r="1.6" fill="{colour}"><title>{h(_label(start + (i + 1) * bucket_s))} '
            f"{h(name)}: {h(_short(v))}</title></circle>"
        )
        for i, ((x, y), v) in enumerate(zip(points, values, strict=True))
    )
    polyline = (
        Html(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.2"/>')
        if points
        else Html("")
    )
    legend = _legend([name], {name: values[-1] if values else 0.0})
    return _figure(title, ident, Html(_axis(start, bucket_s, buckets, top, unit) + polyline + dots), legend)


def _figure(title: str, ident: str, marks: Html, legend: Html) -> Html:
    return Html(
        f'<figure class="chart" id="{h(ident)}"><figcaption>{h(title)} {legend}</figcaption>'
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="{h(title)}">{marks}</svg></figure>'
    )
