"""The HTML report: one self-contained page (CSS and SVG inline: no network, no script), rendered with Jinja2
from templates/ (report.html.j2 for one result, compare.html.j2 for several; macros.html.j2 holds the parts both
use). This module gathers what each template shows from facts, compare and charts; autoescape escapes every value,
and only the SVG (escaped as svg.py draws it) goes in marked safe."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iobench.answer.rules import times, usable_cores
from iobench.answer.words import LIMITS, count_words, raw_tool
from iobench.report import charts
from iobench.report.compare import (
    STORAGE_GPUS,
    STORAGE_RATE,
    compare_headline,
    compare_table,
    like_for_like,
    mitigations_compare_table,
    winner_sentences,
)
from iobench.report.facts import (
    MONO_ROWS,
    Facts,
    cache_whatif_table,
    consumer_words,
    environment,
    facts,
    headline,
    labels,
    readers_whatif_table,
    tables,
    whatif_gpu_note,
    whatifs,
)
from iobench.report.format import gpu_name, model_name, ms, num, readers, short, when
from iobench.result import Result

if TYPE_CHECKING:
    import jinja2

TEMPLATES = Path(__file__).parent / "templates"


@cache
def _env() -> jinja2.Environment:
    import jinja2  # here: only a command that writes an HTML report loads it

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters.update(num=num, ms=ms, pct=lambda x: f"{x:.0%}", count=lambda x: f"{x:,}")
    return env


@dataclass(frozen=True)
class Big:
    """The hero's big figure: GPUs fed, else the storage's samples/s, with what it is and how it was found."""

    value: str
    cls: str  # "ok", "bad" or ""
    sub: str
    badges: list[tuple[str, str]]  # (class, text)


def _big(result: Result, f: Facts) -> Big:
    """The storage's answer: the GPUs its measured capacity feeds from one client like this one."""
    v, store = f.verdict, f.storage
    gpu, model = gpu_name(v, result), model_name(v, result)
    if v is not None and v.storage_gpus_fed is not None:
        n = v.storage_gpus_fed
        badges = [("", f"storage figure: {v.storage_samples_per_s or 0:,.0f} samples/s cold ({v.storage_from})")]
        if v.storage_is_lower_bound:
            badges.append(("warn", "at least: the client's CPU was saturated while measuring it"))
        if v.storage_gpus_range:
            badges.append(("warn", "borderline: within the figure's run-to-run spread"))
        if f.provisional:
            badges.append(("warn", "provisional: run unfinished"))
        least = "at least " if v.storage_is_lower_bound else ""
        return Big(least + count_words(n, v.storage_gpus_range),
                   "bad" if n == 0 and not v.storage_is_lower_bound else "ok",
                   f"{gpu} GPU{'' if n == 1 else 's'} the storage feeds, training {model} at ≥ {f.au_target:.0%} busy "
                   "(from one client like this one)", badges)
    if store is not None:
        return Big(short(store.samples_per_s), "", f"samples/s from storage (cold, {store.what}); no GPU consumer set",
                   [])
    return Big("–", "bad", "no storage (cold) figure", [])


def _client_big(result: Result, f: Facts) -> Big | None:
    """This client's answer, beside the storage's: the GPUs its input pipeline fed, and what limits it."""
    v = f.verdict
    if v is None or v.client_gpus_fed is None:
        return None
    n = v.client_gpus_fed
    if v.gpus_fed_confirmed and result.settings.consumer == "cuda":
        badges = [("ok", "measured with training runs on a real GPU")]
    elif v.gpus_fed_confirmed:
        badges = [("ok", "measured with emulated-GPU training runs")]
    else:
        badges = [("warn", "predicted from the measured rates")]
    if v.client_gpus_range:
        badges.append(("warn", "borderline: an AU within its run-to-run spread of the target"))
    cores = usable_cores(result)
    limit = f"; limit: {LIMITS[v.limit].title.lower()}" if v.limit and v.limit != "gpu" else ""
    return Big(count_words(n, v.client_gpus_range), "", f"fed by this {cores:g}-core client{limit}" if cores else
               f"fed by this client{limit}", badges)


def _tiles(result: Result, f: Facts) -> list[tuple[str, str, str]]:
    """(name, figure, note) for the hero's tiles."""
    v, best = f.verdict, f.best_cold
    gpu = gpu_name(v, result)
    tiles: list[tuple[str, str, str]] = []
    if v is not None and v.limit:
        tiles.append(("Limit", *LIMITS[v.limit][2:]))
    if v is not None and v.storage_samples_per_s is not None:
        tiles.append(("Storage gives (cold)", ("at least " if v.storage_is_lower_bound else "")
                      + f"{v.storage_samples_per_s:,.0f} samples/s", v.storage_from or ""))
    if v is not None and v.pipeline_samples_per_s is not None:
        tiles.append(("Pipeline delivers", f"{v.pipeline_samples_per_s:,.0f} samples/s", v.pipeline_from or ""))
    if f.need_per_gpu is not None:
        share = ""
        if v is not None and v.storage_samples_per_s:
            share += f"; the storage gives {times(v.storage_samples_per_s / f.need_per_gpu)} that"
        if v is not None and v.pipeline_samples_per_s:
            share += f", this client's pipeline {times(v.pipeline_samples_per_s / f.need_per_gpu)}"
        tiles.append((f"One {gpu} needs", f"{f.need_per_gpu:,.0f} samples/s",
                      f"{f.au_target:.0%} AU target x {f.rate_per_gpu:,.0f} samples/s per GPU{share}"))
    if best is not None:
        tiles.append(("Latency per file (cold)", f"p99 {ms(best.timed.p99)} ms",
                      f"p50 {ms(best.timed.p50)} ms, max {ms(best.timed.max)} ms"))
    if f.best_warm is not None:
        w = f.best_warm
        where = "from RAM (page cache)" if w.measures == "page-cache" else "warm"
        tiles.append(("Warm re-read", f"{w.samples_per_s:,.0f} samples/s", f"{where}, {readers(w)}"))
    return tiles


