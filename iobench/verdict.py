"""The answer, and every rule it rests on: which runs count, the three capacities, the limit, GPUs fed.
(~600 lines: one home for every threshold and rule, so that the report, plan and cluster_verdict.py use them and
repeat none.)

One run yields three capacities, all measured in that run:

- **storage**: the most the storage gave this client, cold: the best of fio and every valid loader run at its
  best concurrency; "at least" when the client's CPU was saturated while measuring it;
- **pipeline**: what the training-shaped input pipeline (the workload's engine, batch and decode) delivered on
  this client: from valid training runs where one starved (it then delivered all it could), else the best
  valid replay run of that shape;
- **demand**: GPUs asked about x per-GPU rate x AU target.

GPUs fed = floor(min(storage, pipeline) / (AU target x per-GPU rate)), unless training runs measured it (a run
at that count reached the target and one with one more did not). The limit is named with its evidence:
`client-cpu` when iobench used nearly all the cores it may use (affinity and cgroup quota) in the run that set
the pipeline figure; `storage` when the pipeline reached about the storage figure and more readers gave no
more; `input-pipeline` when the storage gave well more than the pipeline with the CPU not saturated, or the rate
was still rising with more readers (the storage's own limit was not reached); `gpu` when the GPUs asked about
are fed. A run too short to mean anything (`validity`) is marked and never enters the answer.

Every threshold, the GPUs-fed arithmetic and the display of figures compared with a threshold live here;
runner, report and plan import them.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable

from iobench.result import Cpu, FioBaseline, Result, Run, RunStats, Settings, Verdict

# ------------------------------------------------------------------------------------------------- the rules

SATURATION = 0.9  # a reader count "saturates" the storage when its mean reaches 90% of the best mean
RISING = 1.1  # "still rising": the most readers gave > 10% more than the count before
REACHES = 0.9  # the pipeline "reaches" the storage figure at >= 90% of it
CPU_SATURATED = 0.85  # iobench used >= 85% of the cores it may use: the client's CPU set the pace
MIN_BATCHES_PER_READER = 10  # fewer, and start-up and the last half-empty batches dominate the epoch
MIN_TRAIN_STEPS = 10  # batches per GPU after the first (AU's window) for a training run's AU to mean anything
MIN_SECONDS = 0.5  # a shorter epoch is mostly start-up and timer noise
COLD_MAX = 0.05  # at most 5% of sampled pages cached before a cold epoch: it measures storage
WARM_MIN = 0.90  # at least 90% cached: the epoch measures the page cache
STARTUP_NOTE_S = 60.0  # start-up costs worth a sentence: a minute of idle GPUs before the first batch
MITIGATION_NOTE = 1.1  # a mitigation worth naming buys at least 10%
UNSTABLE = 0.05  # MLPerf Storage: a figure whose repeats spread over 5% does not repeat

LIMIT_WORDS = {"storage": "the storage", "client-cpu": "this client's CPU", "input-pipeline": "the input pipeline",
               "gpu": "the GPUs themselves", "slowest-rank": "the slowest rank"}


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
    """AU for a table cell, rounded down at 2 decimals: 0.8964 -> '0.89'."""
    return "-" if au is None else f"{floor_to(au, 2):.2f}"


def pct(x: float) -> str:
    """A fraction as a whole percentage, rounded down: 0.896 -> '89%' (never '90%')."""
    return f"{floor_to(100 * x, 0):.0f}%"


def times(x: float) -> str:
    """A ratio for text, rounded down: 0.996 -> '0.99x'."""
    return f"{floor_to(x, 2):.2f}x"


def measures(resident: float | None) -> str:
    """What an epoch's figures stand for, from the fraction of its pages cached when it started."""
    if resident is None:
        return "unknown"
    if resident <= COLD_MAX:
        return "storage"
    return "page-cache" if resident >= WARM_MIN else "mixed"


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
        return f"lasted {run.seconds:.2f} s, under {MIN_SECONDS} s: start-up and timing dominate"
    if run.cache == "cold" and run.measures in ("page-cache", "mixed"):
        return (f"cold run whose eviction did not take: {100 * (run.resident_before or 0):.0f}% of sampled pages "
                "were cached at the start, so it partly measures RAM")
    return None


