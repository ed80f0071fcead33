"""The plotter: line and bar charts as inline SVG strings (no network, no JavaScript). It knows nothing of results:
it takes named series of points; which runs go in which chart is charts.py's business.

Text never sits on the plot area, so it cannot hide a line: reference lines are named in the legend (above the
plot, as a dashed swatch) and a bar chart's marks are named above the bars, on as many rows as they need."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from iobench.report.format import short

REF = "#c62828"  # reference lines (the CSS's --bad): one GPU's need, the baseline
CHAR_PX = 6.6  # the width of a legend character at 12 px, near enough to lay out rows without measuring text
TICK_CHAR_PX = 6.0  # the same at 11 px (tick and reference labels)


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]
    color: str
    dash: bool = False
    step: bool = False  # draw horizontal-then-vertical steps between points


def _esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def _nice_step(span: float, n: int = 5) -> float:
    raw = span / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next((m * mag for m in (1, 2, 2.5, 5) if m * mag >= raw), 10 * mag)


def linear_ticks(lo: float, hi: float) -> list[float]:
    step = _nice_step(hi - lo)
    return [round(k * step, 12) for k in range(math.floor(lo / step), math.floor(hi / step + 1e-9) + 1)
            if k * step >= lo - step * 1e-9]


def log_ticks(lo: float, hi: float) -> list[float]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    decades = [10.0 ** k for k in range(a, b + 1)]
    ticks = [t for t in decades if lo <= t <= hi]
    if len(ticks) < 3:
        ticks = sorted({t * m for t in decades for m in (1, 2, 5) if lo <= t * m <= hi})
    return ticks


def _scale(lo: float, hi: float, log: bool, start: float, length: float) -> Callable[[float], float]:
    """Where a value from `lo` to `hi` lands on an axis `length` pixels long from `start` (negative: upwards)."""
    f: Callable[[float], float] = math.log10 if log else (lambda v: v)
    a, b = f(lo), f(hi)
    return lambda v: start + (f(v) - a) / (b - a) * length


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str, x_log: bool = False,
               y_log: bool = False, x_ticks: Sequence[tuple[float, str]] | None = None,
               y_ticks: Sequence[tuple[float, str]] | None = None, hlines: Sequence[tuple[float, str]] = (),
               y_zero: bool = True, width: int = 720, height: int = 320) -> str:
    """An SVG line chart: one polyline per series, points with tooltips, a legend, dashed reference lines (named in
    the legend). "" when no series has a point to draw."""
    series = [s for s in series if s.points]
    pts = [p for s in series for p in s.points if (not x_log or p[0] > 0) and (not y_log or p[1] > 0)]
    if not pts:
        return ""
    xs = [p[0] for p in pts] + [t for t, _ in (x_ticks or [])]
    ys = [p[1] for p in pts] + [y for y, _ in hlines] + [t for t, _ in (y_ticks or [])]
    x0, x1 = min(xs), max(xs)
    y0, y1 = (0.0 if y_zero and not y_log else min(ys)), max(ys)
    if x0 == x1:
        x0, x1 = (x0 / 2, x1 * 2) if x_log else (x0 - 1, x1 + 1)
    if y0 == y1:
        y0, y1 = (y0 / 2, y1 * 2) if y_log else (y0 - 1 if y0 else 0, y1 + 1)
    if y_ticks is None:  # a margin above the top point (on a log scale, below the lowest too)
        y0, y1 = (y0 / 1.25, y1 * 1.25) if y_log else (y0, y1 * 1.05 if y1 > 0 else y1)
    # the legend's entries, (name, colour, dashed, class): the series, then the reference lines
    entries = [(s.name, s.color, s.dash, "legend") for s in series] + [(text, REF, True, "reftext")
                                                                       for _, text in hlines]
    legend_rows = _legend_rows([e[0] for e in entries], width - 80)
    top = 10 + 18 * len(legend_rows)
    left, right, bottom = 62, 18, 46
    pw, ph = width - left - right, height - top - bottom

    fx, fy = _scale(x0, x1, x_log, left, pw), _scale(y0, y1, y_log, top + ph, -ph)  # y grows upwards
    xt = list(x_ticks) if x_ticks is not None else [(t, short(t)) for t in
                                                     (log_ticks(x0, x1) if x_log else linear_ticks(x0, x1))]
    yt = list(y_ticks) if y_ticks is not None else [(t, short(t)) for t in
                                                     (log_ticks(y0, y1) if y_log else linear_ticks(y0, y1))]
    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(title)}">',
           f"<title>{_esc(title)}</title>",
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="plot"/>']
    for t, text in yt:
        y = fy(t)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{_esc(text)}</text>')
    for t, text in xt:
        x = fx(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" class="grid"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle" class="tick">{_esc(text)}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 8}" text-anchor="middle" class="axis">'
               f"{_esc(x_label)}</text>")
    out.append(f'<text transform="translate(14 {top + ph / 2:.1f}) rotate(-90)" text-anchor="middle" class="axis">'
               f"{_esc(y_label)}</text>")
    for value, text in hlines:
        y = fy(value)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="ref">'
                   f"<title>{_esc(text)}</title></line>")
    for s in series:
        ok = [(x, y) for x, y in s.points if (not x_log or x > 0) and (not y_log or y > 0)]
        # a step series: at each point after the first, the previous point's y first (horizontal, then vertical)
        path = ok[:1] + [p for (_, before), (x, y) in pairwise(ok) for p in ((x, before), (x, y))] if s.step else ok
        coords = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in path)
        dash = ' stroke-dasharray="6 4"' if s.dash else ""
        out.append(f'<polyline points="{coords}" fill="none" stroke="{s.color}" stroke-width="2"{dash}/>')
        if len(ok) <= 60:
            for x, y in ok:
                out.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="{s.color}">'
                           f"<title>{_esc(s.name)}: {short(x)}, {short(y)}</title></circle>")
    out += _legend(entries, legend_rows, left)
    out.append("</svg>")
    return "\n".join(out)


def _legend_width(name: str) -> float:
    return 30 + CHAR_PX * len(name)


def _legend_rows(names: list[str], width: float) -> list[list[int]]:
    rows: list[list[int]] = [[]]
    used = 0.0
    for i, n in enumerate(names):
        w = _legend_width(n)
        if rows[-1] and used + w > width:
            rows.append([])
            used = 0.0
        rows[-1].append(i)
        used += w
    return rows if rows[0] else []


def _legend(entries: Sequence[tuple[str, str, bool, str]], rows: list[list[int]], left: float) -> list[str]:
    out = []
    for r, row in enumerate(rows):
        x, y = left, 12 + 18 * r
        for name, color, dashed, cls in (entries[i] for i in row):
            dash = ' stroke-dasharray="6 4"' if dashed else ""
            out.append(f'<line x1="{x:.1f}" x2="{x + 20:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{color}" '
                       f'stroke-width="2.5"{dash}/>')
            out.append(f'<text x="{x + 25:.1f}" y="{y + 4:.1f}" class="{cls}">{_esc(name)}</text>')
            x += _legend_width(name)
    return out


def _mark_rows(marks: Sequence[tuple[float, str]], fx: Callable[[float], float], right_edge: float
               ) -> list[tuple[float, str, str, int]]:
    """(x, anchor, text, row) per mark: each label on the first row where it clears the labels already there."""
    placed: list[tuple[float, str, str, int]] = []
    ends: list[float] = []  # per row, where its last label ends
    for value, text in sorted(marks):
        x = fx(value)
        w = TICK_CHAR_PX * len(text) + 6
        anchor = "end" if x + w / 2 > right_edge else "middle"
        start = x - w if anchor == "end" else x - w / 2
        row = next((i for i, end in enumerate(ends) if start > end), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = x if anchor == "end" else x + w / 2
        placed.append((x, anchor, text, row))
    return placed


def bar_chart(bars: Sequence[tuple[str, float, str]], *, title: str, x_label: str,
              marks: Sequence[tuple[float, str]] = (), fmt: Callable[[float], str] = short, width: int = 720,
              label_width: int = 190) -> str:
    """Horizontal bars with their values, and dashed vertical marks (reference values) across them, named above."""
    if not bars:
        return ""
    row, bottom = 26, 36
    left, right = label_width, 70
    pw = width - left - right
    hi = max([b[1] for b in bars] + [m[0] for m in marks] + [1e-12])

    def fx(v: float) -> float:
        return left + max(v, 0.0) / hi * pw

    placed = _mark_rows(marks, fx, width - 4)
    top = 8 + 14 * (max((p[3] for p in placed), default=-1) + 1) + (6 if marks else 0)
    height = top + row * len(bars) + bottom
    out = [f'<svg class="chart bars" viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(title)}">',
           f"<title>{_esc(title)}</title>"]
    for t in linear_ticks(0, hi):
        x = fx(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + row * len(bars)}" class="grid"/>')
        out.append(f'<text x="{x:.1f}" y="{top + row * len(bars) + 14}" text-anchor="middle" class="tick">'
                   f"{_esc(short(t))}</text>")
    for i, (name, value, color) in enumerate(bars):
        y = top + i * row
        out.append(f'<text x="{left - 8}" y="{y + row / 2 + 4:.1f}" text-anchor="end" class="legend">'
                   f"{_esc(name)}</text>")
        out.append(f'<rect x="{left}" y="{y + 4}" width="{max(fx(value) - left, 0.5):.1f}" height="{row - 8}" '
                   f'fill="{color}"><title>{_esc(name)}: {_esc(fmt(value))}</title></rect>')
        out.append(f'<text x="{fx(value) + 5:.1f}" y="{y + row / 2 + 4:.1f}" class="value">{_esc(fmt(value))}</text>')
    for x, anchor, text, r in placed:
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 4}" y2="{top + row * len(bars)}" class="ref"/>')
        out.append(f'<text x="{x:.1f}" y="{top - 8 - 14 * r:.1f}" text-anchor="{anchor}" '
                   f'class="reftext">{_esc(text)}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 4}" text-anchor="middle" class="axis">'
               f"{_esc(x_label)}</text>")
    out.append("</svg>")
    return "\n".join(out)
