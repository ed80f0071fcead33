"""Which runs go in which chart of the HTML page, and what each chart's caption says. svg.py draws them.

Cold and warm throughput are drawn on scales of their own: warm reads (often this client's RAM) run several times
faster than cold ones, and on one axis they flattened the cold curves, the storage figures the report is about.
A run's samples/s over time is drawn only when its timeline has enough points to show a trend."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import cycle

from iobench.answer.rules import mean_by_concurrency, replay_runs
from iobench.answer.words import raw_tool
from iobench.report.facts import Facts
from iobench.report.format import gpu_name, readers, short
from iobench.report.svg import Series, bar_chart, line_chart
from iobench.result import Latency, Result, Run

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
COLD, WARM, RAW = "#1f77b4", "#ff7f0e", "#7f7f7f"
MIN_TREND_POINTS = 5  # rate steps a timeline needs before its chart shows more than start-up and end


@dataclass(frozen=True)
class Figure:
    svg: str  # drawn by svg.py, escaped there
    caption: str


# --------------------------------------------------------------------------------------------- throughput


def _curves(result: Result) -> list[tuple[str, str, list[tuple[float, float]]]]:
    """(cache, order/decode name, [(requests in flight: the readers for files, mean samples/s)]) for the replay
    sweep, cold first."""
    groups: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for r in replay_runs(result):
        kind = r.order + (", decode" if r.decode else "") + ("" if r.source == "files" else f", {r.source}")
        groups[(r.cache, kind)].append((r.in_flight, r.samples_per_s))
    return [(cache, kind, [(float(c), mean) for c, mean in mean_by_concurrency(points).items()])
            for (cache, kind), points in sorted(groups.items(), key=lambda kv: (kv[0][0] != "cold", kv[0][1]))]


def _raw_curves(result: Result) -> list[tuple[str, list[tuple[float, float]]]]:
    by: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for b in (result.baseline.points if result.baseline else []):
        by[b.cache].append((float(b.concurrency), b.samples_per_s))
    return [(cache, sorted(v)) for cache, v in sorted(by.items())]


def _readers_unit(result: Result) -> str:
    if result.mount.objects:
        return "requests in flight (readers x --in-flight)"
    return "DataLoader workers" if result.settings.reader == "workers" else "reader threads"


def _x_ticks(values: Iterable[float]) -> list[tuple[float, str]] | None:
    vals = sorted({v for v in values if v > 0})
    return [(v, short(v)) for v in vals] if 0 < len(vals) <= 12 else None


def _need_lines(f: Facts, result: Result, ymax: float) -> tuple[list[tuple[float, str]], str]:
    """A dashed line at one GPU's need, when it fits the chart; else a sentence for the caption."""
    if f.need_per_gpu is None:
        return [], ""
    gpu = gpu_name(f.verdict, result)
    text = f"1 {gpu} needs {f.need_per_gpu:,.0f}/s (AU ≥ {f.au_target:.0%})"
    if f.need_per_gpu <= 2.5 * ymax:
        return [(f.need_per_gpu, text)], ""
    return [], f" One {gpu} needs {f.need_per_gpu:,.0f} samples/s at AU ≥ {f.au_target:.0%}: off this chart's scale."


_CACHE_WORDS = {
    "cold": "Cold: read from the storage (this client's cache emptied first)",
    "warm": "Warm: the same reads again, often from this client's RAM (page cache), on a scale of their own so that "
            "they do not flatten the cold curves",
}


def throughput_charts(result: Result, f: Facts) -> list[Figure]:
    """samples/s against readers: one chart for cold, one for warm; the raw baseline's curves in each, dashed (fio's
    against its jobs, the raw S3 client's against its requests in flight)."""
    out = []
    raw = dict(_raw_curves(result))
    tool = raw_tool(result)
    depth = "jobs" if tool == "fio" else "in flight"
    jobs = " (fio: jobs)" if tool == "fio" else ""  # on objects the x axis is already the requests in flight
    for cache in ("cold", "warm"):
        series = [Series(f"{cache}, {kind}", pts, COLD if cache == "cold" else WARM, dash=cache == "warm")
                  for c, kind, pts in _curves(result) if c == cache]
        if cache in raw:
            series.append(Series(f"{tool} {cache} ({depth})", raw[cache], RAW if cache == "cold" else "#bbbbbb",
                                 dash=True))
        if series:
            svg, note = _rates_chart(series, f, result, f"samples/s vs readers, {cache}", _readers_unit(result) + jobs)
            same = "fio reads the same files" if tool == "fio" else f"{tool} GETs the same objects"
            out.append(Figure(svg, f"{_CACHE_WORDS[cache]}; {same} as a raw baseline." + note))
    return out