def mark_validity(run: Run) -> Run:
    """Set `valid` and `invalid_reason` from `validity`."""
    reason = validity(run)
    run.valid, run.invalid_reason = reason is None, reason
    return run


def fio_valid(b: FioBaseline) -> bool:
    return b.files > 0 and b.seconds >= MIN_SECONDS


# ------------------------------------------------------------------------------------------ which runs count


def replay_runs(result: Result) -> list[Run]:
    """The sweep's valid runs: not the training runs, not the mitigations (measured apart)."""
    return [r for r in result.runs if r.valid and r.complete and r.samples and r.kind == "replay"]


def _config(r: Run) -> tuple:
    """What makes runs the same measurement: all but the epoch and the repeat."""
    return (r.source, r.order, r.engine, r.workers, r.concurrency, r.batch_size, r.decode, r.cache, r.mitigation,
            r.gpus)


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


def storage_runs(result: Result) -> list[Run]:
    """Valid replay runs that measured the storage, one per configuration at its steady state (`steady`): cold,
    the eviction took (or could not be checked); the shuffled ones when there are any, as training reads."""
    cold = [r for r in replay_runs(result) if r.cache == "cold" and r.measures in ("storage", "unknown")]
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
    cold = [r for r in shaped if r.cache == "cold" and r.measures in ("storage", "unknown")]
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
    """(smallest reader count reaching SATURATION of the best mean, still rising at the most readers)."""
    return _saturation(mean_by_concurrency((r.concurrency, r.samples_per_s) for r in runs))


def _saturation(means: dict[int, float]) -> tuple[int | None, bool]:
    if len(means) < 2:
        return None, False
    counts = list(means)
    if means[counts[-1]] > RISING * means[counts[-2]]:
        return None, True
    top = max(means.values())
    return next(c for c, v in means.items() if v >= SATURATION * top), False


def usable_cores(result: Result) -> float | None:
    return result.host.cpus_usable or result.host.cpus


def cpu_saturated(cpu: Cpu | None, result: Result) -> bool:
    """The client's CPU set the pace: iobench used >= CPU_SATURATED of the cores it may use, or, where it may use
    every core of the host, the host's cores were that busy (other processes took the rest)."""
    usable = usable_cores(result)
    if cpu is None or not usable:
        return False
    if cpu.iobench_cores and cpu.iobench_cores >= CPU_SATURATED * usable:
        return True
    whole_host = result.host.cpus is not None and usable >= result.host.cpus
    return bool(whole_host and cpu.system_busy_pct and cpu.system_busy_pct >= 100 * CPU_SATURATED)


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


def loader_words(run: Run) -> str:
    """The readers of one loader: '16 threads', '4 DataLoader workers' (every report says them so)."""
    if run.reader == "threads":
        return f"{run.concurrency} thread{'' if run.concurrency == 1 else 's'}"
    return f"{run.workers} DataLoader worker{'' if run.workers == 1 else 's'}"


def readers(run: Run) -> str:
    """'4 DataLoader workers', '16 threads', '2 GPUs x 4 workers'."""
    if run.gpus:
        return f"{run.gpus} GPU{'' if run.gpus == 1 else 's'} x {run.workers} workers"
    return loader_words(run)


def reader_unit(run: Run) -> str:
    return "threads" if run.reader == "threads" else "DataLoader workers"


# ---------------------------------------------------------------------------------------------- the answer


def gpu_words(s: Settings | Verdict, n: int) -> str:
    """'2 H200 GPUs training resnet50 (4,677 samples/s each, measured)', or for a given rate '2 GPUs consuming
    100 samples/s each'."""
    plural = "" if n == 1 else "s"
    rate = s.rate_per_gpu or 0.0
    if s.rate_kind == "given" or not s.gpu:
        return f"{n:,} GPU{plural} consuming {rate:,.0f} samples/s each"
    kind = f", {s.rate_kind}" if s.rate_kind else ""
    return f"{n:,} {s.gpu.upper()} GPU{plural} training {s.model} ({rate:,.0f} samples/s each{kind})"


