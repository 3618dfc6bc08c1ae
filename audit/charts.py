"""Inline SVG line charts: no JavaScript, no external resources, readable in any browser.

One function, ``line_chart``: time on x, a count on y, a legend, optional vertical markers
(failover events). ``step=True`` draws state counts as steps (a count holds until it changes).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
    "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22",
)  # fmt: skip

# A fixed colour per mirror state, so every timeline reads the same way.
STATE_COLORS = {
    "PREPARING": "#9467bd",
    "EPOCH_FENCING": "#ff7f0e",
    "MIRRORING": "#2ca02c",
    "PAUSING": "#bcbd22",
    "PAUSED": "#8c564b",
    "STOPPING": "#d62728",
    "STOPPED": "#1f77b4",
    "FAILED": "#000000",
    "UNKNOWN": "#7f7f7f",
}


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[int, float]]  # (epoch ms, value), sorted by time
    color: str | None = None
    dashed: bool = False


@dataclass(frozen=True)
class Marker:
    at_ms: int
    label: str
    color: str = "#555"


@dataclass(frozen=True)
class Chart:
    title: str
    series: Sequence[Series]
    y_label: str = ""
    markers: Sequence[Marker] = field(default_factory=tuple)
    step: bool = False
    width: int = 900
    height: int = 280


def _nice_step(span: float, target: int = 5) -> float:
    raw = span / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


_TIME_STEPS_MS = [
    1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000, 900_000,
    1_800_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000, 86_400_000, 7 * 86_400_000,
]  # fmt: skip


def _time_ticks(lo: int, hi: int, target: int = 6) -> list[int]:
    span = max(hi - lo, 1)
    step = next((s for s in _TIME_STEPS_MS if span / s <= target), _TIME_STEPS_MS[-1])
    first = -(-lo // step) * step
    return list(range(first, hi + 1, step))


def _time_label(ms: int, span_ms: int) -> str:
    t = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    if span_ms > 2 * 86_400_000:
        return t.strftime("%m-%d")
    if span_ms > 6 * 3_600_000:
        return t.strftime("%m-%d %H:%M")
    return t.strftime("%H:%M:%S")


def _fmt_num(v: float) -> str:
    if abs(v) >= 1e9:
        return f"{v / 1e9:g}G"
    if abs(v) >= 1e6:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def line_chart(chart: Chart) -> str:
    """The chart as an ``<svg>`` element (UTC times on the x axis)."""
    w, h = chart.width, chart.height
    left, right, top, bottom = 64, 170, 30, 36
    pw, ph = w - left - right, h - top - bottom
    pts = [p for s in chart.series for p in s.points]
    out = [
        f'<svg class="chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
        f'role="img" aria-label="{escape(chart.title)}">',
        f'<text x="{left}" y="18" class="ct">{escape(chart.title)}</text>',
    ]
    if not pts:
        out.append(f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle" class="cl">no data</text></svg>')
        return "".join(out)
    xs = [p[0] for p in pts] + [m.at_ms for m in chart.markers]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 - 30_000, x1 + 30_000
    y1 = max(max(p[1] for p in pts), 1.0)
    ystep = _nice_step(y1)
    y1 = math.ceil(y1 / ystep) * ystep

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (y / y1) * ph

    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="pa"/>')
    y = 0.0
    while y <= y1 + 1e-9:  # horizontal grid and y labels
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" class="gr"/>')
        out.append(f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" text-anchor="end" class="cl">{_fmt_num(y)}</text>')
        y += ystep
    for t in _time_ticks(x0, x1):
        out.append(f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{top}" y2="{top + ph}" class="gr"/>')
        out.append(
            f'<text x="{sx(t):.1f}" y="{top + ph + 16}" text-anchor="middle" class="cl">{_time_label(t, x1 - x0)}</text>'
        )
    if chart.y_label:
        out.append(
            f'<text transform="translate(14 {top + ph / 2}) rotate(-90)" text-anchor="middle" class="cl">'
            f"{escape(chart.y_label)}</text>"
        )
    for i, m in enumerate(chart.markers):
        x = sx(m.at_ms)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" stroke="{m.color}" class="mk"/>')
        out.append(
            f'<text x="{x + 3:.1f}" y="{top + 11 + (i % 3) * 11}" class="ml" fill="{m.color}">{escape(m.label)}</text>'
        )
    for i, s in enumerate(chart.series):
        color = s.color or PALETTE[i % len(PALETTE)]
        coords: list[str] = []
        prev_y: float | None = None
        for x, yv in s.points:
            if chart.step and prev_y is not None:
                coords.append(f"{sx(x):.1f},{sy(prev_y):.1f}")
            coords.append(f"{sx(x):.1f},{sy(yv):.1f}")
            prev_y = yv
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        if len(s.points) == 1:
            x, yv = s.points[0]
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(yv):.1f}" r="3" fill="{color}"/>')
        else:
            out.append(f'<polyline points="{" ".join(coords)}" fill="none" stroke="{color}" class="ln"{dash}/>')
        ly = top + 6 + i * 16
        out.append(f'<rect x="{left + pw + 12}" y="{ly}" width="12" height="4" fill="{color}"/>')
        label = s.label if len(s.label) <= 20 else s.label[:19] + "…"
        out.append(f'<text x="{left + pw + 30}" y="{ly + 6}" class="cl"><title>{escape(s.label)}</title>{escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def downsample(points: Sequence[tuple[int, float]], limit: int = 600) -> list[tuple[int, float]]:
    """Every k-th point (keeping the last), so a chart stays a few kB."""
    if len(points) <= limit:
        return list(points)
    k = math.ceil(len(points) / limit)
    out = list(points[::k])
    if out[-1] != points[-1]:
        out.append(points[-1])
    return out