def compare_throughput_charts(results: Sequence[Result], fs: Sequence[Facts], names: Sequence[str]) -> list[Figure]:
    """Every system's curves overlaid: one chart for cold, one for warm; a log scale where systems are an order of
    magnitude apart."""
    first = next((i for i, f in enumerate(fs) if f.need_per_gpu), None)
    out = []
    for cache in ("cold", "warm"):
        series = [Series(f"{n}: {cache}" + ("" if kind == "shuffled" else f", {kind}"), pts, c, dash=cache == "warm")
                  for n, r, c in zip(names, results, cycle(PALETTE)) for cc, kind, pts in _curves(r)
                  if cc == cache]
        if series:
            ys = [y for s in series for _, y in s.points if y > 0]
            svg, note = _rates_chart(series, fs[first] if first is not None else None, results[first or 0],
                                     f"samples/s vs readers, {cache}, all systems", "readers (threads or workers)",
                                     y_log=bool(ys) and max(ys) > 10 * min(ys))
            out.append(Figure(svg, _CACHE_WORDS[cache] + "." + note))
    return out


def _rates_chart(series: list[Series], f: Facts | None, result: Result, title: str, x_label: str,
                 y_log: bool = False) -> tuple[str, str]:
    """samples/s against readers (log), with one GPU's need (`f`'s) as a line, else said in the caption's `note`."""
    lines, note = _need_lines(f, result, max(y for s in series for _, y in s.points)) if f else ([], "")
    return line_chart(series, title=title, x_label=x_label, y_label="samples/s" + (" (log scale)" if y_log else ""),
                      x_log=True, x_ticks=_x_ticks(x for s in series for x, _ in s.points), hlines=lines,
                      y_log=y_log), note


# --------------------------------------------------------------------------------------------- latency