def _storage(result: Result) -> tuple[float | None, str | None, bool]:
    """(storage samples/s, what measured it, at least)."""
    best: tuple[float, str, bool] | None = None
    for r in storage_runs(result):
        cand = (r.samples_per_s, f"{r.engine}, {readers(r)}" + ("" if r.source == "files" else f", {r.source}"),
                cpu_saturated(r.cpu, result))
        best = cand if best is None or cand[0] > best[0] else best
    fio = [b for b in (result.baseline.fio if result.baseline else []) if b.cache == "cold" and fio_valid(b)]
    for b in fio:
        cand = (b.files_per_s, f"fio, {b.concurrency} job{'' if b.concurrency == 1 else 's'}",
                cpu_saturated(b.cpu, result))
        best = cand if best is None or cand[0] > best[0] else best
    return best if best else (None, None, False)


def _pipeline(result: Result) -> tuple[float | None, str | None, Run | None]:
    """(pipeline samples/s, where from, the run that set it). Once a training run starved, the pipeline gave all
    it could there: the most any training run delivered is its figure. Else the best training-shaped replay run,
    or a training run that delivered more while all its GPUs were fed (the pipeline gives at least that)."""
    s = result.settings
    train = [r for r in training_runs(result) if r.delivered_per_s]
    best_train = max(train, key=lambda x: x.delivered_per_s or 0.0) if train else None
    shaped = supply_run(result)
    if best_train is not None and (any((r.au or 0) < s.au_target for r in train) or shaped is None
                                   or (best_train.delivered_per_s or 0) > shaped.samples_per_s):
        r = best_train
        return r.delivered_per_s, f"a training run with {readers(r)}, AU {au_pct(r.au or 0)}", r
    if shaped is None:
        return None, None, None
    what = f"{shaped.engine}, {readers(shaped)}" + (f", batch {shaped.batch_size}" if shaped.batch_size else "") + \
        (", decode" if shaped.decode else "") + f", {shaped.cache}"
    return shaped.samples_per_s, what, shaped


def _fed(result: Result, capacity: float) -> tuple[int, bool, str]:
    """(GPUs fed, confirmed by training runs, how it was found)."""
    s = result.settings
    assert s.rate_per_gpu is not None
    train = training_runs(result)
    tau = s.au_target
    fed_measured = max((r.gpus or 0 for r in train if (r.au or 0) >= tau), default=0)
    over = [r for r in train if r.gpus == fed_measured + 1 and (r.au or 0) < tau]
    if over:
        short = f"at {fed_measured + 1} AU {au_pct(over[0].au or 0)}, under {au_pct(tau)}"
        if fed_measured == 0:
            return 0, True, f"measured: a training run with 1 GPU reached only AU {au_pct(over[0].au or 0)}"
        return fed_measured, True, f"measured: training runs at {fed_measured} reached AU >= {tau:.0%}, {short}"
    predicted = gpus_for(capacity, s.rate_per_gpu, tau)
    if fed_measured > predicted:
        return fed_measured, False, (f"measured at {fed_measured} by a training run; {fed_measured + 1} was not "
                                     "tried")
    how = "predicted from the measured rates"
    return predicted, False, how + (f"; a training run confirmed {fed_measured}" if fed_measured else
                                    ", not confirmed by a training run")


def _limit(result: Result, storage: float | None, pipeline: float, pipe_run: Run | None, still_rising: bool,
           plateau: str | None, asked_fed: bool | None) -> tuple[str, str]:
    """(limit, the sentence that shows it). `plateau` says where more readers stopped giving more, if they did."""
    if asked_fed:
        return "gpu", "The GPUs asked about are the limit: storage and pipeline keep up with them."
    cpu_run = pipe_run.cpu if pipe_run else None
    cpu = cpu_words(cpu_run, result)
    if cpu_saturated(cpu_run, result):
        more = (f"; the storage gave {storage:,.0f} samples/s" if storage else "") + \
            (", so a client with more cores would get more" if storage and storage > pipeline else "")
        return "client-cpu", (f"This client's CPU is the limit ({cpu}); the pipeline delivered "
                              f"{pipeline:,.0f} samples/s{more}.")
    if storage is None:
        return "input-pipeline", (f"The input pipeline is the limit: {pipeline:,.0f} samples/s with no cold (storage) "
                                  f"run to compare, and the CPU not saturated ({cpu}).")
    if pipeline >= REACHES * storage and plateau:
        return "storage", (f"The storage is the limit: the pipeline reached {pct(pipeline / storage)} of the storage "
                           f"figure and more readers gave no more ({plateau}).")
    if pipeline >= REACHES * storage and still_rising:
        return "input-pipeline", ("The input pipeline's reader count is the limit: the rate was still rising with "
                                  "the most readers measured, so the storage's own limit was not reached: try more "
                                  "--workers (or --threads).")
    if pipeline >= REACHES * storage:
        return "input-pipeline", ("The input pipeline's reader count may be the limit: one reader count was "
                                  "measured, so whether more readers get more from the storage was not tested: sweep "
                                  "--workers (or --threads), e.g. 2,4,8.")
    if still_rising:
        how = "the loaders were still rising with more readers: more --workers may get more of it"
    elif plateau:
        how = (f"more readers gave no more ({plateau}), so the per-sample path on this client (opening files, handing "
               "batches between processes), not the storage, sets the pace: --mitigations measures packed layouts")
    else:
        how = "one reader count was measured: sweep --workers (or --threads) to see whether more get more"
    return "input-pipeline", (f"The input pipeline is the limit: the storage gave {storage:,.0f} samples/s but the "
                              f"pipeline delivered {pipeline:,.0f} ({pct(pipeline / storage)}) with the CPU not "
                              f"saturated ({cpu}); {how}.")


