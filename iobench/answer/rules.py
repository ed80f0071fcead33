"""The answer's rules, one home for each: which runs count, the three capacities (storage, pipeline, demand),
the limit, GPUs fed, and the display of figures compared with a threshold (README.md: How the verdict is reached).
The report, plan and cluster.py use them and repeat none; the words are words.py's.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from iobench.answer.words import raw_depth, raw_tool, readers
from iobench.result import Cpu, RawPoint, Result, Run, RunStats

R = TypeVar("R", Run, RawPoint)

# ------------------------------------------------------------------------------------------------- the rules

SATURATION = 0.9  # a reader count "saturates" the storage when its mean reaches 90% of the best mean
RISING = 1.1  # "still rising": the most readers gave > 10% more than any fewer gave (`still_rising`)
REACHES = 0.9  # the pipeline "reaches" the storage figure at >= 90% of it
CPU_SATURATED = 0.85  # iobench used >= 85% of the cores it may use: the client's CPU set the pace
MIN_BATCHES_PER_READER = 10  # fewer, and start-up and the last half-empty batches dominate the epoch
MIN_TRAIN_STEPS = 10  # batches per GPU after the first (AU's window) for a training run's AU to mean anything
MIN_SECONDS = 0.5  # a shorter epoch is mostly start-up and timer noise
# An advised --files lasts MIN_SECONDS at this many times the fastest rate measured: a short epoch reads slower than
# a bigger one (its start-up and tail weigh more). On a busy 2-core host 2 ranks read 400 files at 4,071 samples/s,
# then the 4,100 a margin of 2 advised at 10,119: an epoch of 0.49 s, too short again
ADVICE_MARGIN = 3
EPOCH_TARGET_S = 2 * MIN_SECONDS  # a short warm epoch is read again as passes lasting about this (answer/sizing.py)
COLD_MAX = 0.05  # at most 5% of sampled pages cached before a cold epoch: it measures storage
WARM_MIN = 0.90  # at least 90% cached: the epoch measures the page cache
DECODE_BOUND = 0.5  # decode took over half of each reader's time per sample: the decode CPU set the pace
STARTUP_NOTE_S = 60.0  # start-up costs worth a sentence: a minute of idle GPUs before the first batch
MITIGATION_NOTE = 1.1  # a mitigation worth naming buys at least 10%
UNSTABLE = 0.05  # MLPerf Storage: a figure whose repeats spread over 5% does not repeat
OVER_FIO_CPU = 1.5  # iobench's reading cost over 1.5x fio's CPU per file at the same point: the tool's own cost shows


def gpus_for(samples_per_s: float, rate_per_gpu: float, au_target: float) -> int:
    """GPUs a sustained rate keeps at AU >= au_target: floor(rate / (au_target x per-GPU rate))."""
    # 1e-9: a rate equal to the need (4,209.57 = 0.9 x 4,677.3) is enough, whatever binary floating point makes of it
    return max(0, math.floor(samples_per_s / (au_target * rate_per_gpu) * (1 + 1e-9)))


def demand(gpus: int, rate_per_gpu: float, au_target: float) -> float:
    """Samples/s that keep `gpus` GPUs at AU >= au_target."""
    return gpus * rate_per_gpu * au_target


def floor_to(x: float, digits: int) -> float:
    """x rounded down at `digits` decimals: a figure below a threshold never displays as the threshold."""
    r = round(x, digits)
    # 1e-9: binary floating point (100 x 0.29 = 28.999999999999996) is not a figure below the threshold
    return r - 10 ** -digits if r > x + 1e-9 * max(1.0, abs(x)) else r


def au_pct(au: float) -> str:
    """AU as a percentage, rounded down: 0.8964 -> '89.6%' (never '90%')."""
    return f"{floor_to(100 * au, 1):.1f}%"


def au_cell(au: float | None) -> str:
    """AU for a table cell, by the one rule (`au_pct`): 0.8964 -> '89.6%'; '-' for none."""
    return "-" if au is None else au_pct(au)


def au_fraction(au: float | None) -> float | None:
    """AU for a machine-read table (CSV) by the same rule: floored at 0.001, so 0.5879 -> 0.587 (58.7%)."""
    return None if au is None else floor_to(au, 3)


def pct(x: float) -> str:
    """A fraction as a whole percentage, rounded down: 0.896 -> '89%' (never '90%')."""
    return f"{floor_to(100 * x, 0):.0f}%"


def times(x: float) -> str:
    """A ratio for text, rounded down: 0.996 -> '0.99x'."""
    return f"{floor_to(x, 2):.2f}x"


FROM_STORAGE = ("storage", "unknown", "decode")  # a cold epoch read from storage (the decode one as a lower bound)


def measures(resident: float | None, decode_share: float | None = None, cpu_bound: bool = False) -> str:
    """What an epoch's figures stand for: the decode CPU when it decoded and either decode took most of each
    reader's time per sample (`decode_share`: decode / (read + decode)) or the client's CPU was saturated
    (`cpu_bound`, the rule of `saturated`: decode is the CPU work, and a busy CPU stretches the reads' times too);
    else from the fraction of its pages cached when it started. A partly cached epoch stays "mixed" whatever its
    decode: it fails a cold run."""
    if resident is None:
        where = "unknown"
    elif resident <= COLD_MAX:
        where = "storage"
    else:
        where = "page-cache" if resident >= WARM_MIN else "mixed"
    if decode_share is not None and (decode_share > DECODE_BOUND or cpu_bound) and where != "mixed":
        return "decode"
    return where


def validity(run: Run) -> str | None:
    """Why a run cannot mean anything, with its figures; None when it can."""
    if not run.complete:
        return "interrupted: the figures cover only the samples read"
    if run.samples == 0:
        return "no sample was read"
    batch = run.batch_size or 1  # the thread engine reads one sample at a time
    batches = math.ceil(run.samples / batch)
    if run.gpus:
        steps = batches // run.gpus
        if steps < MIN_TRAIN_STEPS + 1:
            return (f"{steps} batches per GPU, fewer than the {MIN_TRAIN_STEPS + 1} that AU needs (its first step is "
                    "excluded and the loader's prefetch hides the storage)")
    elif batches / run.concurrency < MIN_BATCHES_PER_READER:
        what = "batches" if run.batch_size else "samples"
        return (f"{batches / run.concurrency:.1f} {what} per reader ({batches} over {run.concurrency}), fewer than "
                f"{MIN_BATCHES_PER_READER}: start-up and the last, partly idle {what} dominate")
    if run.seconds < MIN_SECONDS:
        # warm: answer/sizing.passes_for reads it again as more passes; cold cannot be (a second pass reads warm)
        grow = (f"; a cold epoch is not lengthened by passes (the second would read warm): --files "
                f"{round_files(run.samples * EPOCH_TARGET_S / max(run.seconds, 1e-3)):,} or more lasts it"
                if run.cache == "cold" else "")
        return f"lasted {run.seconds:.2f} s, under {MIN_SECONDS} s: start-up and timing dominate{grow}"
    if run.cache == "cold" and run.measures in ("page-cache", "mixed"):
        return (f"cold run whose eviction did not take: {100 * (run.resident_before or 0):.0f}% of sampled pages "
                "were cached at the start, so it partly measures RAM")
    return None


def consumed(run: Run) -> Run:
    """A training run's one throughput: the samples its GPUs consumed over AU's window (each GPU's first step
    excluded, as for AU; all GPUs' samples over the longest window, phases/epoch.fed); MB/s at the run's mean
    sample size. The epoch's whole samples / seconds stays in `samples` and `seconds`. A run no GPU took two steps
    in keeps samples / seconds."""
    if run.delivered_per_s is None or not run.samples:
        return run
    rate = run.delivered_per_s
    return run.model_copy(update={"samples_per_s": rate, "mb_per_s": round(rate * run.bytes / run.samples / 1e6, 3)})


def mark_validity(run: R) -> R:
    """Set `valid` and `invalid_reason` of a loader's run (`validity`) or of a raw baseline's point
    (`raw_validity`): the one place either is judged as it is measured."""
    reason = raw_validity(run) if isinstance(run, RawPoint) else validity(run)
    run.valid, run.invalid_reason = reason is None, reason
    return run


def raw_validity(b: RawPoint) -> str | None:
    """Why a raw baseline's point cannot mean anything, with its figures; None when it can."""
    if b.samples == 0:
        return "nothing was read"
    if b.seconds < MIN_SECONDS:
        return f"lasted {b.seconds:.2f} s, under {MIN_SECONDS} s: start-up and timing dominate"
    return None


def raw_valid(b: RawPoint) -> bool:
    return raw_validity(b) is None


def costlier_than_fio(result: Result) -> list[tuple[Run, RawPoint, float]]:
    """The replay runs of the files whose reading cost more than OVER_FIO_CPU x fio's CPU per file at the same
    concurrency and cache state in this result, each with that fio point and the ratio."""
    fio = {(b.concurrency, b.cache): b for b in (result.baseline.points if result.baseline else [])
           if raw_valid(b) and b.cpu_us_per_sample}
    out = []
    for r in replay_runs(result):
        b, us = fio.get((r.concurrency, r.cache)), r.cpu_us_per_sample
        mine = max(us - (r.decode_cpu_us_per_sample or 0.0), 0.0) if us is not None else 0.0  # reading alone
        if r.source == "files" and b is not None and b.cpu_us_per_sample and mine > OVER_FIO_CPU * b.cpu_us_per_sample:
            out.append((r, b, mine / b.cpu_us_per_sample))
    return out


# ------------------------------------------------------------------------------------------ which runs count


def replay_runs(result: Result) -> list[Run]:
    """The sweep's valid runs: not the training runs, not the mitigations (measured apart)."""
    return [r for r in result.runs if r.valid and r.complete and r.samples and r.kind == "replay"]


def _config(r: Run) -> tuple:
    """What makes runs the same measurement: all but the epoch and the repeat."""
    return (r.source, r.order, r.engine, r.workers, r.concurrency, r.depth, r.batch_size, r.decode, r.cache,
            r.mitigation, r.gpus)


def _steady_rates(runs: list[Run]) -> list[float]:
    """Per repeat, the steady-state samples/s: the mean of its epochs after the first, or its only epoch."""
    by_repeat: dict[int, list[Run]] = defaultdict(list)
    for r in runs:
        by_repeat[r.repeat].append(r)
    out = []
    for group in by_repeat.values():
        group = sorted(group, key=lambda r: r.epoch)
        steady = group[1:] or group
        out.append(sum(r.samples_per_s for r in steady) / len(steady))
    return out


def steady(runs: list[Run]) -> list[Run]:
    """One run per configuration standing for its steady state: the mean over repeats of each repeat's steady
    samples/s (several epochs: the first left out, never the maximum), MB/s scaled alike; the rest (latency,
    CPU) from its last epoch."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        groups[_config(r)].append(r)
    out = []
    for group in groups.values():
        last = max(group, key=lambda r: (r.repeat, r.epoch))
        if len(group) == 1:
            out.append(last)
            continue
        rates = _steady_rates(group)
        mean = sum(rates) / len(rates)
        scale = mean / last.samples_per_s if last.samples_per_s else 1.0
        out.append(last.model_copy(update={"samples_per_s": round(mean, 2),
                                           "mb_per_s": round(last.mb_per_s * scale, 3)}))
    return out


def stats(result: Result) -> list[RunStats]:
    """Per replay configuration: the steady figure over repeats, its standard deviation and spread."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for r in replay_runs(result):
        groups[_config(r)].append(r)
    out = []
    for group in groups.values():
        rates = _steady_rates(group)
        mean = sum(rates) / len(rates)
        std = statistics.stdev(rates) if len(rates) > 1 else None
        spread = (max(rates) - min(rates)) / mean if len(rates) > 1 and mean else None
        r = group[0]
        out.append(RunStats(source=r.source, order=r.order, engine=r.engine, readers=r.concurrency, cache=r.cache,
                            repeats=len(rates), epochs=len(group), mean_samples_per_s=round(mean, 2),
                            std_samples_per_s=None if std is None else round(std, 2),
                            spread=None if spread is None else round(spread, 4),
                            unstable=spread is not None and spread > UNSTABLE))
    return out


def cold_storage_read(r: Run) -> bool:
    """A run read from the storage: cold, the eviction took (or could not be checked)."""
    return r.cache == "cold" and r.measures in FROM_STORAGE


def storage_runs(result: Result) -> list[Run]:
    """Valid replay runs that measured the storage, one per configuration at its steady state (`steady`): cold,
    the eviction took (or could not be checked); the shuffled ones when there are any, as training reads."""
    cold = [r for r in replay_runs(result) if cold_storage_read(r)]
    return steady([r for r in cold if r.order == "shuffled"] or cold)


def training_runs(result: Result) -> list[Run]:
    """Valid training runs (emulated GPUs) with an AU."""
    return [r for r in result.runs if r.kind == "training" and r.au is not None and r.valid and r.complete]


def shaped_runs(result: Result) -> list[Run]:
    """Valid shuffled replay runs shaped as training reads: the workload's engine, batch and decode; cold when
    any cold run was measured (training reads from storage), else warm."""
    s = result.settings
    shaped = [r for r in replay_runs(result) if r.order == "shuffled" and r.engine == s.engine and r.decode == s.decode
              and (r.batch_size is None or r.batch_size == s.batch_size)]
    cold = [r for r in shaped if cold_storage_read(r)]
    return steady(cold or [r for r in shaped if r.cache == "warm"])


def supply_run(result: Result) -> Run | None:
    """The run that stands for what the pipeline sustains for training: the best training-shaped run (cold
    when measured; else warm, and the data then came from RAM); else the best valid cold shuffled run."""
    pool = shaped_runs(result) or [r for r in storage_runs(result) if r.order == "shuffled"]
    return max(pool, key=lambda r: r.samples_per_s) if pool else None


def mean_by_concurrency(points: Iterable[tuple[int, float]]) -> dict[int, float]:
    """Mean rate per reader count, by reader count, from (readers, rate) points."""
    rates: dict[int, list[float]] = defaultdict(list)
    for c, rate in points:
        rates[c].append(rate)
    return {c: sum(v) / len(v) for c, v in sorted(rates.items())}


def saturation(runs: list[Run]) -> tuple[int | None, bool]:
    """(smallest count of requests in flight reaching SATURATION of the best mean, still rising at the most): the
    readers, times each one's requests in flight (object storage's --in-flight; 1 for files)."""
    return _saturation(mean_by_concurrency((r.in_flight, r.samples_per_s) for r in runs))


def still_rising(means: dict[int, float]) -> bool:
    """The most readers (a sweep's mean rates by readers, in order) gave > RISING x the best of any fewer: against the
    best, not the count before, so that one run's dip in the middle (sshfs at 8 ms: 234, 188, 213 files/s at 16, 32,
    64 readers) is not read as a rise."""
    counts = list(means)
    return len(counts) > 1 and means[counts[-1]] > RISING * max(means[c] for c in counts[:-1])


def _saturation(means: dict[int, float]) -> tuple[int | None, bool]:
    if len(means) < 2:
        return None, False
    if still_rising(means):
        return None, True
    top = max(means.values())
    return next(c for c, v in means.items() if v >= SATURATION * top), False


def usable_cores(result: Result) -> float | None:
    return result.host.cpus_usable or result.host.cpus


def saturated(cores_used: float | None, busy_pct: float | None, usable: float | None) -> bool:
    """The client's CPU set the pace: iobench used >= CPU_SATURATED of the `usable` cores it may use, or the host's
    cores were that busy (other processes took the rest: its cores, a quota's or a CPU set's too, were busy as well,
    for the mean over every core to be that high)."""
    if not usable:
        return False
    if cores_used and cores_used >= CPU_SATURATED * usable:
        return True
    return bool(busy_pct and busy_pct >= 100 * CPU_SATURATED)


def cpu_saturated(cpu: Cpu | None, result: Result) -> bool:
    """`saturated` for a run's CPU figures on this result's host."""
    return cpu is not None and saturated(cpu.iobench_cores, cpu.system_busy_pct, usable_cores(result))


def cpu_words(cpu: Cpu | None, result: Result) -> str:
    """'iobench used 1.95 of the 2 cores it may use' (and the host's busy share when others took part of it)."""
    usable = usable_cores(result)
    if cpu is None or cpu.iobench_cores is None or not usable:
        return "no CPU figure"
    text = f"iobench used {cpu.iobench_cores:.2f} of the {usable:g} cores it may use"
    if cpu.system_busy_pct is not None and cpu.iobench_cores < CPU_SATURATED * usable \
            and cpu.system_busy_pct >= 100 * CPU_SATURATED:
        text += f", and the host's cores were {cpu.system_busy_pct:.0f}% busy: other processes took the rest"
    return text


# ------------------------------------------------------------------------------------------------- the figures


@dataclass(frozen=True)
class Spread:
    """How far a figure moves between identical runs, and what says so: measured over --repeat runs, the epochs of
    one configuration or fio's runs (one run measures none: ASSUMED). `value` is (max - min) / mean; `below` and
    `above` the fractions of the figure identical runs could fall under or rise over it: half the spread each way
    for a mean, the whole spread below and nothing above for fio's fastest of its runs; none for one run."""

    value: float
    words: str  # "over 3 repeats", "over 4 epochs", "5% assumed, ..."
    measured: bool
    below: float
    above: float

    def low(self, x: float) -> float:
        return x * (1 - self.below)

    def high(self, x: float) -> float:
        return x * (1 + self.above)


ASSUMED = Spread(0.0, "one run measures no spread; --repeat 3 does", False, 0.0, 0.0)
"""A figure of one run: no range is claimed from it (`near_line` says when it sits close to a line all the same)."""


def near_line(x: float, line: float, spread: Spread) -> bool:
    """A figure of unmeasured spread within UNSTABLE (5%, what MLPerf Storage lets repeats differ by) of its line:
    a single run cannot tell which side identical runs would fall."""
    return not spread.measured and line > 0 and abs(x - line) <= UNSTABLE * line


@dataclass(frozen=True)
class StorageFigure:
    """The one storage figure of a result: the most the storage gave this client cold, over its valid fio jobs and
    loader runs (each configuration at its steady state). The verdict, the reports, `compare`, `plan` and
    `iobench fio` all take it from `storage_figure`."""

    samples_per_s: float
    mb_per_s: float | None
    what: str  # "fio, 16 jobs", "awscrt, 16 in flight", "dataloader, 4 DataLoader workers"
    lower_bound: bool  # the client's CPU was saturated (or decoding set the pace) while measuring it: the storage
    # may give more
    run: Run | None  # the loader run that set it (None: the raw baseline did)
    raw: RawPoint | None  # the raw baseline's point that set it (fio's, or the raw S3 client's; None: a loader)
    spread: Spread


def storage_figure(result: Result) -> StorageFigure | None:
    """The result's storage figure (see StorageFigure): the most any valid cold read of the storage in the run
    delivered, a training run's included (its GPUs' intake: at least what the storage gave), so this client's
    pipeline figure is never over it; None without a valid cold measurement. A training run counts where iobench's
    reader timed its reads (engine dataloader: the raw pipeline); another pipeline's reads happen inside a library,
    untimed, and decoding sets its pace, not the storage."""
    found: list[StorageFigure] = []
    trained = [r for r in training_runs(result) if cold_storage_read(r) and r.ranks is None and r.engine != "pipeline"]
    for r in storage_runs(result) + trained:
        found.append(StorageFigure(r.samples_per_s, r.mb_per_s, f"{r.engine if r.kind == 'replay' else 'training'}, "
                                   f"{readers(r)}"
                                   + ("" if r.source == "files" else f", {r.source}"),
                                   cpu_saturated(r.cpu, result) or r.measures == "decode"
                                   or (r.au or 0) >= result.settings.au_target, r, None,  # the GPUs set its pace
                                   run_spread(result, r) if r.kind == "replay" else ASSUMED))
    tool = raw_tool(result)  # fio, or the raw S3 client on objects
    for b in (result.baseline.points if result.baseline else []):
        if b.cache == "cold" and raw_valid(b):
            found.append(StorageFigure(b.samples_per_s, b.mb_per_s, f"{tool}, {raw_depth(tool, b.concurrency)}",
                                       cpu_saturated(b.cpu, result), None, b, raw_spread(b)))
    return max(found, key=lambda f: f.samples_per_s, default=None)


def run_spread(result: Result, run: Run) -> Spread:
    """The run-to-run spread of a replay configuration: over its --repeat runs, else over its epochs after the
    first (two or more), else ASSUMED."""
    key = (run.source, run.order, run.engine, run.concurrency, run.cache)
    for st in result.stats or stats(result):
        if (st.source, st.order, st.engine, st.readers, st.cache) == key and st.repeats > 1 and st.spread is not None:
            return Spread(st.spread, f"over {st.repeats} repeats", True, st.spread / 2, st.spread / 2)
    same = sorted((r for r in replay_runs(result) if _config(r) == _config(run) and r.repeat == run.repeat),
                  key=lambda r: r.epoch)[1:]
    rates = [r.samples_per_s for r in same]
    if len(rates) >= 2 and sum(rates) > 0:
        value = (max(rates) - min(rates)) / (sum(rates) / len(rates))
        return Spread(value, f"over {len(rates)} epochs", True, value / 2, value / 2)
    return ASSUMED


def raw_spread(b: RawPoint) -> Spread:
    """The spread of fio's runs at one point (cold points run more than once; the fastest is kept)."""
    xs = b.runs_samples_per_s
    if len(xs) >= 2 and max(xs) > 0:
        value = (max(xs) - min(xs)) / max(xs)
        return Spread(value, f"over {len(xs)} fio runs", True, value, 0.0)
    return ASSUMED


def steady_rate(run: Run) -> float:
    """A run's samples/s once its first batch arrived: what a bigger epoch reads at, start-up paid once."""
    first = run.first_batch_s
    if not first or run.seconds - first <= 0.01 * run.seconds:
        return run.samples_per_s
    after = run.samples - (run.batch_size or 1) * max(run.gpus or run.ranks or 1, 1)
    return max(run.samples_per_s, after / (run.seconds - first)) if after > 0 else run.samples_per_s


def round_files(n: float) -> int:
    """n rounded up to two significant digits: 13,421 -> 14,000."""
    n = max(1, math.ceil(n))
    step = 10 ** max(0, len(str(n)) - 2)
    return -(-n // step) * step
