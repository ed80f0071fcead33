"""Reports from result files: one self-contained HTML page (plots drawn here as inline SVG: no network, no CDN,
no JavaScript), a Markdown version, and a flat CSV (one row per measured run).

One result gives the single-run report: the verdict first (GPUs fed, what limits, AU target, per-GPU rate and its
source), the caveats, the environment, then the curves and tables. Several results give the pre-purchase view
(`compare`): one side-by-side table with the winner per metric, GPUs fed per system, overlaid curves, and each
system's full report folded below.

    render_html(results) -> str        render_markdown(results) -> str        write_csv(results, path)
    write_reports(result, folder)      writes report.html and report.md beside result.json (`iobench run`)
    write(results, html=, md=, csv=)   what `iobench report` / `iobench compare` call
"""

from __future__ import annotations

import csv
import html
import math
import shlex
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from iobench.errors import UserError
from iobench.plan import Measured, mixed_kinds, plan, rate_kind_of
from iobench.result import FioBaseline, Latency, Result, Run, Verdict
from iobench.verdict import (
    au_cell,
    cpu_saturated,
    cpu_words,
    replay_runs,
    storage_runs,
    supply_run,
    times,
    verdict,
)

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
COLD, WARM, FIO = "#1f77b4", "#ff7f0e", "#7f7f7f"
SMALL_CLIENT_CPUS = 4
SMALL_DATASET = 100_000


# --------------------------------------------------------------------------------------------- loading


def _stderr_warning(line: str) -> None:
    sys.stderr.write(f"iobench: warning: {line}\n")