def verdict(result: Result) -> Verdict:
    if result.distributed is not None:  # the job across ranks and nodes: its own reading (cluster_verdict.py)
        from iobench.cluster_verdict import cluster_verdict

        return cluster_verdict(result)
    s = result.settings
    where = f"{result.mount.fstype} at {result.mount.path}"
    invalid = [r for r in result.runs if not r.valid]
    pool = storage_runs(result)
    best = max(pool, key=lambda r: r.samples_per_s) if pool else None
    family = [r for r in pool if best and r.order == best.order and r.engine == best.engine
              and r.source == best.source]
    sat, rising = saturation(family)
    storage, storage_from, lower = _storage(result)
    pipeline, pipeline_from, pipe_run = _pipeline(result)
    fields: dict = dict(
        storage_samples_per_s=storage, storage_from=storage_from, storage_is_lower_bound=lower,
        pipeline_samples_per_s=pipeline, pipeline_from=pipeline_from,
        cpu_saturated=cpu_saturated(pipe_run.cpu if pipe_run else None, result),
        model=s.model, gpu=s.gpu, rate_per_gpu=s.rate_per_gpu, rate_kind=s.rate_kind, au_target=s.au_target,
        gpus_asked=s.gpus, best_samples_per_s=best.samples_per_s if best else None,
        best_mb_per_s=best.mb_per_s if best else None, best_concurrency=best.concurrency if best else None,
        saturates_at=sat, still_rising=rising, order=best.order if best else None)
    if s.gpus is not None and s.rate_per_gpu:
        fields["demand_samples_per_s"] = round(demand(s.gpus, s.rate_per_gpu, s.au_target), 2)
    spread = _spread_of(result, best)
    fields["unstable"] = bool(spread and spread.unstable)
    notes = _notes(result, invalid)
    if pipeline is None and storage is None:
        answer = _no_answer(result, invalid)
        return Verdict(text=answer + notes, answer=answer, **fields)

    evidence: list[str] = []
    if storage is not None:
        evidence.append(f"Storage: {storage:,.0f} samples/s cold ({storage_from})"
                        + (", at least: the client's CPU was saturated while measuring it" if lower else "") + "."
                        + (_loader_sentence(best, sat, rising) if best else "")
                        + (_spread_sentence(spread) if spread else ""))
    else:
        evidence.append("Storage: no valid cold run, so no storage figure.")
    if pipeline is not None:
        cpu = cpu_words(pipe_run.cpu if pipe_run else None, result)
        evidence.append(f"Pipeline: {pipeline:,.0f} samples/s delivered ({pipeline_from}; {cpu}).")
    capacity = min(x for x in (storage, pipeline) if x is not None)
    if pipeline is None:  # `iobench fio`: no loader replay
        first = f"fio baseline only (no loader replay): {where} gives {capacity:,.0f} files/s cold ({storage_from})."
    else:
        first = f"{where} delivers {capacity:,.0f} samples/s to this client's input pipeline."
    if s.rate_per_gpu is None or pipeline is None:
        return Verdict(text=" ".join([first, *evidence]) + notes, answer=first, evidence=evidence, **fields)

    fed, confirmed, how = _fed(result, capacity)
    asked_fed, asked_confirmed, asked_how = _asked(result, capacity)
    limit, why = _limit(result, storage, pipeline, pipe_run, rising, _plateau(result, sat, best), asked_fed)
    tau = f">= {s.au_target:.0%} busy"
    if s.gpus is not None:
        evidence.append(f"Demand: {s.gpus:,} x {s.rate_per_gpu:,.0f} samples/s x {s.au_target:.0%} = "
                        f"{demand(s.gpus, s.rate_per_gpu, s.au_target):,.0f} samples/s.")
    predicted = gpus_for(capacity, s.rate_per_gpu, s.au_target)
    if confirmed and fed < predicted:
        over = [r for r in training_runs(result) if r.gpus == fed + 1]
        batch = over[-1].batch_size or s.batch_size if over else s.batch_size
        evidence.append(f"The measured rates would feed {predicted}, but the training run at {fed + 1} starved: each "
                        f"GPU waits on its own loader between steps (a batch of {batch} every "
                        f"{1000 * batch / s.rate_per_gpu:,.1f} ms), a cost the rates alone do not show.")
    evidence.append(why)
    if s.gpus is None:
        first = (f"{where} and this client keep {gpu_words(s, fed)} at {tau} ({how}); the limit is "
                 f"{LIMIT_WORDS[limit]}.")
    elif asked_fed:
        first = (f"Yes: {where} and this client keep {gpu_words(s, s.gpus)} at {tau} ({asked_how}). "
                 f"They keep up to {fed:,} ({how}).")
    else:
        first = (f"No: {gpu_words(s, s.gpus)} need {demand(s.gpus, s.rate_per_gpu, s.au_target):,.0f} samples/s to "
                 f"stay {tau}; {where} and this client keep {fed:,} ({how}; {asked_how}); the limit is "
                 f"{LIMIT_WORDS[limit]}.")
    return Verdict(text=" ".join([first, *evidence]) + notes, answer=first, limit=limit, evidence=evidence,
                   gpus_fed=fed, gpus_fed_confirmed=confirmed, asked_fed=asked_fed, asked_confirmed=asked_confirmed,
                   **fields)