def _hero(result: Result, f: Facts) -> dict[str, Any]:
    lines = f.verdict.text.splitlines() if f.verdict is not None else ["No verdict: nothing was measured."]
    return {"headline": headline(result, f), "big": _big(result, f), "client": _client_big(result, f),
            "tiles": _tiles(result, f), "gauge": charts.gauge(result, f), "provisional": f.provisional,
            "text": lines[0], "evidence": lines[1:], "source": result.settings.rate_source if f.rate_per_gpu else None}


def _sections(result: Result, f: Facts) -> dict[str, Any]:
    """What the detail sections of one result show (everything below the verdict): its tables, by their names in
    `tables`, and the rest."""
    m = whatifs(result)
    return {
        **tables(result), "result": result, "settings": result.settings, "baseline": result.baseline,
        "environment": environment(result), "mono": MONO_ROWS, "throughput": charts.throughput_charts(result, f),
        "latency": charts.latency_chart(charts.latency_series(result), "latency percentiles per run"),
        "timeline": charts.main_timeline(f), "raw_tool": raw_tool(result), "speedup": charts.speedup_chart(result),
        "consumer": consumer_words(result),
        "whatif": m, "cache_whatif": cache_whatif_table(m) if m else None,
        "readers_whatif": readers_whatif_table(m) if m else None,
        "whatif_notes": [n for n in m.notes if "no cache rate" in n] if m else [],
        "whatif_gpu_note": whatif_gpu_note(result, m) if m else "",
    }


def _single_html(result: Result, label: str) -> str:
    f = facts(result, label)
    return _env().get_template("report.html.j2").render(
        title=f"iobench: {label}", label=label, result=result, when=when(result.created), f=f,
        hero=_hero(result, f), s=_sections(result, f), versions=result.host.iobench, schema=result.schema_)


@dataclass(frozen=True)
class Card:
    """One system's card in the comparison: GPUs fed (or its cold samples/s), how found, what limits."""

    name: str
    big: str
    cls: str
    sub: str
    rate: str
    limit: str
    how: str
    best: bool
    complete: bool


def _cards(results: Sequence[Result], fs: Sequence[Facts], winners: dict[str, list[int]]) -> list[Card]:
    """Each system's storage answer (GPUs its storage feeds from one client), this client's beside it."""
    key = STORAGE_GPUS if STORAGE_GPUS in winners else STORAGE_RATE
    top = set(winners.get(key, []))
    out = []
    for i, (r, f) in enumerate(zip(results, fs, strict=True)):
        v, store = f.verdict, f.storage
        gpu, model = gpu_name(v, r), model_name(v, r)
        big = _big(r, f).value  # the single report's big figure: GPUs the storage feeds, else its samples/s
        if v is not None and v.storage_gpus_fed is not None:
            n = v.storage_gpus_fed
            sub = f"{gpu} GPU{'' if n == 1 else 's'} the storage feeds ({model}, AU ≥ {v.au_target or 0:.0%})"
            how = (f"this client fed {count_words(v.client_gpus_fed, v.client_gpus_range)}"
                   + (" (training runs)" if v.gpus_fed_confirmed else " (predicted)")
                   if v.client_gpus_fed is not None else "")
        else:
            sub, how = "samples/s cold", ""
        rate = f"{store.samples_per_s:,.0f} samples/s cold ({store.what})" if store else "no cold figure"
        if f.need_per_gpu and store:
            rate += f"; {times(store.samples_per_s / f.need_per_gpu)} one {gpu}'s need"
        out.append(Card(f.label, big, "bad" if big == "0" else ("ok" if i in top else ""), sub, rate,
                        f"this client's limit: {v.limit}" if v and v.limit else "", how, i in top, r.complete))
    return out


def _compare_html(results: Sequence[Result], names: Sequence[str]) -> str:
    fs = [facts(r, n) for r, n in zip(results, names, strict=True)]
    side, winners = compare_table(results, fs)
    systems = [{"label": f.label, "caveats": f.caveats, "text": f.verdict.text if f.verdict else "no verdict",
                "s": _sections(r, f)} for r, f in zip(results, fs, strict=True)]
    return _env().get_template("compare.html.j2").render(
        title="iobench compare: " + ", ".join(names), names=names,
        partial=[n for r, n in zip(results, names, strict=True) if not r.complete],
        headline=compare_headline(results, fs, names), cards=_cards(results, fs, winners),
        sentences=winner_sentences(names, winners), diffs=like_for_like(results, names), side=side,
        throughput=charts.compare_throughput_charts(results, fs, names), latency=charts.compare_latency_chart(fs),
        timeline=charts.compare_timeline(fs), mitigations=mitigations_compare_table(results, names), systems=systems,
        versions=", ".join(sorted({r.host.iobench for r in results})), schema=results[0].schema_)


def render_html(results: Sequence[Result], names: Sequence[str] | None = None) -> str:
    """One self-contained HTML page: the single-run report for one result, the comparison for several."""
    results = list(results)
    ls = labels(results, names)
    return _single_html(results[0], ls[0]) if len(results) == 1 else _compare_html(results, ls)