def load_results(paths: Iterable[Path], warn: Callable[[str], None] | None = _stderr_warning) -> list[Result]:
    """Result files, each checked; a missing or foreign file is a UserError naming it. A folder means the
    result.json inside it (as `iobench run --out` writes). An unfinished one (complete: false) is loaded, with
    one warning line naming it (`warn`; None: silent)."""
    out = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            p = p / "result.json"
        try:
            out.append(Result.load(p))
        except FileNotFoundError:
            raise UserError(f"no result file at {p}") from None
        except (ValidationError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UserError(f"{p} is not an iobench result file ({first})") from None
        except OSError as exc:
            raise UserError(f"cannot read {p}: {exc.strerror}") from None
        if warn is not None and not out[-1].complete:
            warn(f"{p} is an unfinished run (complete: false): its figures cover only what was measured before it "
                 "stopped")
    if not out:
        raise UserError("give at least one result file")
    return out


def write(results: Sequence[Result], html_path: Path | None = None, md_path: Path | None = None,
          csv_path: Path | None = None, names: Sequence[str] | None = None) -> list[Path]:
    """Write the reports asked for; returns the paths written."""
    written = []
    for path, render in ((html_path, render_html), (md_path, render_markdown)):
        if path is not None:
            _write_text(Path(path), render(list(results), names))
            written.append(Path(path))
    if csv_path is not None:
        write_csv(results, Path(csv_path), names)
        written.append(Path(csv_path))
    return written


def write_reports(result: Result, folder: Path) -> list[Path]:
    """report.html and report.md in `folder` (beside result.json): what `iobench run` writes by default."""
    folder = Path(folder)
    return write([result], html_path=folder / "report.html", md_path=folder / "report.md")


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# --------------------------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class Facts:
    """What a report says about one result, computed once for HTML, Markdown and CSV alike."""

    label: str
    verdict: Verdict | None
    provisional: bool  # the verdict was computed here from an unfinished result
    best_cold: Run | None  # the verdict's best cold (storage) run
    best_warm: Run | None
    main: Run | None  # the run whose timeline is shown (the supply run, else the best run)
    need_per_gpu: float | None  # au_target x per-GPU rate
    caveats: list[str]


def facts(result: Result, label: str | None = None) -> Facts:
    v, provisional = result.verdict, False
    if v is None:
        try:
            v, provisional = verdict(result), not result.complete
        except (ValueError, StopIteration, ZeroDivisionError):
            v = None
    done = replay_runs(result)
    pool = storage_runs(result)
    best_cold = max(pool, key=lambda r: r.samples_per_s) if pool else None
    warm = [r for r in done if r.cache == "warm"]
    best_warm = max(warm, key=lambda r: r.samples_per_s) if warm else None
    main = supply_run(result) or best_cold or (max(done, key=lambda r: r.samples_per_s) if done else None)
    s = result.settings
    rate = (v.rate_per_gpu if v and v.rate_per_gpu else None) or s.rate_per_gpu
    tau = (v.au_target if v and v.au_target else None) or s.au_target
    need = tau * rate if rate else None
    return Facts(label=label or default_label(result), verdict=v, provisional=provisional, best_cold=best_cold,
                 best_warm=best_warm, main=main, need_per_gpu=need, caveats=caveats(result, best_cold, v))


def default_label(result: Result) -> str:
    return f"{result.mount.fstype} at {result.mount.path}"


def labels(results: Sequence[Result], names: Sequence[str] | None = None) -> list[str]:
    """One distinct label per result: the given names, else 'fstype at path', made unique where needed."""
    if names:
        if len(names) != len(results):
            raise UserError(f"{len(names)} names for {len(results)} results")
        return list(names)
    base = [default_label(r) for r in results]
    out = [f"{b} ({r.host.hostname}, {_when(r.created)[:16]})" if base.count(b) > 1 else b
           for b, r in zip(base, results, strict=True)]
    # still duplicate (same host and minute): number them
    return [f"{x} #{i + 1}" if out.count(x) > 1 else x for i, x in enumerate(out)]


def caveats(result: Result, best: Run | None = None, v: Verdict | None = None) -> list[str]:
    """What a reader must know before trusting the figures, most important first."""
    out: list[str] = []
    if not result.complete:
        out.append("This run did not finish (complete: false): the figures cover only what was measured before it "
                   "stopped, and the verdict is provisional.")
    interrupted = [r for r in result.runs if not r.complete]
    if interrupted:
        out.append(f"{len(interrupted)} epoch(s) were interrupted: their figures cover the samples read.")
    out += result.warnings
    if result.remote and not any("server" in w for w in result.warnings):
        out.append(f"{result.mount.fstype} is a network/FUSE file system: cold runs evicted this client's cache "
                   "only; the server's cache was not evicted and may have served part of the cold figures.")
    cached_cold = [r for r in result.runs if r.cache == "cold" and r.measures in ("page-cache", "mixed")]
    if cached_cold:
        out.append(f"{len(cached_cold)} cold run(s) found the data already cached (measures: page-cache or mixed): "
                   "eviction did not take; they are not storage figures and the verdict leaves them out.")
    if any(r.cache == "warm" and r.measures == "page-cache" for r in result.runs):
        out.append("Warm figures were read from this client's RAM (page cache), not from the storage.")
    cpus = result.host.cpus or 0
    if cpus and cpus <= SMALL_CLIENT_CPUS:
        out.append(f"Small client: {cpus} CPU cores. iobench's readers share them, so this client may cap the "
                   "rates before the storage does; a training node has many more cores.")
    if best is not None and cpu_saturated(best.cpu, result):
        out.append(f"During the best cold run {cpu_words(best.cpu, result)}: the client CPU, not the storage, set "
                   "that pace.")
    if not result.host.root and any(r.cache == "cold" for r in result.runs):
        out.append("Not run as root: cold runs evicted file pages with posix_fadvise(DONTNEED); the dentry and "
                   "attribute caches were not dropped.")
    if result.dataset.files < SMALL_DATASET:
        out.append(f"Small dataset: {result.dataset.files:,} files ({result.dataset.bytes / 1e9:.2f} GB). Full-size "
                   f"datasets (ImageNet: {result.settings.scale_files:,} files) stress metadata and caches more.")
    if v is not None and v.gpus_fed is not None and not v.gpus_fed_confirmed:
        out.append("GPUs fed is predicted from the sustained rate; no training run with emulated GPUs confirmed it.")
    invalid = [r for r in result.runs if not r.valid]
    if invalid:
        out.append(f"{len(invalid)} run(s) are marked invalid and left out of the verdict: "
                   + "; ".join(f"epoch {r.epoch}, {r.invalid_reason}" for r in invalid[:3])
                   + ("; ..." if len(invalid) > 3 else "") + ".")
    if result.baseline and result.baseline.note:
        out.append(f"fio baseline: {result.baseline.note}")
    return out


def _steps_per_gpu(result: Result, r: Run) -> int:
    """Batches each emulated GPU consumed in a training run."""
    batch = r.batch_size or result.settings.batch_size or 1
    return math.ceil(r.samples / max(r.gpus or 1, 1) / batch)


# --------------------------------------------------------------------------------------------- formatting


def _esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def _num(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    if digits == 0 and abs(x) < 10 and x != int(x):
        return f"{x:,.1f}"
    return f"{x:,.{digits}f}"


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:,.1f}"


def _short(v: float) -> str:
    """Axis tick text: 12k, 1.5M, 0.25."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 1:
        return f"{v:,.0f}" if v == int(v) else f"{v:.3g}"
    return f"{v:.3g}"


def _gb(b: float) -> str:
    return f"{b / 1e9:,.2f} GB"


def _readers(r: Run) -> str:
    return f"{r.concurrency} thread{'s' if r.concurrency != 1 else ''}" if r.workers is None else \
        f"{r.workers} DataLoader worker{'s' if r.workers != 1 else ''}"


def _engine(r: Run) -> str:
    e = "threads" if r.engine == "threads" else ("decode " if r.decode else "") + "DataLoader"
    if r.source != "files":
        e += f" ({r.source})"
    return e


def _when(ts: str | None) -> str:
    return ts.replace("T", " ") if ts else "-"


def _gpu_name(v: Verdict | None, result: Result) -> str:
    g = (v.gpu if v and v.gpu else None) or result.settings.gpu or "GPU"
    return g.upper()


def _model_name(v: Verdict | None, result: Result) -> str:
    return (v.model if v and v.model else None) or result.settings.model or "the model"


# --------------------------------------------------------------------------------------------- SVG charts


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]
    color: str
    dash: bool = False
    step: bool = False  # draw horizontal-then-vertical steps between points


def _nice_step(span: float, n: int = 5) -> float:
    raw = span / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def _linear_ticks(lo: float, hi: float) -> list[float]:
    step = _nice_step(hi - lo)
    start = math.floor(lo / step) * step
    ticks, v = [], start
    while v <= hi + step * 1e-9:
        if v >= lo - step * 1e-9:
            ticks.append(round(v, 12))
        v += step
    return ticks


def _log_ticks(lo: float, hi: float) -> list[float]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    decades = [10.0 ** k for k in range(a, b + 1)]
    ticks = [t for t in decades if lo <= t <= hi]
    if len(ticks) < 3:
        ticks = sorted({t * m for t in decades for m in (1, 2, 5) if lo <= t * m <= hi})
    return ticks


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str, x_log: bool = False,
               y_log: bool = False, x_ticks: Sequence[tuple[float, str]] | None = None,
               y_ticks: Sequence[tuple[float, str]] | None = None, hlines: Sequence[tuple[float, str]] = (),
               y_zero: bool = True, width: int = 720, height: int = 320) -> str:
    """An SVG line chart: one polyline per series, points with tooltips, a legend, dashed reference lines."""
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
    if not y_log and y_ticks is None:
        y1 = y1 * 1.05 if y1 > 0 else y1
    elif y_log and y_ticks is None:
        y0, y1 = y0 / 1.25, y1 * 1.25
    legend_rows = _legend_rows([s.name for s in series] + [], width - 80)
    top = 10 + 18 * len(legend_rows)
    left, right, bottom = 62, 18, 46
    pw, ph = width - left - right, height - top - bottom

    def fx(v: float) -> float:
        if x_log:
            return left + (math.log10(v) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) * pw
        return left + (v - x0) / (x1 - x0) * pw

    def fy(v: float) -> float:
        if y_log:
            return top + ph - (math.log10(v) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)) * ph
        return top + ph - (v - y0) / (y1 - y0) * ph

    xt = list(x_ticks) if x_ticks is not None else [(t, _short(t)) for t in
                                                     (_log_ticks(x0, x1) if x_log else _linear_ticks(x0, x1))]
    yt = list(y_ticks) if y_ticks is not None else [(t, _short(t)) for t in
                                                     (_log_ticks(y0, y1) if y_log else _linear_ticks(y0, y1))]
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
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="ref"/>')
        out.append(f'<text x="{left + pw - 4}" y="{y - 4:.1f}" text-anchor="end" class="reftext">{_esc(text)}</text>')
    for s in series:
        ok = [(x, y) for x, y in s.points if (not x_log or x > 0) and (not y_log or y > 0)]
        if s.step:
            path: list[tuple[float, float]] = []
            for i, (x, y) in enumerate(ok):
                if i:
                    path.append((x, ok[i - 1][1]))
                path.append((x, y))
        else:
            path = ok
        coords = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in path)
        dash = ' stroke-dasharray="6 4"' if s.dash else ""
        out.append(f'<polyline points="{coords}" fill="none" stroke="{s.color}" stroke-width="2"{dash}/>')
        if len(ok) <= 60:
            for x, y in ok:
                out.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="{s.color}">'
                           f"<title>{_esc(s.name)}: {_short(x)}, {_short(y)}</title></circle>")
    out += _legend(series, legend_rows, left)
    out.append("</svg>")
    return "\n".join(out)


def _legend_rows(names: list[str], width: float) -> list[list[int]]:
    rows: list[list[int]] = [[]]
    used = 0.0
    for i, n in enumerate(names):
        w = 30 + 6.6 * len(n)
        if rows[-1] and used + w > width:
            rows.append([])
            used = 0.0
        rows[-1].append(i)
        used += w
    return rows if rows[0] else []


def _legend(series: Sequence[Series], rows: list[list[int]], left: float) -> list[str]:
    out = []
    for r, row in enumerate(rows):
        x, y = left, 12 + 18 * r
        for i in row:
            s = series[i]
            dash = ' stroke-dasharray="6 4"' if s.dash else ""
            out.append(f'<line x1="{x:.1f}" x2="{x + 20:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{s.color}" '
                       f'stroke-width="2.5"{dash}/>')
            out.append(f'<text x="{x + 25:.1f}" y="{y + 4:.1f}" class="legend">{_esc(s.name)}</text>')
            x += 30 + 6.6 * len(s.name)
    return out


def bar_chart(bars: Sequence[tuple[str, float, str]], *, title: str, x_label: str,
              marks: Sequence[tuple[float, str]] = (), fmt: Callable[[float], str] = _short, width: int = 720,
              label_width: int = 190) -> str:
    """Horizontal bars with their values, and dashed vertical marks (reference values) across them."""
    if not bars:
        return ""
    row, top, bottom = 26, 22 if marks else 8, 36
    height = top + row * len(bars) + bottom
    left, right = label_width, 70
    pw = width - left - right
    hi = max([b[1] for b in bars] + [m[0] for m in marks] + [1e-12])

    def fx(v: float) -> float:
        return left + max(v, 0.0) / hi * pw

    out = [f'<svg class="chart bars" viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(title)}">',
           f"<title>{_esc(title)}</title>"]
    for t in _linear_ticks(0, hi):
        x = fx(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + row * len(bars)}" class="grid"/>')
        out.append(f'<text x="{x:.1f}" y="{top + row * len(bars) + 14}" text-anchor="middle" class="tick">'
                   f"{_esc(_short(t))}</text>")
    for i, (name, value, color) in enumerate(bars):
        y = top + i * row
        out.append(f'<text x="{left - 8}" y="{y + row / 2 + 4:.1f}" text-anchor="end" class="legend">'
                   f"{_esc(name)}</text>")
        out.append(f'<rect x="{left}" y="{y + 4}" width="{max(fx(value) - left, 0.5):.1f}" height="{row - 8}" '
                   f'fill="{color}"><title>{_esc(name)}: {_esc(fmt(value))}</title></rect>')
        out.append(f'<text x="{fx(value) + 5:.1f}" y="{y + row / 2 + 4:.1f}" class="value">{_esc(fmt(value))}</text>')
    for i, (value, text) in enumerate(marks):
        x = fx(value)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 4}" y2="{top + row * len(bars)}" class="ref"/>')
        anchor = "end" if x > left + pw * 0.8 else "middle"
        out.append(f'<text x="{x:.1f}" y="{top - 8 - (10 if i % 2 and len(marks) > 6 else 0) + 0:.1f}" '
                   f'text-anchor="{anchor}" class="reftext">{_esc(text)}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 4}" text-anchor="middle" class="axis">'
               f"{_esc(x_label)}</text>")
    out.append("</svg>")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------- chart data


def _curves(result: Result) -> list[tuple[str, str, list[tuple[float, float]]]]:
    """(cache, order/decode name, [(readers, mean samples/s)]) for the replay sweep, cold first."""
    groups: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in replay_runs(result):
        kind = r.order + (", decode" if r.decode else "") + ("" if r.source == "files" else f", {r.source}")
        groups[(r.cache, kind)][r.concurrency].append(r.samples_per_s)
    out = []
    for (cache, kind), by_c in sorted(groups.items(), key=lambda kv: (kv[0][0] != "cold", kv[0][1])):
        out.append((cache, kind, [(float(c), sum(v) / len(v)) for c, v in sorted(by_c.items())]))
    return out


def _fio_curves(result: Result) -> list[tuple[str, list[tuple[float, float]]]]:
    if not result.baseline or not result.baseline.fio:
        return []
    by: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for b in result.baseline.fio:
        by[b.cache].append((float(b.concurrency), b.files_per_s))
    return [(cache, sorted(v)) for cache, v in sorted(by.items())]


def _readers_unit(result: Result) -> str:
    return "DataLoader workers" if result.settings.engine == "dataloader" else "reader threads"


def _x_ticks(values: Iterable[float]) -> list[tuple[float, str]] | None:
    vals = sorted({v for v in values if v > 0})
    return [(v, _short(v)) for v in vals] if 0 < len(vals) <= 12 else None


def _need_lines(f: Facts, result: Result, ymax: float) -> tuple[list[tuple[float, str]], str]:
    """A dashed line at one GPU's need, when it fits the chart; else a sentence for the caption."""
    if f.need_per_gpu is None:
        return [], ""
    gpu = _gpu_name(f.verdict, result)
    tau = f.verdict.au_target if f.verdict and f.verdict.au_target else result.settings.au_target
    text = f"1 {gpu} needs {f.need_per_gpu:,.0f}/s (AU ≥ {tau:.0%})"
    if f.need_per_gpu <= 2.5 * ymax:
        return [(f.need_per_gpu, text)], ""
    return [], f" One {gpu} needs {f.need_per_gpu:,.0f} samples/s at AU ≥ {tau:.0%}: off this chart's scale."


def throughput_chart(result: Result, f: Facts) -> str:
    series, xs = [], []
    for cache, kind, pts in _curves(result):
        series.append(Series(f"{cache}, {kind}", pts, COLD if cache == "cold" else WARM, dash=cache == "warm"))
        xs += [x for x, _ in pts]
    for cache, pts in _fio_curves(result):
        series.append(Series(f"fio {cache} (jobs)", pts, FIO if cache == "cold" else "#bbbbbb", dash=True))
        xs += [x for x, _ in pts]
    if not series:
        return ""
    ymax = max(y for s in series for _, y in s.points)
    lines, note = _need_lines(f, result, ymax)
    svg = line_chart(series, title="samples/s vs readers", x_label=_readers_unit(result) + " (fio: jobs)",
                     y_label="samples/s", x_log=True, x_ticks=_x_ticks(xs), hlines=lines)
    return _figure(svg, "Throughput against concurrency, cold (storage) and warm (page cache); fio reads the same "
                        "files as a raw baseline." + note)


_NINES = ((0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p99.9"), (1.0, "max"))


def _nines(p: float) -> float:
    return 3.5 if p >= 1.0 else -math.log10(1 - p)


def _cdf_points(lat: Latency) -> list[tuple[float, float]]:
    vals = (lat.p50, lat.p90, lat.p99, lat.p999, lat.max)
    return [(max(v, 1e-4), _nines(p)) for v, (p, _) in zip(vals, _NINES, strict=True)]


def latency_chart(named: Sequence[tuple[str, Latency, str, bool]], title: str) -> str:
    """Percentile plot (a CDF with the tail stretched): x latency (ms, log), y p50 .. max."""
    if not named:
        return ""
    series = [Series(name, _cdf_points(lat), color, dash=dash) for name, lat, color, dash in named]
    yt = [(_nines(p), text) for p, text in _NINES]
    svg = line_chart(series, title=title, x_label="latency per sample, ms (log scale)", y_label="percentile",
                     x_log=True, y_ticks=yt, y_zero=False)
    return _figure(svg, "Latency distribution per sample (open + read + close): the further right, the slower; "
                        "the tail (p99 .. max) is stretched out.")


def _latency_series(result: Result) -> list[tuple[str, Latency, str, bool]]:
    runs = sorted(replay_runs(result), key=lambda r: (r.cache != "cold", r.concurrency, r.order))
    colors = {}
    out = []
    for r in runs:
        key = (r.cache, r.concurrency, r.order, r.decode)
        if key in colors:
            continue
        colors[key] = PALETTE[len(colors) % len(PALETTE)]
        name = f"{r.cache}, {_readers(r)}" + ("" if r.order == "shuffled" else f", {r.order}")
        out.append((name, r.latency_ms, colors[key], r.cache == "warm"))
    return out


def _rates(timeline: Sequence[Sequence[float]]) -> list[tuple[float, float]]:
    """Samples/s between timeline points, as (time, rate) steps; intervals under 10 ms merge into the next."""
    out: list[tuple[float, float]] = []
    if len(timeline) < 2:
        return out
    t0, n0 = timeline[0]
    for t, n in timeline[1:]:
        if t - t0 < 0.01:
            continue
        rate = (n - n0) / (t - t0)
        if not out:
            out.append((t0, rate))
        out.append((t, rate))
        t0, n0 = t, n
    return out


def timeline_chart(runs: Sequence[tuple[str, Run, str]], title: str, caption: str) -> str:
    series = []
    for name, r, color in runs:
        pts = _rates(r.timeline)
        if pts:
            series.append(Series(name, pts, color, step=True))
    if not series:
        return ""
    svg = line_chart(series, title=title, x_label="seconds since the epoch started", y_label="samples/s")
    return _figure(svg, caption)


def _figure(svg: str, caption: str) -> str:
    return f'<figure>{svg}<figcaption>{_esc(caption)}</figcaption></figure>' if svg else ""


# --------------------------------------------------------------------------------------------- HTML pieces

CSS = """
:root { --ink:#1d2733; --muted:#5b6776; --line:#d8dee6; --bg:#f6f8fa; --ok:#1a7f37; --bad:#c62828; --warn:#9a6700; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--ink); margin: 0; background: #fff; }
main { max-width: 1120px; margin: 0 auto; padding: 20px 28px 60px; }
header.top { border-bottom: 1px solid var(--line); margin-bottom: 14px; padding-bottom: 8px; }
header.top h1 { font-size: 22px; margin: 0 0 2px; }
header.top .sub { color: var(--muted); font-size: 13px; }
h2 { font-size: 18px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 18px 0 6px; }
.banner { background: #fff4e5; border: 1px solid #f0b36a; color: #7a4100; padding: 10px 14px; border-radius: 6px;
          font-weight: 600; margin: 10px 0; }
.hero { display: grid; grid-template-columns: minmax(230px, 300px) 1fr; gap: 22px; align-items: start;
        background: var(--bg); border: 1px solid var(--line); border-radius: 10px; padding: 18px 22px; }
.headline { grid-column: 1 / -1; font-size: 22px; font-weight: 700; margin: 0 0 12px; }
.big { font-size: 84px; font-weight: 800; line-height: 1; letter-spacing: -2px; }
.big.bad { color: var(--bad); } .big.ok { color: var(--ok); }
.bigsub { font-size: 17px; font-weight: 600; margin-top: 6px; }
.badge { display: inline-block; font-size: 12px; font-weight: 600; border-radius: 10px; padding: 2px 9px;
         margin-top: 8px; border: 1px solid var(--line); background: #fff; }
.badge.ok { color: var(--ok); border-color: #9fd5ad; } .badge.warn { color: var(--warn); border-color: #e9c46a; }
.tiles { display: grid; grid-template-columns: repeat(auto-fit, minmax(190px, 1fr)); gap: 10px; }
.tile { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 9px 12px; }
.tile .k { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .4px; }
.tile .v { font-size: 24px; font-weight: 700; line-height: 1.2; }
.tile .n { color: var(--muted); font-size: 12.5px; }
.verdict { font-size: 15.5px; margin: 14px 0 0; grid-column: 1 / -1; }
.source { color: var(--muted); font-size: 12px; grid-column: 1 / -1; margin: 0; }
.caveats { background: #fffbea; border: 1px solid #eedc82; border-radius: 8px; padding: 8px 16px 8px 30px;
           margin: 14px 0; }
.caveats li { margin: 3px 0; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 13.5px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: right; vertical-align: top; }
th { background: var(--bg); font-weight: 600; }
td.l, th.l { text-align: left; }
table.kv td:first-child { color: var(--muted); text-align: left; white-space: nowrap; }
table.kv td { text-align: left; }
td.win { font-weight: 700; background: #e8f5ec; }
.mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px;
        word-break: break-all; }
figure { margin: 10px 0 18px; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 2px; }
svg.chart { width: 100%; max-width: 760px; height: auto; display: block; }
svg.chart .plot { fill: #fff; stroke: var(--line); }
svg.chart .grid { stroke: #edf0f3; }
svg.chart .tick { font-size: 11px; fill: var(--muted); }
svg.chart .axis { font-size: 12px; fill: var(--ink); }
svg.chart .legend { font-size: 12px; fill: var(--ink); }
svg.chart .value { font-size: 12px; fill: var(--ink); font-weight: 600; }
svg.chart .ref { stroke: var(--bad); stroke-width: 1.3; stroke-dasharray: 4 3; }
svg.chart .reftext { font-size: 11px; fill: var(--bad); }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(220px, 1fr)); gap: 12px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; }
.card.best { border: 2px solid var(--ok); }
.card .big { font-size: 56px; }
.card .name { font-weight: 700; word-break: break-all; }
details { margin: 10px 0; border: 1px solid var(--line); border-radius: 8px; padding: 6px 14px; }
summary { cursor: pointer; font-weight: 600; }
.muted { color: var(--muted); }
footer { color: var(--muted); font-size: 12px; margin-top: 40px; border-top: 1px solid var(--line); padding-top: 8px; }
@media (max-width: 760px) { .hero { grid-template-columns: 1fr; } }
@media print { main { max-width: none; } details { border: 0; } }
"""


def _table(head: Sequence[str], rows: Sequence[Sequence[object]], left: int = 1, cls: str = "",
           win: set[tuple[int, int]] | None = None, text_cols: Iterable[int] = ()) -> str:
    """A table; the first `left` columns (and `text_cols`) align left. win: (row, col) cells marked as winners."""
    lefts = set(range(left)) | set(text_cols)
    out = [f'<table class="{cls}">' if cls else "<table>", "<thead><tr>"]
    out += [f'<th class="{"l" if i in lefts else ""}">{_esc(h)}</th>' for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for ri, row in enumerate(rows):
        cells = []
        for i, c in enumerate(row):
            classes = " ".join(x for x in ("l" if i in lefts else "", "win" if win and (ri, i) in win else "") if x)
            cells.append(f'<td class="{classes}">{_esc(c)}</td>' if classes else f"<td>{_esc(c)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _kv(rows: Sequence[tuple[str, object]], mono: Sequence[str] = ()) -> str:
    out = ['<table class="kv"><tbody>']
    for k, v in rows:
        val = f'<span class="mono">{_esc(v)}</span>' if k in mono else _esc(v)
        out.append(f"<tr><td>{_esc(k)}</td><td>{val}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_esc(title)}</title><style>{CSS}</style></head>\n<body><main>\n{body}\n</main></body></html>\n")


def headline(result: Result, f: Facts) -> str:
    """The answer in one plain sentence, for the top of the report."""
    text = _headline(result, f)
    return f"Provisional (the run did not finish): {text[:1].lower()}{text[1:]}" if f.provisional else text


def _headline(result: Result, f: Facts) -> str:
    v = f.verdict
    if v is not None and v.answer:
        return v.answer
    fio = _fio_best_run(result)
    if fio is not None:
        return (f"fio baseline only (no loader replay): {fio.files_per_s:,.0f} files/s ({fio.mb_per_s:,.0f} MB/s) "
                f"cold at {fio.concurrency} jobs.")
    return "No storage figure: no valid cold (storage) run completed."


def _fio_best_run(result: Result) -> FioBaseline | None:
    runs = [b for b in (result.baseline.fio if result.baseline else []) if b.cache == "cold"]
    return max(runs, key=lambda b: b.files_per_s) if runs else None


def _hero(result: Result, f: Facts) -> str:
    v, best = f.verdict, f.best_cold
    gpu, model = _gpu_name(v, result), _model_name(v, result)
    tau = v.au_target if v and v.au_target else result.settings.au_target
    left = []
    if v is not None and v.gpus_fed is not None:
        fed = v.gpus_fed
        cls = "bad" if fed == 0 else "ok"
        left.append(f'<div class="big {cls}" id="gpus-fed">{fed}</div>')
        left.append(f'<div class="bigsub">{_esc(gpu)} GPU{"" if fed == 1 else "s"} fed, training {_esc(model)} '
                    f"at ≥ {tau:.0%} busy</div>")
        if v.gpus_fed_confirmed and getattr(result.settings, "consumer", "sleep") == "cuda":
            left.append('<span class="badge ok">measured with training runs on a real GPU</span>')
        elif v.gpus_fed_confirmed:
            left.append('<span class="badge ok">measured with emulated-GPU training runs</span>')
        else:
            left.append('<span class="badge warn">predicted from the measured rates</span>')
        if f.provisional:
            left.append('<span class="badge warn">provisional: run unfinished</span>')
    elif best is not None:
        left.append(f'<div class="big" id="gpus-fed">{_short(best.samples_per_s)}</div>')
        left.append('<div class="bigsub">samples/s from storage (cold); no GPU consumer set</div>')
    elif _fio_best_run(result) is not None:
        fio = _fio_best_run(result)
        left.append(f'<div class="big" id="gpus-fed">{_short(fio.files_per_s)}</div>')
        left.append(f'<div class="bigsub">files/s cold, fio at {fio.concurrency} jobs; no loader replay</div>')
    else:
        left.append('<div class="big bad" id="gpus-fed">–</div><div class="bigsub">no storage (cold) figure</div>')
    tiles = []
    if v is not None and v.limit:
        words = {"storage": ("Storage", "the loaders reach what the storage gives, and more readers give no more"),
                 "client-cpu": ("Client CPU", "iobench used nearly all the cores it may use"),
                 "input-pipeline": ("Input pipeline", "the storage gives more than the loader delivers"),
                 "gpu": ("The GPUs", "storage and pipeline keep up with the GPUs asked about")}[v.limit]
        tiles.append(("Limit", words[0], words[1]))
    if v is not None and v.storage_samples_per_s is not None:
        tiles.append(("Storage gives (cold)", ("at least " if v.storage_is_lower_bound else "")
                      + f"{v.storage_samples_per_s:,.0f} samples/s", v.storage_from or ""))
    if v is not None and v.pipeline_samples_per_s is not None:
        tiles.append(("Pipeline delivers", f"{v.pipeline_samples_per_s:,.0f} samples/s", v.pipeline_from or ""))
    if f.need_per_gpu is not None:
        rate = v.rate_per_gpu if v and v.rate_per_gpu else result.settings.rate_per_gpu
        cap = min((x for x in (v.storage_samples_per_s, v.pipeline_samples_per_s) if x is not None), default=None) \
            if v else None
        share = f"; storage and pipeline give {times(cap / f.need_per_gpu)} that" if cap else ""
        tiles.append((f"One {gpu} needs", f"{f.need_per_gpu:,.0f} samples/s",
                      f"{tau:.0%} AU target x {rate:,.0f} samples/s per GPU{share}"))
    if best is not None:
        tiles.append(("Latency per file (cold)", f"p99 {_ms(best.latency_ms.p99)} ms",
                      f"p50 {_ms(best.latency_ms.p50)} ms, max {_ms(best.latency_ms.max)} ms"))
    if f.best_warm is not None:
        w = f.best_warm
        where = "from RAM (page cache)" if w.measures == "page-cache" else "warm"
        tiles.append(("Warm re-read", f"{w.samples_per_s:,.0f} samples/s", f"{where}, {_readers(w)}"))
    tile_html = "".join(f'<div class="tile"><div class="k">{_esc(k)}</div><div class="v">{_esc(val)}</div>'
                        f'<div class="n">{_esc(n)}</div></div>' for k, val, n in tiles)
    gauge = _gauge(result, f)
    text = v.text if v is not None else "No verdict: nothing was measured."
    src = result.settings.rate_source if (v and v.rate_per_gpu) or result.settings.rate_per_gpu else None
    return (f'<section class="hero" id="verdict"><p class="headline" id="headline">{_esc(headline(result, f))}</p>'
            f'<div>{"".join(left)}</div><div><div class="tiles">{tile_html}</div>'
            f"{gauge}</div>"
            f'<p class="verdict"><strong>Verdict{" (provisional)" if f.provisional else ""}:</strong> {_esc(text)}</p>'
            + (f'<p class="source">Per-GPU rate: {_esc(src)}.</p>' if src else "") + "</section>")


def _gauge(result: Result, f: Facts) -> str:
    """Supply against demand: the verdict's storage and pipeline figures (and the warm rate), with a mark at each
    GPU's need."""
    v = f.verdict
    if f.need_per_gpu is None or v is None or (v.storage_samples_per_s is None and v.pipeline_samples_per_s is None):
        return ""
    gpu = _gpu_name(v, result)
    bars = [(name, x, COLD) for name, x in (("storage, cold", v.storage_samples_per_s),
                                            ("pipeline", v.pipeline_samples_per_s)) if x is not None]
    if f.best_warm is not None:
        warm = "page cache, warm" if f.best_warm.measures == "page-cache" else "warm re-read"
        bars.append((warm, f.best_warm.samples_per_s, WARM))
    top = max(b[1] for b in bars)
    k_max = min(int(top // f.need_per_gpu) + 1, 12)
    step = max(1, k_max // 6)
    marks = [(k * f.need_per_gpu, f"{k} {gpu}" if k == 1 else str(k)) for k in range(1, k_max + 1)
             if k == 1 or k % step == 0]
    return bar_chart(bars, title=f"samples/s delivered against what each {gpu} needs", x_label="samples/s",
                     marks=marks, fmt=lambda x: f"{x:,.0f}/s", label_width=130)


def _consumer_words(result: Result) -> str:
    if getattr(result.settings, "consumer", "sleep") == "cuda":
        return "each training step a real step of the model on a local GPU"
    return "each training step a sleep of batch ÷ rate (as MLPerf Storage emulates a GPU)"


def _environment(result: Result) -> str:
    m, d, h, s = result.mount, result.dataset, result.host, result.settings
    evictions = sorted({r.eviction for r in result.runs if r.eviction})
    details = ", ".join(f"{k}={v}" for k, v in m.details.items()) or "-"
    params = ", ".join(f"{k}={v}" for k, v in (d.params or {}).items()) or "-"
    cpus = f"{h.cpus} CPUs" if h.cpus else "CPUs unknown"
    rows: list[tuple[str, object]] = [
        ("mount", f"{m.path} ({m.source})"),
        ("file system", f"{m.fstype} — family {m.family}" + (" (network/FUSE: remote)" if result.remote else "")),
        ("mount options", m.options),
        ("device", f"{m.device or '-'}, read_ahead_kb {m.read_ahead_kb if m.read_ahead_kb is not None else '-'}"),
        ("file-system details", details),
    ]
    if m.unread:
        rows.append(("not read", "; ".join(m.unread)))
    rows += [
        ("cache states", ", ".join(s.cache) + (f" (cold by {', '.join(evictions)})" if evictions else "")),
        ("dataset", f"{d.files:,} files, {_gb(d.bytes)}, mean {d.mean_bytes / 1000:,.1f} kB, median "
                    f"{d.median_bytes / 1000:,.1f} kB" + (" — fits in RAM" if d.fits_in_ram else "")),
        ("dataset path", d.path),
        ("made by", f"iobench gen ({params})" if d.made_by_iobench else "an existing tree (--dataset)"),
        ("workload", f"{s.workload or '-'}: engine {s.engine}, readers {', '.join(map(str, s.concurrency))}, "
                     f"orders {', '.join(s.orders) or '-'}, epochs {s.epochs}"
                     + (f", batch {s.batch_size}" if s.engine == "dataloader" else "")
                     + (", decode + augment" if s.decode else "")),
        ("GPU consumer", f"{(s.gpu or '-').upper()} x {s.model or '-'} at "
                         f"{_num(s.rate_per_gpu)} samples/s, AU target {s.au_target:.0%}"
                         + (f", {s.gpus} GPUs asked" if s.gpus else "") + f"; {_consumer_words(result)}"),
        ("client", f"{h.hostname}: {cpus}, {_gb(h.ram_bytes)} RAM ({_gb(h.ram_available_bytes)} available), "
                   f"kernel {h.kernel}, Python {h.python}, {'root' if h.root else 'not root'}"),
        ("when", f"{_when(result.created)} → {_when(result.finished)}"
                 + ("" if result.complete else " (unfinished)")),
        ("iobench", f"{h.iobench}, {result.schema_}"),
        ("to repeat", shlex.join(result.command)),
    ]
    return _kv(rows, mono=("to repeat", "mount options", "dataset path"))


def _runs_table(runs: Sequence[Run]) -> str:
    head = ("engine", "pattern", "readers", "cache", "measures", "samples/s", "MB/s", "p50 ms", "p90 ms", "p99 ms",
            "p99.9 ms", "max ms", "cores used", "vs fio", "GPUs", "AU")
    rows = []
    for r in runs:
        rows.append((_engine(r) + (f" [{r.mitigation}]" if r.mitigation else ""), r.order,
                     r.concurrency if r.workers is None else f"{r.workers} wkr",
                     r.cache + ("" if r.complete else " (interrupted)"), r.measures, _num(r.samples_per_s),
                     _num(r.mb_per_s, 1), _ms(r.latency_ms.p50), _ms(r.latency_ms.p90), _ms(r.latency_ms.p99),
                     _ms(r.latency_ms.p999), _ms(r.latency_ms.max),
                     _num(r.cpu.iobench_cores, 2) if r.cpu.iobench_cores is not None else "-",
                     _num(r.efficiency, 2) if r.efficiency is not None else "-", r.gpus or "-",
                     au_cell(r.au)))
    return _table(head, rows, left=2)


def _fio_section(result: Result) -> str:
    b = result.baseline
    if b is None or not b.fio:
        note = (b.note if b and b.note else "no fio baseline in this result" +
                ("" if result.settings.fio else " (--no-fio)"))
        return f'<p class="muted">{_esc(note)}.</p>'
    rows = [(x.concurrency, x.cache, _num(x.files_per_s), _num(x.mb_per_s, 1), _ms(x.latency_ms.p50),
             _ms(x.latency_ms.p99), x.files) for x in b.fio]
    out = [f"<p>fio {_esc(b.fio_version or '')} read the same files (each job: open, one read of the whole file, "
           "close), at each concurrency and cache state.</p>",
           _table(("jobs", "cache", "files/s", "MB/s", "read p50 ms", "read p99 ms", "files"), rows, left=0)]
    eff = [r for r in replay_runs(result) if r.efficiency is not None]
    if eff:
        rows2 = [(_readers(r), r.cache, _num(r.samples_per_s), _num(r.efficiency, 2)) for r in eff]
        out.append("<h3>Efficiency: iobench's loader against fio at the same concurrency and cache state</h3>")
        out.append(_table(("readers", "cache", "samples/s", "samples/s ÷ fio files/s"), rows2, left=2))
        out.append('<p class="muted">Near 1: the loader gets what the storage gives. Well below 1: the loader '
                   "pattern (or the client) costs throughput. Above 1: fio's per-file overhead set fio's pace.</p>")
    if b.note:
        out.append(f'<p class="muted">{_esc(b.note)}</p>')
    return "".join(out)


def _metadata_section(result: Result) -> str:
    if not result.metadata:
        why = "" if result.settings.metadata else " (--no-metadata)"
        return f'<p class="muted">No metadata phase in this result{why}.</p>'
    m0 = result.metadata[0]
    rows = [(m.cache, f"{m.list_s:.3f}", _num(m.stat_per_s), _ms(m.stat_ms.p99), _num(m.open_close_per_s),
             _ms(m.open_close_ms.p99), f"{m.projected_list_s:,.1f} s") for m in result.metadata]
    return (f"<p>{m0.files:,} files in {m0.dirs:,} folders, one thread: listing as torchvision's ImageFolder does, "
            "stat() and open()+close() of a sample.</p>"
            + _table(("cache", "list s", "stat/s", "stat p99 ms", "open+close/s", "open+close p99 ms",
                      f"listing {m0.scale_files:,} files (predicted)"), rows)
            + '<p class="muted">The predicted listing time is the start-up cost before the first batch at full '
              "scale (linear in files: a prediction, not a measurement).</p>")


def _mitigation_section(result: Result) -> str:
    if not result.mitigations:
        return ('<p class="muted">No mitigation phase in this result (run with --mitigations to measure LMDB, tar '
                "shards, fadvise, readahead and more readers).</p>")
    ms = result.mitigations
    rows = [(m.name, m.source, _num(m.samples_per_s), f"{m.speedup:.2f}x",
             _gb(m.extra_bytes) if m.extra_bytes else "-", f"{m.pack_s:.1f} s" if m.pack_s else "-",
             m.gpus_fed if m.gpus_fed is not None else "-", m.note or "") for m in ms]
    best = max(range(len(ms)), key=lambda i: ms[i].speedup)
    table = _table(("mitigation", "source", "samples/s (cold)", "speed-up", "extra space", "pack time", "GPUs fed",
                    "note"), rows, left=2, win={(best, 3)} if ms[best].speedup > 1 else None,
                   text_cols=(7,))
    bars = [(m.name, m.speedup, "#2ca02c" if m.speedup >= 1.1 else ("#d62728" if m.speedup < 0.9 else "#9aa5b1"))
            for m in ms]
    chart = bar_chart(bars, title="speed-up against the baseline", x_label="speed-up (× baseline samples/s, cold)",
                      marks=[(1.0, "baseline")], fmt=lambda x: f"{x:.2f}x")
    return (table + _figure(chart, "Each mitigation against the baseline: same read pattern, same readers, cold; "
                                   "green: at least 10% faster, red: at least 10% slower."))


def _training_section(result: Result) -> str:
    train = [r for r in result.runs if r.gpus]
    if not train:
        return ('<p class="muted">No training runs with emulated GPUs in this result: GPUs fed is predicted from the '
                "sustained rate.</p>")
    tau = result.settings.au_target
    rows = [(r.gpus, _num(r.consumer_rate), _readers(r), r.cache, _steps_per_gpu(result, r),
             au_cell(r.au),
             au_cell(r.au_min), _num(r.delivered_per_s),
             ("fed" if r.au is not None and r.au >= tau else "starved") + ("" if r.complete else " (interrupted)")
             + ("" if r.valid else " (invalid)"))
            for r in train]
    return ("<p>Each emulated GPU has its own DataLoader over its shard of the epoch; "
            f"{_consumer_words(result)}. AU = compute time ÷ wall time (first step excluded); a GPU counts as fed at "
            f"AU ≥ {tau:.0%}.</p>"
            + _table(("GPUs", "samples/s per GPU", "loaders (per GPU)", "cache", "batches per GPU", "AU", "lowest AU",
                      "delivered samples/s", "outcome"), rows, left=0))


def _whatifs(result: Result) -> Measured | None:
    """The plan's what-ifs for this result's own GPU consumer (None without one or without a cold run)."""
    s = result.settings
    if not s.rate_per_gpu:
        return None
    m = plan(s.gpu or "gpu", 1, s.model or "model", au_target=s.au_target, rate=s.rate_per_gpu, result=result).measured
    return m if m is not None and m.cache == "cold" else None


def _whatif_rows(m: Measured) -> tuple[list[tuple], list[tuple]]:
    cache = [(f"{w.fraction:.0%}", _num(w.samples_per_s), w.gpus, w.label) for w in m.cache_whatif]
    readers = [(w.readers, _num(w.samples_per_s), _num(w.measured) if w.measured is not None else "-", w.gpus)
               for w in m.concurrency_whatif]
    return cache, readers


_CACHE_HEAD = ("cached fraction x", "samples/s (predicted)", "GPUs fed (predicted)", "")
_READERS_HEAD = ("readers", "samples/s (predicted)", "measured", "GPUs fed (predicted)")


def _whatif_section(result: Result) -> str:
    m = _whatifs(result)
    if m is None:
        return '<p class="muted">No what-ifs: they need a cold (storage) run and a GPU consumer rate.</p>'
    cache, readers = _whatif_rows(m)
    out = ['<p>Predictions from this result, not measurements (the arithmetic of <span class="mono">iobench plan'
           "</span>).</p>"]
    if cache:
        out.append(f"<h3>Part of the dataset cached: F = 1 / (x/C + (1−x)/S), C = {_num(m.warm_samples_per_s)} warm "
                   f"(page cache), S = {_num(m.samples_per_s)} cold (DS-Analyzer)</h3>")
        out.append(_table(_CACHE_HEAD, cache, left=1, text_cols=(3,)))
    if readers:
        out.append(f"<h3>More readers: Little's law, {m.in_flight or 0:.2f} requests in flight at {m.readers} readers "
                   f"and p50 {_ms(m.p50_ms)} ms</h3>")
        out.append(_table(_READERS_HEAD, readers, left=0))
        out.append(f'<p class="muted">{_esc(m.cap_reason)}.</p>')
    out += [f'<p class="muted">{_esc(n)}.</p>' for n in m.notes if "no cache rate" in n]
    out.append(f'<p class="muted">{_esc(_whatif_gpu_note(result, m))}</p>')
    return "".join(out)


def _whatif_gpu_note(result: Result, m: Measured) -> str:
    text = ("GPUs fed (predicted) = samples/s ÷ (AU target × per-GPU rate), the arithmetic the verdict uses without "
            "training runs.")
    v = result.verdict
    if v is not None and v.gpus_fed_confirmed and v.gpus_fed is not None and v.gpus_fed < m.gpus_supported:
        text += (f" Here the training runs measured {v.gpus_fed} at today's rate where the arithmetic says "
                 f"{m.gpus_supported}: read these as upper bounds.")
    return text


def _caveat_list(items: Sequence[str]) -> str:
    if not items:
        return ""
    return '<ul class="caveats" id="caveats">' + "".join(f"<li>{_esc(c)}</li>" for c in items) + "</ul>"


def _sections(result: Result, f: Facts, level: int = 2) -> str:
    """The detail sections of one result (everything below the verdict)."""
    h = f"h{level}"
    out = [f"<{h}>Environment</{h}>", _environment(result)]
    out.append(f"<{h}>Throughput</{h}>")
    out.append(throughput_chart(result, f) or '<p class="muted">No replay runs in this result.</p>')
    if result.runs:
        out.append(_runs_table(result.runs))
    out.append(f"<{h}>Latency</{h}>")
    out.append(latency_chart(_latency_series(result), "latency percentiles per run")
               or '<p class="muted">No replay runs.</p>')
    if f.main is not None and len(f.main.timeline) > 1:
        out.append(f"<{h}>Samples/s over time</{h}>")
        name = f"{f.main.cache}, {_readers(f.main)}, {f.main.order}"
        out.append(timeline_chart([(name, f.main, COLD if f.main.cache == "cold" else WARM)],
                                  "samples/s over time",
                                  f"The main run ({name}, {f.main.samples:,} samples in {f.main.seconds:.2f} s, mean "
                                  f"{f.main.samples_per_s:,.0f}/s): a flat line is a steady supply; dips are "
                                  "stalls the GPUs would feel."))
    out.append(f"<{h}>fio baseline</{h}>")
    out.append(_fio_section(result))
    out.append(f"<{h}>Metadata</{h}>")
    out.append(_metadata_section(result))
    out.append(f"<{h}>Mitigations</{h}>")
    out.append(_mitigation_section(result))
    out.append(f"<{h}>Training runs (emulated GPUs)</{h}>")
    out.append(_training_section(result))
    out.append(f"<{h}>What-ifs (predictions)</{h}>")
    out.append(_whatif_section(result))
    return "\n".join(out)


def _footer(results: Sequence[Result]) -> str:
    versions = ", ".join(sorted({r.host.iobench for r in results}))
    return (f"<footer>iobench {_esc(versions)} — schema {_esc(results[0].schema_)}. Units: MB = 10^6 B, kB = 1,000 B, "
            "latencies in ms. Self-contained file: no network needed to read it.</footer>")


def _single_html(result: Result, label: str) -> str:
    f = facts(result, label)
    body = [f'<header class="top"><h1>Can this storage feed the GPUs? {_esc(label)}</h1>'
            f'<div class="sub">iobench report — {_esc(_when(result.created))} on {_esc(result.host.hostname)} — '
            f"{result.dataset.files:,} files, {_esc(result.settings.engine)} engine</div></header>"]
    if not result.complete:
        body.append('<div class="banner" id="incomplete">Unfinished run (complete: false): the figures cover what was '
                    "measured before it stopped; the verdict is provisional.</div>")
    body.append(_hero(result, f))
    body.append(_caveat_list(f.caveats))
    body.append(_sections(result, f))
    body.append(_footer([result]))
    return _page(f"iobench: {label}", "\n".join(body))


# --------------------------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Metric:
    name: str
    value: Callable[[Result, Facts], float | str | None]
    better: str | None = None  # "higher", "lower" or None (information only)
    fmt: Callable[[object], str] = str


def _fio_best(result: Result) -> float | None:
    best = _fio_best_run(result)
    return best.files_per_s if best else None


def _meta(result: Result, attr: str) -> float | None:
    cold = [m for m in result.metadata if m.cache == "cold"] or result.metadata
    return getattr(cold[0], attr) if cold else None


def _best_mit(result: Result) -> str | None:
    ms = [m for m in result.mitigations if m.name != "baseline"]
    if not ms:
        return None
    m = max(ms, key=lambda x: x.speedup)
    return f"{m.name} ({m.speedup:.2f}x)"


def _fmt_num(x: object) -> str:
    return _num(x) if isinstance(x, int | float) else str(x)


def _fmt_ms(x: object) -> str:
    return _ms(x) if isinstance(x, int | float) else str(x)


def _gpus_cell(result: Result, f: Facts) -> float | None:
    return f.verdict.gpus_fed if f.verdict and f.verdict.gpus_fed is not None else None


METRICS: tuple[Metric, ...] = (
    Metric("GPUs fed", _gpus_cell, "higher"),
    Metric("how GPUs fed was found", lambda r, f: None if not f.verdict or f.verdict.gpus_fed is None else
           ("training runs" if f.verdict.gpus_fed_confirmed else "predicted")),
    Metric("limit", lambda r, f: f.verdict.limit if f.verdict else None),
    Metric("cold samples/s (best)", lambda r, f: f.best_cold.samples_per_s if f.best_cold else None, "higher",
           _fmt_num),
    Metric("cold MB/s (that run)", lambda r, f: f.best_cold.mb_per_s if f.best_cold else None, "higher", _fmt_num),
    Metric("at readers", lambda r, f: _readers(f.best_cold) if f.best_cold else None),
    Metric("saturates at (readers)", lambda r, f: f.verdict.saturates_at if f.verdict else None),
    Metric("cold p50 latency, ms", lambda r, f: f.best_cold.latency_ms.p50 if f.best_cold else None, "lower", _fmt_ms),
    Metric("cold p99 latency, ms", lambda r, f: f.best_cold.latency_ms.p99 if f.best_cold else None, "lower", _fmt_ms),
    Metric("cold p99.9 latency, ms", lambda r, f: f.best_cold.latency_ms.p999 if f.best_cold else None, "lower",
           _fmt_ms),
    Metric("warm samples/s (best)", lambda r, f: f.best_warm.samples_per_s if f.best_warm else None, "higher",
           _fmt_num),
    Metric("fio cold files/s (best)", lambda r, f: _fio_best(r), "higher", _fmt_num),
    Metric("stat()/s, cold, 1 thread", lambda r, f: _meta(r, "stat_per_s"), "higher", _fmt_num),
    Metric("open+close/s, cold, 1 thread", lambda r, f: _meta(r, "open_close_per_s"), "higher", _fmt_num),
    Metric("listing at full scale, s (predicted)", lambda r, f: _meta(r, "projected_list_s"), "lower",
           lambda x: f"{x:,.1f}" if isinstance(x, int | float) else str(x)),
    Metric("best mitigation", lambda r, f: _best_mit(r)),
    Metric("file system", lambda r, f: f"{r.mount.fstype} ({r.mount.family})"),
    Metric("mount options", lambda r, f: r.mount.options),
    Metric("dataset", lambda r, f: f"{r.dataset.files:,} files, mean {r.dataset.mean_bytes / 1000:,.0f} kB"),
    Metric("client", lambda r, f: f"{r.host.hostname}, {r.host.cpus or '?'} CPUs, {r.host.ram_bytes / 1e9:,.0f} GB"),
    Metric("finished", lambda r, f: "yes" if r.complete else "NO (partial)"),
)


def compare_table(results: Sequence[Result], fs: Sequence[Facts]) -> tuple[list[list[str]], set[tuple[int, int]],
                                                                           dict[str, list[int]]]:
    """Rows (metric, value per system), winner cells (row, column) and winners by metric name."""
    rows: list[list[str]] = []
    wins: set[tuple[int, int]] = set()
    winners: dict[str, list[int]] = {}
    for i, m in enumerate(METRICS):
        vals = [m.value(r, f) for r, f in zip(results, fs, strict=True)]
        rows.append([m.name] + ["-" if v is None else m.fmt(v) for v in vals])
        nums = [(j, float(v)) for j, v in enumerate(vals) if isinstance(v, int | float)]
        if m.better and len(nums) >= 2 and len({v for _, v in nums}) > 1:
            target = max(v for _, v in nums) if m.better == "higher" else min(v for _, v in nums)
            best = [j for j, v in nums if v == target]
            winners[m.name] = best
            wins |= {(i, j + 1) for j in best}
    return rows, wins, winners


def like_for_like(results: Sequence[Result], names: Sequence[str]) -> list[str]:
    """Differences that make the comparison not like for like."""
    out = []

    def differ(what: str, key: Callable[[Result], object]) -> None:
        vals = [key(r) for r in results]
        if len(set(map(str, vals))) > 1:
            out.append(f"{what} differ: " + "; ".join(f"{n}: {v}" for n, v in zip(names, vals, strict=True)))

    differ("dataset sizes", lambda r: f"{r.dataset.files:,} files")
    means = [r.dataset.mean_bytes for r in results]
    if max(means) > 1.1 * min(means):
        out.append("mean file sizes differ by more than 10%: " + "; ".join(
            f"{n}: {m / 1000:,.0f} kB" for n, m in zip(names, means, strict=True)))
    differ("engines", lambda r: r.settings.engine)
    differ("reader sweeps", lambda r: ",".join(map(str, r.settings.concurrency)))
    differ("GPU consumers", lambda r: f"{r.settings.gpu} x {r.settings.model} at {r.settings.rate_per_gpu}")
    differ("client hosts", lambda r: r.host.hostname)
    differ("decode settings", lambda r: r.settings.decode)
    return out


def _cards(results: Sequence[Result], fs: Sequence[Facts], names: Sequence[str], winners: dict[str, list[int]]) -> str:
    key = "GPUs fed" if "GPUs fed" in winners else "cold samples/s (best)"
    top = set(winners.get(key, []))
    out = ['<div class="cards" id="gpus-fed-per-system">']
    for i, (r, f, n) in enumerate(zip(results, fs, names, strict=True)):
        v = f.verdict
        gpu, model = _gpu_name(v, r), _model_name(v, r)
        if v is not None and v.gpus_fed is not None:
            big = str(v.gpus_fed)
            sub = f"{gpu} GPU{'' if v.gpus_fed == 1 else 's'} fed ({model}, AU ≥ {v.au_target or 0:.0%})"
            how = "training runs" if v.gpus_fed_confirmed else "predicted"
        else:
            big = _short(f.best_cold.samples_per_s) if f.best_cold else "–"
            sub, how = "samples/s cold", ""
        rate = (f"{f.best_cold.samples_per_s:,.0f} samples/s cold, p99 {_ms(f.best_cold.latency_ms.p99)} ms"
                if f.best_cold else "no cold figure")
        limit = f"limit: {v.limit}" if v and v.limit else ""
        if f.need_per_gpu and f.best_cold:
            rate += f"; {times(f.best_cold.samples_per_s / f.need_per_gpu)} one {gpu}'s need"
        badge = '<span class="badge ok">best</span>' if i in top else ""
        part = "" if r.complete else '<span class="badge warn">unfinished</span>'
        cls = "bad" if big == "0" else ("ok" if i in top else "")
        out.append(f'<div class="card{" best" if i in top else ""}"><div class="name">{_esc(n)}</div>'
                   f'<div class="big {cls}">{_esc(big)}</div><div class="bigsub">{_esc(sub)}</div>'
                   f'<div class="muted">{_esc(rate)}</div><div class="muted">{_esc(limit)}'
                   f'{" — " + _esc(how) if how else ""}</div>{badge}{part}</div>')
    out.append("</div>")
    return "".join(out)


def _winner_sentences(names: Sequence[str], winners: dict[str, list[int]]) -> list[str]:
    pick = (("GPUs fed", "Most GPUs fed"), ("cold samples/s (best)", "Fastest cold reads"),
            ("cold p99 latency, ms", "Lowest tail latency (p99)"),
            ("listing at full scale, s (predicted)", "Fastest start-up listing"),
            ("open+close/s, cold, 1 thread", "Fastest metadata (open+close)"))
    out = []
    for key, words in pick:
        if key in winners:
            out.append(f"{words}: {' and '.join(names[j] for j in winners[key])}")
    return out


def compare_headline(results: Sequence[Result], fs: Sequence[Facts], names: Sequence[str]) -> str:
    """The comparison in one sentence: who feeds the most GPUs, or who reads fastest, and by how much."""
    fed = [f.verdict.gpus_fed if f.verdict and f.verdict.gpus_fed is not None else None for f in fs]
    rates = [f.best_cold.samples_per_s if f.best_cold else None for f in fs]
    out = []
    known = [(g, i) for i, g in enumerate(fed) if g is not None]
    if len({g for g, _ in known}) > 1:
        g, i = max(known)
        rest = ", ".join(f"{names[j]}: {h}" for h, j in known if j != i)
        gpu = _gpu_name(fs[i].verdict, results[i])
        out.append(f"{names[i]} feeds the most {gpu} GPUs: {g} (against {rest})")
    ranked = sorted(((x, i) for i, x in enumerate(rates) if x), reverse=True)
    if len(ranked) >= 2:
        (x, i), (y, j) = ranked[0], ranked[1]
        out.append(f"{names[i]} reads fastest from storage (cold): {x:,.0f} samples/s, {x / y:.1f}x "
                   f"{'the next best, ' if len(ranked) > 2 else ''}{names[j]}")
    if known and all(g == 0 for g, _ in known):
        v = fs[known[0][1]].verdict
        tau = (v.au_target if v and v.au_target else results[0].settings.au_target)
        out.append(f"none keeps even one {_gpu_name(v, results[0])} ≥ {tau:.0%} busy training "
                   f"{_model_name(v, results[0])}")
    text = "; ".join(out)
    if text.startswith("none"):
        text = "N" + text[1:]
    text = text + "." if text else "No storage figures to compare."
    mixed = mixed_kinds([(n, r.settings.rate_per_gpu, rate_kind_of(r)) for r, n in zip(results, names, strict=True)])
    return f"{text} Warning: {mixed}" if mixed else text


def _compare_html(results: Sequence[Result], names: Sequence[str]) -> str:
    fs = [facts(r, n) for r, n in zip(results, names, strict=True)]
    rows, wins, winners = compare_table(results, fs)
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(results))]
    body = [f'<header class="top"><h1>Pre-purchase comparison: {len(results)} storage systems, same workload</h1>'
            f'<div class="sub">iobench compare — {_esc(", ".join(names))}</div></header>']
    partial = [n for r, n in zip(results, names, strict=True) if not r.complete]
    if partial:
        body.append(f'<div class="banner" id="incomplete">Unfinished run(s): {_esc(", ".join(partial))} '
                    "(complete: false): their figures cover what was measured before they stopped.</div>")
    body.append('<section class="hero" id="verdict" style="display:block">')
    body.append(f'<p class="headline" id="headline">{_esc(compare_headline(results, fs, names))}</p>')
    body.append(_cards(results, fs, names, winners))
    sentences = _winner_sentences(names, winners)
    if sentences:
        body.append('<p class="verdict"><strong>Winners:</strong> ' + _esc(". ".join(sentences)) + ".</p>")
    body.append("</section>")
    diffs = like_for_like(results, names)
    if diffs:
        body.append("<h3>Not like for like</h3>" + _caveat_list(diffs))
    body.append("<h2>Side by side</h2>")
    body.append(_table(["metric", *names], rows, left=1, win=wins, text_cols=range(1, len(names) + 1)))
    body.append('<p class="muted">Green: the best value of a row (higher or lower is better as the metric says); '
                "rows without a direction are for information.</p>")
    # overlaid curves
    series, xs = [], []
    for n, r, c in zip(names, results, colors, strict=True):
        for cache, kind, pts in _curves(r):
            series.append(Series(f"{n}: {cache}" + ("" if kind == "shuffled" else f", {kind}"), pts, c,
                                 dash=cache == "warm"))
            xs += [x for x, _ in pts]
    body.append("<h2>Throughput against readers</h2>")
    if series:
        ymax = max(y for s in series for _, y in s.points)
        first = next((i for i, f in enumerate(fs) if f.need_per_gpu), None)
        lines, note = _need_lines(fs[first], results[first], ymax) if first is not None else ([], "")
        ys = [y for s in series for _, y in s.points if y > 0]
        y_log = bool(ys) and max(ys) > 10 * min(ys)  # systems an order of magnitude apart: log scale
        svg = line_chart(series, title="samples/s vs readers, all systems", x_label="readers (threads or workers)",
                         y_label="samples/s" + (" (log scale)" if y_log else ""), x_log=True, x_ticks=_x_ticks(xs),
                         hlines=lines, y_log=y_log)
        body.append(_figure(svg, "Solid: cold (storage); dashed: warm (re-read, often the page cache)." + note))
    body.append("<h2>Latency</h2>")
    named = [(n, f.best_cold.latency_ms, c, False) for n, f, c in zip(names, fs, colors, strict=True) if f.best_cold]
    body.append(latency_chart(named, "latency percentiles of each system's best cold run")
                or '<p class="muted">No cold runs.</p>')
    tl = [(n, f.main, c) for n, f, c in zip(names, fs, colors, strict=True) if f.main and len(f.main.timeline) > 1]
    if tl:
        body.append("<h2>Samples/s over time</h2>")
        body.append(timeline_chart(tl, "samples/s over time, each system's main run",
                                   "Each system's main run (its best cold shuffled run): steadier is better."))
    if any(r.mitigations for r in results):
        body.append("<h2>Mitigations</h2>")
        mnames = list(dict.fromkeys(m.name for r in results for m in r.mitigations))
        mrows = []
        for mn in mnames:
            cells = []
            for r in results:
                m = next((m for m in r.mitigations if m.name == mn), None)
                cells.append(f"{m.samples_per_s:,.0f}/s ({m.speedup:.2f}x)" if m else "-")
            mrows.append([mn, *cells])
        body.append(_table(["mitigation", *names], mrows, left=1))
    body.append("<h2>Caveats per system</h2>")
    for n, f in zip(names, fs, strict=True):
        body.append(f"<h3>{_esc(n)}</h3>" + (_caveat_list(f.caveats) or '<p class="muted">None.</p>'))
    body.append("<h2>Each system in full</h2>")
    for n, r, f in zip(names, results, fs, strict=True):
        text = f.verdict.text if f.verdict else "no verdict"
        body.append(f"<details><summary>{_esc(n)}</summary><p>{_esc(text)}</p>{_sections(r, f, level=3)}</details>")
    body.append(_footer(results))
    return _page("iobench compare: " + ", ".join(names), "\n".join(body))


# --------------------------------------------------------------------------------------------- public renderers


def render_html(results: Sequence[Result], names: Sequence[str] | None = None) -> str:
    """One self-contained HTML page: the single-run report for one result, the comparison for several."""
    results = list(results)
    if not results:
        raise UserError("no results to report")
    ls = labels(results, names)
    return _single_html(results[0], ls[0]) if len(results) == 1 else _compare_html(results, ls)


def _md_table(head: Sequence[str], rows: Sequence[Sequence[object]], bold: set[tuple[int, int]] | None = None) -> str:
    def cell(x: object) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(h) for h in head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for ri, row in enumerate(rows):
        cells = [f"**{cell(c)}**" if bold and (ri, i) in bold else cell(c) for i, c in enumerate(row)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _md_sections(result: Result, f: Facts, h: str = "##") -> list[str]:
    m, d, hst, s = result.mount, result.dataset, result.host, result.settings
    out = [f"{h} Environment", "", _md_table(("", ""), [
        ("mount", f"{m.path} ({m.source})"), ("file system", f"{m.fstype} ({m.family})"),
        ("mount options", f"`{m.options}`"),
        ("details", ", ".join(f"{k}={v}" for k, v in m.details.items()) or "-"),
        ("cache states", ", ".join(s.cache) + " (cold by "
         + (", ".join(sorted({r.eviction for r in result.runs if r.eviction})) or "-") + ")"),
        ("dataset", f"{d.files:,} files, {_gb(d.bytes)}, mean {d.mean_bytes / 1000:,.1f} kB, median "
                    f"{d.median_bytes / 1000:,.1f} kB"),
        ("client", f"{hst.hostname}, {hst.cpus} CPUs, {_gb(hst.ram_bytes)} RAM, kernel {hst.kernel}, "
                   f"{'root' if hst.root else 'not root'}"),
        ("when", f"{_when(result.created)} → {_when(result.finished)}"),
        ("to repeat", f"`{shlex.join(result.command)}`")]), ""]
    if result.runs:
        out += [f"{h} Runs", "", _md_table(
            ("engine", "pattern", "readers", "cache", "measures", "samples/s", "MB/s", "p50 ms", "p99 ms", "p99.9 ms",
             "max ms", "vs fio", "GPUs", "AU"),
            [(_engine(r) + (f" [{r.mitigation}]" if r.mitigation else ""), r.order, _readers(r),
              r.cache + ("" if r.complete else " (interrupted)"), r.measures, _num(r.samples_per_s),
              _num(r.mb_per_s, 1), _ms(r.latency_ms.p50), _ms(r.latency_ms.p99), _ms(r.latency_ms.p999),
              _ms(r.latency_ms.max), _num(r.efficiency, 2) if r.efficiency is not None else "-", r.gpus or "-",
              au_cell(r.au)) for r in result.runs]), ""]
    b = result.baseline
    out += [f"{h} fio baseline", ""]
    if b and b.fio:
        out += [_md_table(("jobs", "cache", "files/s", "MB/s", "read p50 ms", "read p99 ms"),
                          [(x.concurrency, x.cache, _num(x.files_per_s), _num(x.mb_per_s, 1), _ms(x.latency_ms.p50),
                            _ms(x.latency_ms.p99)) for x in b.fio]), ""]
    else:
        out += [(b.note if b and b.note else "No fio baseline in this result."), ""]
    out += [f"{h} Metadata", ""]
    if result.metadata:
        out += [_md_table(("cache", "list s", "stat/s", "stat p99 ms", "open+close/s", "open+close p99 ms",
                           f"listing {result.metadata[0].scale_files:,} files (predicted)"),
                          [(x.cache, f"{x.list_s:.3f}", _num(x.stat_per_s), _ms(x.stat_ms.p99),
                            _num(x.open_close_per_s), _ms(x.open_close_ms.p99), f"{x.projected_list_s:,.1f} s")
                           for x in result.metadata]), ""]
    else:
        out += ["No metadata phase in this result.", ""]
    out += [f"{h} Mitigations", ""]
    if result.mitigations:
        out += [_md_table(("mitigation", "source", "samples/s (cold)", "speed-up", "extra space", "GPUs fed", "note"),
                          [(x.name, x.source, _num(x.samples_per_s), f"{x.speedup:.2f}x",
                            _gb(x.extra_bytes) if x.extra_bytes else "-",
                            x.gpus_fed if x.gpus_fed is not None else "-", x.note or "")
                           for x in result.mitigations]), ""]
    else:
        out += ["No mitigation phase in this result (`--mitigations`).", ""]
    train = [r for r in result.runs if r.gpus]
    out += [f"{h} Training runs (emulated GPUs)", ""]
    if train:
        tau = s.au_target
        out += [_md_table(("GPUs", "samples/s per GPU", "batches per GPU", "AU", "lowest AU", "delivered samples/s",
                           "outcome"),
                          [(r.gpus, _num(r.consumer_rate), _steps_per_gpu(result, r),
                            au_cell(r.au),
                            au_cell(r.au_min), _num(r.delivered_per_s),
                            "fed" if r.au is not None and r.au >= tau else "starved") for r in train]), ""]
    else:
        out += ["No training runs: GPUs fed is predicted from the sustained rate.", ""]
    m = _whatifs(result)
    if m is not None:
        cache, readers = _whatif_rows(m)
        out += [f"{h} What-ifs (predictions, not measurements)", ""]
        if cache:
            out += [f"Part of the dataset cached, F = 1 / (x/C + (1-x)/S), C = {_num(m.warm_samples_per_s)} warm, "
                    f"S = {_num(m.samples_per_s)} cold:", "", _md_table(_CACHE_HEAD, cache), ""]
        if readers:
            out += [f"More readers, Little's law ({m.in_flight or 0:.2f} in flight at {m.readers} readers, p50 "
                    f"{_ms(m.p50_ms)} ms); {m.cap_reason}:", "", _md_table(_READERS_HEAD, readers), ""]
        out += [_whatif_gpu_note(result, m), ""]
    return out


def _md_verdict(result: Result, f: Facts) -> list[str]:
    v, best = f.verdict, f.best_cold
    out = [f"### {headline(result, f)}", ""]
    if v is not None and v.gpus_fed is not None:
        gpu, model = _gpu_name(v, result), _model_name(v, result)
        how = "measured with training runs" if v.gpus_fed_confirmed else "predicted from the sustained rate"
        out.append(f"**GPUs fed: {v.gpus_fed} × {gpu}** training {model} at AU ≥ {(v.au_target or 0):.0%} ({how})"
                   + (f"; **limit: {v.limit}**" if v.limit else ""))
        out.append("")
    facts_rows = []
    if best:
        facts_rows.append(("storage delivers (cold)", f"{best.samples_per_s:,.0f} samples/s, {best.mb_per_s:,.0f} MB/s "
                                                      f"at {_readers(best)}; p99 {_ms(best.latency_ms.p99)} ms"))
    if f.need_per_gpu is not None:
        rate = v.rate_per_gpu if v and v.rate_per_gpu else result.settings.rate_per_gpu
        facts_rows.append((f"one {_gpu_name(v, result)} needs", f"{f.need_per_gpu:,.0f} samples/s (AU target × "
                                                                f"{rate:,.0f}/s per GPU)"))
        facts_rows.append(("per-GPU rate source", result.settings.rate_source or "-"))
    if f.best_warm:
        facts_rows.append(("warm re-read", f"{f.best_warm.samples_per_s:,.0f} samples/s ({f.best_warm.measures})"))
    if facts_rows:
        out += [_md_table(("", ""), facts_rows), ""]
    out += [f"> **Verdict{' (provisional)' if f.provisional else ''}:** "
            + (v.text if v else "No verdict: nothing was measured."), ""]
    if f.caveats:
        out += ["**Caveats**", ""] + [f"- {c}" for c in f.caveats] + [""]
    return out


def render_markdown(results: Sequence[Result], names: Sequence[str] | None = None) -> str:
    """The same report in Markdown (tables, no plots)."""
    results = list(results)
    if not results:
        raise UserError("no results to report")
    ls = labels(results, names)
    if len(results) == 1:
        r, f = results[0], facts(results[0], ls[0])
        out = [f"# Can this storage feed the GPUs? {ls[0]}", "",
               f"iobench report, {_when(r.created)} on {r.host.hostname}. MB = 10^6 B; latencies in ms.", ""]
        if not r.complete:
            out += ["**Unfinished run (complete: false): the figures cover what was measured before it stopped; "
                    "the verdict is provisional.**", ""]
        out += _md_verdict(r, f) + _md_sections(r, f)
        return "\n".join(out).rstrip() + "\n"
    fs = [facts(r, n) for r, n in zip(results, ls, strict=True)]
    rows, wins, winners = compare_table(results, fs)
    out = [f"# Pre-purchase comparison: {len(results)} storage systems, same workload", ""]
    partial = [n for r, n in zip(results, ls, strict=True) if not r.complete]
    if partial:
        out += [f"**Unfinished run(s): {', '.join(partial)} (complete: false).**", ""]
    out += [f"**{compare_headline(results, fs, ls)}**", ""]
    gpus = [(n, f.verdict.gpus_fed if f.verdict else None) for n, f in zip(ls, fs, strict=True)]
    out += ["GPUs fed per system: " + "; ".join(f"**{n}: {g if g is not None else '-'}**" for n, g in gpus), ""]
    sentences = _winner_sentences(ls, winners)
    if sentences:
        out += ["Winners: " + ". ".join(sentences) + ".", ""]
    diffs = like_for_like(results, ls)
    if diffs:
        out += ["**Not like for like:**", ""] + [f"- {d}" for d in diffs] + [""]
    out += ["## Side by side", "", _md_table(["metric", *ls], rows, bold={(r, c) for r, c in wins}),
            "", "Bold: the best value of a row.", ""]
    for n, r, f in zip(ls, results, fs, strict=True):
        out += [f"## {n}", ""] + _md_verdict(r, f) + _md_sections(r, f, h="###")
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------------------------- CSV

CSV_COLUMNS = (
    "system", "created", "host", "mount", "fstype", "family", "remote", "dataset_files", "dataset_mean_bytes",
    "kind", "engine", "source", "order", "mitigation", "readers", "workers", "batch_size", "decode", "cache",
    "measures", "resident_before", "eviction", "complete", "samples", "bytes", "seconds", "samples_per_s", "mb_per_s",
    "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_p999_ms", "latency_max_ms", "latency_mean_ms",
    "open_p50_ms", "open_p99_ms", "decode_p50_ms", "cpu_busy_pct", "iowait_pct", "iobench_cores", "efficiency",
    "gpus", "consumer_rate", "au", "au_min", "delivered_per_s", "gpu", "model", "au_target", "verdict_gpus_fed",
    "verdict_limit",
)


def csv_rows(results: Sequence[Result], names: Sequence[str] | None = None) -> list[dict[str, object]]:
    """One flat row per measured run (replay, training, mitigation), and one per fio baseline run (kind "fio")."""
    rows: list[dict[str, object]] = []
    for r, n in zip(results, labels(results, names), strict=True):
        v = r.verdict
        common = {"system": n, "created": r.created, "host": r.host.hostname, "mount": r.mount.path,
                  "fstype": r.mount.fstype, "family": r.mount.family, "remote": r.remote,
                  "dataset_files": r.dataset.files, "dataset_mean_bytes": r.dataset.mean_bytes,
                  "gpu": r.settings.gpu, "model": r.settings.model, "au_target": r.settings.au_target,
                  "verdict_gpus_fed": v.gpus_fed if v else None, "verdict_limit": v.limit if v else None}
        for x in r.runs:
            kind = "training" if x.gpus else ("mitigation" if x.mitigation else "replay")
            lat = x.latency_ms
            rows.append({**common, "kind": kind, "engine": x.engine, "source": x.source, "order": x.order,
                         "mitigation": x.mitigation, "readers": x.concurrency, "workers": x.workers,
                         "batch_size": x.batch_size, "decode": x.decode, "cache": x.cache, "measures": x.measures,
                         "resident_before": x.resident_before, "eviction": x.eviction, "complete": x.complete,
                         "samples": x.samples, "bytes": x.bytes, "seconds": x.seconds,
                         "samples_per_s": x.samples_per_s, "mb_per_s": x.mb_per_s, "latency_p50_ms": lat.p50,
                         "latency_p90_ms": lat.p90, "latency_p99_ms": lat.p99, "latency_p999_ms": lat.p999,
                         "latency_max_ms": lat.max, "latency_mean_ms": lat.mean, "open_p50_ms": x.open_ms.p50,
                         "open_p99_ms": x.open_ms.p99, "decode_p50_ms": x.decode_ms.p50 if x.decode_ms else None,
                         "cpu_busy_pct": x.cpu.system_busy_pct, "iowait_pct": x.cpu.iowait_pct,
                         "iobench_cores": x.cpu.iobench_cores, "efficiency": x.efficiency, "gpus": x.gpus,
                         "consumer_rate": x.consumer_rate, "au": x.au, "au_min": x.au_min,
                         "delivered_per_s": x.delivered_per_s})
        for b in (r.baseline.fio if r.baseline else []):
            lat = b.latency_ms
            rows.append({**common, "kind": "fio", "engine": "fio", "source": "files", "order": "shuffled",
                         "readers": b.concurrency, "cache": b.cache, "measures": "unknown", "complete": True,
                         "samples": b.files, "bytes": b.bytes, "seconds": b.seconds, "samples_per_s": b.files_per_s,
                         "mb_per_s": b.mb_per_s, "latency_p50_ms": lat.p50, "latency_p90_ms": lat.p90,
                         "latency_p99_ms": lat.p99, "latency_p999_ms": lat.p999, "latency_max_ms": lat.max,
                         "latency_mean_ms": lat.mean})
    return rows


def write_csv(results: Sequence[Result], path: Path, names: Sequence[str] | None = None) -> None:
    """CSV with CSV_COLUMNS, one row per run (see csv_rows); empty cells for what does not apply."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, extrasaction="raise")
        w.writeheader()
        for row in csv_rows(list(results), names):
            w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_COLUMNS})
    tmp.replace(path)