_NINES = ((0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p99.9"), (1.0, "max"))


def _nines(p: float) -> float:
    return 3.5 if p >= 1.0 else -math.log10(1 - p)


def _cdf_points(lat: Latency) -> list[tuple[float, float]]:
    vals = (lat.p50, lat.p90, lat.p99, lat.p999, lat.max)
    return [(max(v, 1e-4), _nines(p)) for v, (p, _) in zip(vals, _NINES, strict=True)]


def latency_chart(named: Sequence[tuple[str, Latency, str, bool]], title: str) -> Figure | None:
    """Percentile plot (a CDF with the tail stretched): x latency (ms, log), y p50 .. max."""
    series = [Series(name, _cdf_points(lat), color, dash=dash) for name, lat, color, dash in named]
    yt = [(_nines(p), text) for p, text in _NINES]
    svg = line_chart(series, title=title, x_label="latency per sample, ms (log scale)", y_label="percentile",
                     x_log=True, y_ticks=yt, y_zero=False)
    return Figure(svg, "Latency distribution per sample (open + read + close): the further right, the slower; "
                       "the tail (p99 .. max) is stretched out.") if svg else None


def latency_series(result: Result) -> list[tuple[str, Latency, str, bool]]:
    runs = sorted(replay_runs(result), key=lambda r: (r.cache != "cold", r.in_flight, r.concurrency, r.order))
    first: dict[tuple[str, int, int, str, bool], Run] = {}  # one curve per configuration: its first run
    for r in runs:
        first.setdefault((r.cache, r.concurrency, r.depth, r.order, r.decode), r)
    return [(f"{r.cache}, {readers(r)}" + ("" if r.order == "shuffled" else f", {r.order}"), r.timed, color,
             r.cache == "warm") for r, color in zip(first.values(), cycle(PALETTE))]


def compare_latency_chart(fs: Sequence[Facts]) -> Figure | None:
    named = [(f.label, f.best_cold.timed, c, False) for f, c in zip(fs, cycle(PALETTE)) if f.best_cold]
    return latency_chart(named, "latency percentiles of each system's best cold run")


# --------------------------------------------------------------------------------------------- over time


def _rates(timeline: Sequence[Sequence[float]]) -> list[tuple[float, float]]:
    """Samples/s between timeline points, as (time, rate) steps; intervals under 10 ms merge into the next. The
    last interval, from the last tick to the epoch's end, is dropped when it is under half the one before it: a
    partial interval that caught a batch or two is a spike of no meaning (a DataLoader's 256 samples in 8 ms)."""
    spans: list[tuple[float, float, float]] = []  # (start, end, samples/s)
    if len(timeline) < 2:
        return []
    t0, n0 = timeline[0]
    for t, n in timeline[1:]:
        if t - t0 < 0.01:
            continue
        spans.append((t0, t, (n - n0) / (t - t0)))
        t0, n0 = t, n
    if len(spans) >= 2 and spans[-1][1] - spans[-1][0] < 0.5 * (spans[-2][1] - spans[-2][0]):
        spans.pop()
    return [(spans[0][0], spans[0][2]), *((end, rate) for _, end, rate in spans)] if spans else []


def shows_trend(r: Run | None) -> bool:
    """Enough rate steps for a trend: fewer show only the start-up and the end (a run of about a second)."""
    return r is not None and len(_rates(r.timeline)) >= MIN_TREND_POINTS


def timeline_chart(runs: Sequence[tuple[str, Run, str]], title: str, caption: str) -> Figure | None:
    series = [Series(name, pts, color, step=True) for name, r, color in runs if (pts := _rates(r.timeline))]
    svg = line_chart(series, title=title, x_label="seconds since the epoch started", y_label="samples/s")
    return Figure(svg, caption) if svg else None


def main_timeline(f: Facts) -> Figure | None:
    """The main run's samples/s over time, when it shows a trend."""
    r = f.main
    if r is None or not shows_trend(r):
        return None
    name = f"{r.cache}, {readers(r)}, {r.order}"
    return timeline_chart([(name, r, COLD if r.cache == "cold" else WARM)], "samples/s over time",
                          f"The main run ({name}, {r.samples:,} samples in {r.seconds:.2f} s, mean "
                          f"{r.samples_per_s:,.0f}/s): a flat line is a steady supply; dips are stalls the GPUs would "
                          "feel.")


def compare_timeline(fs: Sequence[Facts]) -> Figure | None:
    tl = [(f.label, f.main, c) for f, c in zip(fs, cycle(PALETTE)) if f.main is not None and shows_trend(f.main)]
    short_runs = [f.label for f in fs if f.main is not None and not shows_trend(f.main)]
    caption = "Each system's main run (its best cold shuffled run): steadier is better." + (
        f" Left out, their main run too short to show a trend: {', '.join(short_runs)}." if short_runs else "")
    return timeline_chart(tl, "samples/s over time, each system's main run", caption) if tl else None


# --------------------------------------------------------------------------------------------- bars


def gauge(result: Result, f: Facts) -> str:
    """Supply against demand: the verdict's storage and pipeline figures (and the warm rate), with a mark at each
    GPU's need."""
    v = f.verdict
    if f.need_per_gpu is None or v is None or (v.storage_samples_per_s is None and v.pipeline_samples_per_s is None):
        return ""
    gpu = gpu_name(v, result)
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


def speedup_chart(result: Result) -> Figure | None:
    ms_ = result.mitigations
    if not ms_:
        return None
    bars = [(m.name, m.speedup, "#2ca02c" if m.speedup >= 1.1 else ("#d62728" if m.speedup < 0.9 else "#9aa5b1"))
            for m in ms_]
    svg = bar_chart(bars, title="speed-up against the baseline", x_label="speed-up (× baseline samples/s, cold)",
                    marks=[(1.0, "baseline")], fmt=lambda x: f"{x:.2f}x")
    return Figure(svg, "Each mitigation against the baseline: same read pattern, same readers, cold; green: at least "
                       "10% faster, red: at least 10% slower.")