def _spread_of(result: Result, best: Run | None) -> RunStats | None:
    """The repeats' statistics of the best cold loader configuration, when it was repeated."""
    if best is None:
        return None
    for st in result.stats or stats(result):
        if (st.source, st.order, st.engine, st.readers, st.cache) == (best.source, best.order, best.engine,
                                                                       best.concurrency, best.cache):
            return st if st.repeats > 1 else None
    return None


def _spread_sentence(st: RunStats) -> str:
    x = 100 * (st.spread or 0)
    shown = -floor_to(-x, 1) if st.unstable else floor_to(x, 1)  # rounded away from the 5% line, never across it
    text = (f" Over {st.repeats} repeats that figure was {st.mean_samples_per_s:,.0f} +/- "
            f"{st.std_samples_per_s or 0:,.0f} samples/s (spread {shown:.1f}%)")
    if st.unstable:
        return text + f": unstable, over the {UNSTABLE:.0%} that MLPerf Storage allows; repeat on a quieter system."
    return text + "."


def _plateau(result: Result, sat: int | None, best: Run | None) -> str | None:
    """Where more readers stopped giving more: the loaders' sweep, else fio's; None when neither shows it."""
    if sat is not None and best is not None:
        return f"the loaders saturate at ~{sat} {reader_unit(best)}"
    fio = [b for b in (result.baseline.fio if result.baseline else []) if b.cache == "cold" and fio_valid(b)]
    sat, _ = _saturation(mean_by_concurrency((b.concurrency, b.files_per_s) for b in fio))
    return None if sat is None else f"fio saturates at ~{sat} jobs"


def _asked(result: Result, capacity: float) -> tuple[bool | None, bool, str]:
    """(are the GPUs asked about fed, decided by a training run at exactly that count, how)."""
    s = result.settings
    if s.gpus is None or s.rate_per_gpu is None:
        return None, False, ""
    at = [r for r in training_runs(result) if r.gpus == s.gpus]
    if at:
        r = at[-1]
        return (r.au or 0) >= s.au_target, True, f"a training run at {s.gpus:,} reached AU {au_pct(r.au or 0)}"
    need = demand(s.gpus, s.rate_per_gpu, s.au_target)
    word = "cover" if capacity >= need else "fall short of"
    return capacity >= need, False, (f"predicted, not run here: the measured {capacity:,.0f} samples/s {word} the "
                                     f"{need:,.0f} they need")


