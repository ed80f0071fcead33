"""What the comparison of several results says (`iobench compare`): the metrics side by side with the winner of
each, the headline, the winners in words, what makes it not like for like. The writers only lay these out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from iobench.answer.plan import mixed_kinds, rate_kind_of
from iobench.answer.words import raw_tool
from iobench.report.facts import Facts, Table, raw_best_point
from iobench.report.format import gpu_name, model_name, ms, num, readers, when
from iobench.result import Result


@dataclass(frozen=True)
class Metric:
    name: str
    value: Callable[[Result, Facts], float | str | None]
    better: str | None = None  # "higher", "lower" or None (information only)
    fmt: Callable[[Any], str] = str  # a value's text (never given None: that is "-")
    label: Callable[[Sequence[Result]], str] | None = None  # the row's name where it depends on the results


def _raw_best(result: Result) -> float | None:
    best = raw_best_point(result)
    return best.samples_per_s if best else None


def _raw_label(results: Sequence[Result]) -> str:
    """The raw baseline's row, named by what ran: fio's files/s, or the tools side by side (the raw S3 client's
    objects/s on a bucket)."""
    tools = list(dict.fromkeys(raw_tool(r) for r in results))
    if tools == ["fio"]:
        return "fio cold files/s (best)"
    return f"raw baseline ({', '.join(tools)}) cold samples/s (best)"


def _meta(result: Result, attr: str) -> float | None:
    cold = [m for m in result.metadata if m.cache == "cold"] or result.metadata
    return getattr(cold[0], attr) if cold else None


def _best_mit(result: Result) -> str | None:
    m = max((m for m in result.mitigations if m.name != "baseline"), key=lambda x: x.speedup, default=None)
    return f"{m.name} ({m.speedup:.2f}x)" if m else None


STORAGE_GPUS = "GPUs the storage feeds (one client)"
STORAGE_RATE = "storage, cold samples/s"

METRICS: tuple[Metric, ...] = (
    Metric(STORAGE_GPUS, lambda r, f: f.verdict.storage_gpus_fed if f.verdict else None, "higher"),
    Metric(STORAGE_RATE, lambda r, f: f.storage.samples_per_s if f.storage else None, "higher", num),
    Metric("storage figure from", lambda r, f: f.storage.what if f.storage else None),
    Metric("storage figure, at least", lambda r, f: None if not f.storage else
           ("yes: the client's CPU was saturated" if f.storage.lower_bound else "no")),
    Metric("GPUs this client fed", lambda r, f: f.verdict.client_gpus_fed if f.verdict else None),
    Metric("how this client's count was found", lambda r, f: None if not f.verdict or f.verdict.client_gpus_fed is None
           else ("training runs" if f.verdict.gpus_fed_confirmed else "predicted")),
    Metric("this client's limit", lambda r, f: f.verdict.limit if f.verdict else None),
    Metric("loaders' best cold samples/s", lambda r, f: f.best_cold.samples_per_s if f.best_cold else None, None, num),
    Metric("cold MB/s (that run)", lambda r, f: f.best_cold.mb_per_s if f.best_cold else None, None, num),
    Metric("at readers", lambda r, f: readers(f.best_cold) if f.best_cold else None),
    Metric("saturates at (readers)", lambda r, f: f.verdict.saturates_at if f.verdict else None),
    Metric("cold p50 latency, ms", lambda r, f: f.best_cold.timed.p50 if f.best_cold else None, "lower", ms),
    Metric("cold p99 latency, ms", lambda r, f: f.best_cold.timed.p99 if f.best_cold else None, "lower", ms),
    Metric("cold p99.9 latency, ms", lambda r, f: f.best_cold.timed.p999 if f.best_cold else None, "lower", ms),
    Metric("warm samples/s (best)", lambda r, f: f.best_warm.samples_per_s if f.best_warm else None, "higher", num),
    Metric("raw baseline cold samples/s (best)", lambda r, f: _raw_best(r), "higher", num, _raw_label),
    Metric("stat()/s, cold, 1 thread", lambda r, f: _meta(r, "stat_per_s"), "higher", num),
    Metric("open+close/s, cold, 1 thread", lambda r, f: _meta(r, "open_close_per_s"), "higher", num),
    Metric("listing at full scale, s (predicted)", lambda r, f: _meta(r, "projected_list_s"), "lower",
           lambda x: num(x, 1)),
    Metric("best mitigation", lambda r, f: _best_mit(r)),
    Metric("file system", lambda r, f: f"{r.mount.fstype} ({r.mount.family})"),
    Metric("mount options", lambda r, f: r.mount.options),
    Metric("dataset", lambda r, f: f"{r.dataset.files:,} files, mean {r.dataset.mean_bytes / 1000:,.0f} kB"),
    Metric("client", lambda r, f: f"{r.host.hostname}, {r.host.cpus or '?'} CPUs, {r.host.ram_bytes / 1e9:,.0f} GB"),
    Metric("mount", lambda r, f: r.mount.path),
    Metric("run on", lambda r, f: when(r.created)),
    Metric("iobench version", lambda r, f: r.host.iobench),
    Metric("finished", lambda r, f: "yes" if r.complete else "NO (partial)"),
)


def _setting(value: object) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value)) or "-"
    return "-" if value is None else str(value)


def differing_settings(results: Sequence[Result]) -> list[tuple[str, ...]]:
    """A row per setting (result.json's `settings`) whose value is not the same in every result: "setting NAME"
    and each one's value."""
    dumped = [r.settings.model_dump(mode="json") for r in results]
    return [(f"setting {key}", *(_setting(d.get(key)) for d in dumped))
            for key in dumped[0] if len({_setting(d.get(key)) for d in dumped}) > 1]


def compare_table(results: Sequence[Result], fs: Sequence[Facts]) -> tuple[Table, dict[str, list[int]]]:
    """The metrics side by side (a column per system; `wins`: the best cell of each row that has a direction),
    and the winners by metric name (system indexes)."""
    rows: list[tuple[str, ...]] = []
    wins: set[tuple[int, int]] = set()
    winners: dict[str, list[int]] = {}
    for i, m in enumerate(METRICS):
        vals = [m.value(r, f) for r, f in zip(results, fs, strict=True)]
        rows.append((m.label(results) if m.label else m.name, *("-" if v is None else m.fmt(v) for v in vals)))
        nums = [(j, float(v)) for j, v in enumerate(vals) if isinstance(v, int | float)]
        if m.better and len(nums) >= 2 and len({v for _, v in nums}) > 1:
            target = max(v for _, v in nums) if m.better == "higher" else min(v for _, v in nums)
            best = [j for j, v in nums if v == target]
            winners[m.name] = best
            wins |= {(i, j + 1) for j in best}
    rows += differing_settings(results)
    names = [f.label for f in fs]
    return Table("side by side", ("metric", *names), tuple(rows), left=1 + len(names), wins=frozenset(wins)), winners


def mitigations_compare_table(results: Sequence[Result], names: Sequence[str]) -> Table | None:
    """Each mitigation's samples/s and speed-up on each system (None when no system measured any)."""
    if not any(r.mitigations for r in results):
        return None
    rows = []
    for mn in dict.fromkeys(m.name for r in results for m in r.mitigations):
        cells = []
        for r in results:
            m = next((m for m in r.mitigations if m.name == mn), None)
            cells.append(f"{m.samples_per_s:,.0f}/s ({m.speedup:.2f}x)" if m else "-")
        rows.append((mn, *cells))
    return Table("mitigations on each system", ("mitigation", *names), tuple(rows))


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


def winner_sentences(names: Sequence[str], winners: dict[str, list[int]]) -> list[str]:
    pick = ((STORAGE_GPUS, "Most GPUs fed by the storage"), (STORAGE_RATE, "Fastest storage (cold)"),
            ("cold p99 latency, ms", "Lowest tail latency (p99)"),
            ("listing at full scale, s (predicted)", "Fastest start-up listing"),
            ("open+close/s, cold, 1 thread", "Fastest metadata (open+close)"))
    return [f"{words}: {' and '.join(names[j] for j in winners[key])}" for key, words in pick if key in winners]


def compare_headline(results: Sequence[Result], fs: Sequence[Facts], names: Sequence[str]) -> str:
    """The comparison in one sentence, by the storage's figures (never by the test clients'): whose storage feeds
    the most GPUs, whose reads fastest cold, and by how much. The same result twice names no winner."""
    same = len({str(r.created) + str(r.mount.path) + str(r.host.hostname) for r in results}) == 1
    fed = [f.verdict.storage_gpus_fed if f.verdict else None for f in fs]
    rates = [f.storage.samples_per_s if f.storage else None for f in fs]
    out = []
    known = [(g, i) for i, g in enumerate(fed) if g is not None]
    if len({g for g, _ in known}) > 1 and not same:
        g, i = max(known)
        rest = ", ".join(f"{names[j]}: {h}" for h, j in known if j != i)
        gpu = gpu_name(fs[i].verdict, results[i])
        gpus = "GPUs" if gpu == "GPU" else f"{gpu} GPUs"
        out.append(f"{names[i]}'s storage feeds the most {gpus} from one client: {g} (against {rest})")
    ranked = sorted(((x, i) for i, x in enumerate(rates) if x), reverse=True)
    if len(ranked) >= 2 and not same:
        (x, i), (y, j) = ranked[0], ranked[1]
        out.append(f"{names[i]} reads fastest from storage (cold): {x:,.0f} samples/s, {x / y:.1f}x "
                   f"{'the next best, ' if len(ranked) > 2 else ''}{names[j]}")
    if known and all(g == 0 for g, _ in known):
        v = fs[known[0][1]].verdict
        tau = (v.au_target if v and v.au_target else results[0].settings.au_target)
        out.append(f"{'No' if not out else 'no'} storage here feeds even one {gpu_name(v, results[0])} ≥ "
                   f"{tau:.0%} busy training {model_name(v, results[0])} from one client")
    text = "; ".join(out)  # a system's name starts it as given, never capitalised
    text = text + "." if text else (
        "The same result twice: nothing to compare." if same else "No storage figures to compare.")
    mixed = mixed_kinds([(n, r.settings.rate_per_gpu, rate_kind_of(r)) for r, n in zip(results, names, strict=True)])
    return f"{text} Warning: {mixed}" if mixed else text