def _loader_sentence(best: Run, sat: int | None, rising: bool) -> str:
    unit = reader_unit(best)
    text = (f" The loaders' best was {best.samples_per_s:,.0f} samples/s ({best.mb_per_s:,.0f} MB/s, {best.order}) at "
            f"{readers(best)} (p99 {best.latency_ms.p99:.2f} ms)")
    if rising:
        text += f", still rising at the most {unit} measured: more may read more"
    elif sat is not None:
        text += f"; it saturates at ~{sat} {unit}"
    return text + "."


def _no_answer(result: Result, invalid: list[Run]) -> str:
    """The text when no valid run remains: why, and how to get one."""
    s = result.settings
    fio = [b for b in (result.baseline.fio if result.baseline else []) if b.cache == "cold"]
    if not s.replay and fio:
        fastest = max(b.files_per_s for b in fio)
        return (f"fio baseline only: every cold fio run lasted under {MIN_SECONDS} s (the fastest read "
                f"{fastest:,.0f} files/s; a cold run cannot loop over its files), so no storage figure is given. "
                f"For one, read more: --files {max(math.ceil(2 * MIN_SECONDS * fastest), 2 * result.dataset.files):,} "
                "or more.")
    if not invalid:
        return f"No replay run was measured on {result.mount.fstype} at {result.mount.path}: no answer."
    why = invalid[0].invalid_reason
    most = max(s.concurrency or [1])
    need = MIN_BATCHES_PER_READER * (s.batch_size if s.engine == "dataloader" else 1) * max(most, 1)
    files = max(need, 2 * result.dataset.files)
    more = (f"--files {files:,} or more" if result.dataset.made_by_iobench and result.settings.replay
            else f"a dataset of {files:,} files or more")
    return (f"No valid measurement: {len(invalid)} run(s) could not mean anything (first: {why}), so no GPU count "
            f"is given. For one, read more: {more} (or a smaller --batch-size), so that each reader "
            f"({most} at most) reads at least {MIN_BATCHES_PER_READER} batches and each epoch lasts at least "
            f"{MIN_SECONDS} s.")


def _notes(result: Result, invalid: list[Run]) -> str:
    """Sentences after the evidence: remote cache, warm figures, invalid runs, start-up, mitigations."""
    text = ""
    if result.remote:
        text += " Network file system: the server's cache was not evicted."
    warm = [r for r in replay_runs(result) if r.cache == "warm"]
    if warm:
        w = max(warm, key=lambda r: r.samples_per_s)
        kind = {"page-cache": "from the page cache", "storage": "re-read, not from this client's cache",
                "mixed": "partly from the page cache"}.get(w.measures, "cache state unknown")
        text += f" Warm ({kind}): {w.samples_per_s:,.0f} samples/s at {readers(w)}."
    if invalid:
        text += f" {len(invalid)} run(s) were too short or not cold and were left out (marked invalid)."
    return text + _startup_note(result) + _mitigation_note(result)


def _startup_note(result: Result) -> str:
    """A sentence on listing cost at full scale, when it would exceed a minute."""
    if not result.metadata:
        return ""
    m = max(result.metadata, key=lambda x: x.projected_list_s)
    if m.projected_list_s < STARTUP_NOTE_S:
        return ""
    return (f" Start-up: listing {m.scale_files:,} files as ImageFolder does would take ~{m.projected_list_s / 60:,.1f}"
            f" min ({m.cache}, predicted from {m.files:,} files) before the first batch.")


def _mitigation_note(result: Result) -> str:
    """The mitigation that buys the most, when it buys at least 10%."""
    better = [m for m in result.mitigations if m.name != "baseline" and m.speedup >= MITIGATION_NOTE]
    if not better:
        return " No mitigation measured bought 10% or more." if result.mitigations else ""
    m = max(better, key=lambda x: x.speedup)
    cost = f", for {m.extra_bytes / 1e9:.2f} GB more space" if m.extra_bytes else ""
    fed = f" (enough for {m.gpus_fed} GPUs by the rates, not a training run)" if m.gpus_fed is not None else ""
    return f" Best mitigation: {m.name}, {times(m.speedup)} the baseline's samples/s{fed}{cost}."
