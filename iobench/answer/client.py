"""The answer of a run on one client (README.md: How the verdict is reached): the storage's (GPUs its
capacity feeds from one client like this one), then this client's (what its pipeline fed, and its limit); with
--gpus N the first word answers for those N. Here: the figures, the limit, the words, then `verdict`, and a
distributed run's answer in the same sentences where they say the same (`_job_answer`). Every rule is rules.py's."""

from __future__ import annotations

import math
from dataclasses import dataclass

from iobench import pipelines
from iobench.answer.cluster import STRAGGLER, as_client, host_cpu, job_runs, waits, where_rank
from iobench.answer.rules import (
    ADVICE_MARGIN,
    ASSUMED,
    CPU_SATURATED,
    MIN_BATCHES_PER_READER,
    MIN_SECONDS,
    MIN_TRAIN_STEPS,
    MITIGATION_NOTE,
    REACHES,
    STARTUP_NOTE_S,
    UNSTABLE,
    Spread,
    StorageFigure,
    _saturation,
    au_pct,
    cpu_saturated,
    cpu_words,
    demand,
    floor_to,
    gpus_for,
    mean_by_concurrency,
    near_line,
    pct,
    raw_valid,
    replay_runs,
    round_files,
    run_spread,
    saturation,
    steady_rate,
    storage_figure,
    storage_runs,
    supply_run,
    times,
    training_runs,
    usable_cores,
)
from iobench.answer.search import count_aus
from iobench.answer.words import (
    LIMITS,
    count_words,
    counted,
    dataset_line,
    gpu_short,
    gpus_short,
    left_out,
    raw_baseline,
    raw_depth,
    raw_tool,
    raw_unit,
    reader_unit,
    readers,
    said,
    server_cache_note,
)
from iobench.gpu.rates import rates
from iobench.pipelines import RAW
from iobench.result import Result, Run, Settings, Verdict


@dataclass(frozen=True)
class Pipeline:
    """What this client's training-shaped input pipeline delivered: the figure, what measured it, that run."""

    samples_per_s: float
    what: str
    run: Run


@dataclass(frozen=True)
class Count:
    """GPUs fed, as a range when the evidence is within its spread of a GPU boundary."""

    low: int  # the count stated (a borderline count is never rounded up)
    high: int
    confirmed: bool  # training runs measured it
    near: str = ""  # which figure sits nearest which line (said when borderline, or close to it)
    close: bool = False  # a figure of one run within 5% of its line: no range claimed, but said

    @property
    def borderline(self) -> bool:
        return self.low != self.high

    @property
    def range(self) -> list[int] | None:
        """[low, high] where borderline (the Verdict's *_gpus_range), else None."""
        return [self.low, self.high] if self.borderline else None

    def words(self) -> str:
        return count_words(self.low, self.range)


def asked(result: Result) -> str:
    """The input pipeline this client's answer is for: the first of --pipeline (raw in results written before it)."""
    return (result.settings.pipelines or [RAW])[0]


def view(result: Result, name: str) -> Result:
    """The result as a run of one input pipeline: its training runs those of `name` (a run's `pipeline`; raw for
    results written before it), every other run as it is. Each pipeline's client answer is this view's; the
    storage's answer never reads the training runs' pipeline."""
    runs = [r for r in result.runs if r.kind != "training" or (r.pipeline or RAW) == name]
    return result.model_copy(update={"runs": runs,
                                     "settings": result.settings.model_copy(update={"pipelines": [name]})})


def pipeline(result: Result) -> Pipeline | None:
    """What this client's input pipeline delivered. Once a training run starved, the pipeline gave all it could
    there: the most any training run delivered is its figure. Else the best training-shaped replay run, or a
    training run that delivered more while all its GPUs were fed (the pipeline gives at least that). The replay
    reads through iobench's raw reader: another pipeline's figure comes from its training runs alone."""
    s = result.settings
    train = [r for r in training_runs(result) if r.delivered_per_s]
    best_train = max(train, key=lambda x: x.delivered_per_s or 0.0) if train else None
    shaped = supply_run(result) if asked(result) == RAW else None
    if best_train is not None and (any((r.au or 0) < s.au_target for r in train) or shaped is None
                                   or (best_train.delivered_per_s or 0) > shaped.samples_per_s):
        r = best_train
        return Pipeline(r.delivered_per_s or 0.0, f"a training run with {readers(r)}, AU {au_pct(r.au or 0)}"
                        + (", warm" if r.cache == "warm" else ""), r)
    if shaped is None:
        return None
    what = f"a replay run: {shaped.engine}, {readers(shaped)}" + \
        (f", batch {shaped.batch_size}" if shaped.batch_size else "") + (", decode" if shaped.decode else "") + \
        f", {shaped.cache}"
    return Pipeline(shaped.samples_per_s, what, shaped)


@dataclass(frozen=True)
class Ceiling:
    """The most samples/s this client's CPU could deliver on the pipeline's path: the cores iobench may use over the
    CPU per sample its run measured (reading, and decoding with --decode)."""

    samples_per_s: float
    cores: float
    cpu_us_per_sample: float  # reading, and decoding with --decode
    decode_us: float | None  # of it, decoding's
    run: Run  # its `decode`: that CPU per sample includes decoding (--decode, or a pipeline that decodes)


def ceiling(result: Result, name: str | None = None) -> Ceiling | None:
    """This client's CPU ceiling with input pipeline `name` (default the one asked first), from the run its pipeline
    figure comes from; None where that run measured no CPU per sample (a result written before it) or no pipeline
    ran."""
    pipe = pipeline(view(result, name or asked(result)))
    usable = usable_cores(result)
    if pipe is None or not usable or not pipe.run.cpu_us_per_sample:
        return None
    us = pipe.run.cpu_us_per_sample
    return Ceiling(round(usable * 1e6 / us, 2), usable, us, pipe.run.decode_cpu_us_per_sample, pipe.run)


def count_of(x: float, spread: Spread, rate: float, tau: float, whose: str = "the storage's ", fed: int = 0) -> Count:
    """GPUs a figure feeds (at least `fed`, what a training run fed) at the low and the high end of its spread (a
    range where they differ); `near` names the nearer of the demands of that count and one more."""
    low, high = (max(gpus_for(y, rate, tau), fed) for y in (spread.low(x), spread.high(x)))
    line = min((demand(n, rate, tau) for n in (low, low + 1) if n > 0), key=lambda d: abs(d - x))
    near = f"{whose}{x:,.0f} samples/s against the {line:,.0f} that {round(line / (rate * tau))} need"
    return Count(low, high, False, near, near_line(x, line, spread))


def client_count(result: Result, capacity: float, spread: Spread) -> Count:
    """GPUs this client fed: measured by training runs (a count that reached the AU target next to one that did
    not), else predicted from the measured rates; a range where an AU or the rate is within its spread."""
    s = result.settings
    assert s.rate_per_gpu is not None
    tau = s.au_target
    # each count's AU as the training search judged it (search.count_aus: a run and its repeat near the target
    # averaged; of several shapes at one count, the best)
    aus = count_aus(training_runs(result))
    fed = max((n for n, c in aus.items() if c.au >= tau), default=0)
    best_over = aus.get(fed + 1)
    if best_over is not None:
        best_at = aus.get(fed)
        low = fed - 1 if best_at and spread.low(best_at.au) < tau else fed
        high = fed + 1 if spread.high(best_over.au) >= tau else fed
        nearest = min([c for c in (best_at, best_over) if c is not None], key=lambda c: abs(c.au - tau))
        twice = "" if nearest.runs == 1 else f", run {nearest.runs} times: their mean"
        near = (f"the training run at {nearest.run.gpus} ({readers(nearest.run).split(' x ')[-1]} each{twice}) "
                f"reached AU {au_pct(nearest.au)} against the {tau:.0%} target")
        return Count(max(low, 0), high, True, near, near_line(nearest.au, tau, spread))
    predicted = gpus_for(capacity, s.rate_per_gpu, tau)
    if fed > predicted:  # a training run fed more than the rates predict; one more GPU was not tried
        return Count(fed, fed, False)
    return count_of(capacity, spread, s.rate_per_gpu, tau, "", fed)


@dataclass(frozen=True)
class Asked:
    """The answer for the GPUs asked about (--gpus N)."""

    fed: bool | None  # the answer (None: borderline, or not shown): the storage's where measured, else the client's
    by: str  # "storage" | "client"
    client_fed: bool | None  # this client fed them (a training run at N, else predicted)
    confirmed: bool  # client_fed comes from a training run at exactly N
    borderline: bool
    words: str  # how the client's answer was found


def asked_for(result: Result, store: StorageFigure | None, spread: Spread, capacity: float) -> Asked | None:
    """The answer for the GPUs asked about (--gpus N); None when none were asked."""
    s = result.settings
    if s.gpus is None or s.rate_per_gpu is None:
        return None
    need = demand(s.gpus, s.rate_per_gpu, s.au_target)
    at = count_aus(training_runs(result)).get(s.gpus)
    if at is not None:
        au = at.au
        client = _side(spread.low(au) >= s.au_target, spread.high(au) < s.au_target)
        confirmed, words = True, f"a training run at {s.gpus}: AU {au_pct(au)}"
    else:
        client = _side(spread.low(capacity) >= need, spread.high(capacity) < need)
        confirmed, words = False, "predicted from the measured rates"
    if store is None:
        return Asked(client, "client", client, confirmed, client is None, words)
    lo, hi = store.spread.low(store.samples_per_s), store.spread.high(store.samples_per_s)
    storage = _side(lo >= need, hi < need and not store.lower_bound)
    if client is True and storage is None:  # a training run fed them from this storage: it gives enough
        storage = True if at and at.run.cache == "cold" else storage
    borderline = storage is None and not (store.lower_bound and hi < need)
    return Asked(storage, "storage", client, confirmed, borderline, words)


def _side(yes: bool, no: bool) -> bool | None:
    return True if yes else False if no else None


# ------------------------------------------------------------------------------------------------ the limit


def limit_of(result: Result, store: StorageFigure | None, pipe: Pipeline, spread: Spread, still_rising: bool,
           plateau: str | None, asked_fed: bool | None) -> tuple[str, str | None, str]:
    """(limit of this client's answer, another the evidence does not separate from it, the sentence that shows it).
    `plateau` says where more readers stopped giving more, if they did."""
    if asked_fed:
        return "gpu", None, "Limit: the GPUs asked about: storage and pipeline keep up with them."
    cpu = pipe.run.cpu
    usable = usable_cores(result) or 0.0
    words = cpu_words(cpu, result)
    used = (cpu.iobench_cores or 0.0) / usable if usable else 0.0
    cpu_near = bool(usable) and spread.low(used) < CPU_SATURATED <= spread.high(used)
    storage = store.samples_per_s if store else None
    # what to raise for more readers: for object storage, the requests in flight (each a GET, not a thread)
    unit, more_of = (("requests in flight", "requests in flight (--in-flight per reader, e.g. 16,64; or "
                      "--workers/--threads)") if result.mount.objects else ("readers", "--workers (or --threads)"))
    if cpu_saturated(cpu, result):
        more = f"; the storage gave {storage:,.0f} samples/s, so a client with more cores gets more" \
            if storage and storage > pipe.samples_per_s else ""
        other = "input-pipeline" if cpu_near and not (cpu.system_busy_pct or 0) >= 100 * CPU_SATURATED else None
        return "client-cpu", other, f"Limit: this client's CPU ({words}){more}."
    other = "client-cpu" if cpu_near else None
    if storage is None:
        return "input-pipeline", other, (f"Limit: the input pipeline: {pipe.samples_per_s:,.0f} samples/s with no cold "
                                         f"(storage) run to compare, the CPU not saturated ({words}).")
    share = pipe.samples_per_s / storage
    near = spread.low(share) < REACHES <= spread.high(share)
    if share >= REACHES and plateau:
        return "storage", other or ("input-pipeline" if near else None), (
            f"Limit: the storage: the pipeline reached {pct(share)} of it and more {unit} gave no more "
            f"({plateau}).")
    if share >= REACHES and still_rising:
        return "input-pipeline", other, ("Limit: the input pipeline's reader count: the rate still rose with the most "
                                         f"{unit} measured, so the storage's own limit was not reached: try "
                                         f"more {more_of}.")
    if share >= REACHES:
        return "input-pipeline", other, ("Limit: the input pipeline's reader count, perhaps: one reader count was "
                                         "measured, so whether more readers get more from the storage was not "
                                         "tested: sweep --workers (or --threads), e.g. 2,4,8.")
    if still_rising:
        how = f"the loaders still rose with more {unit}: more {more_of} may get more of it"
    elif plateau:
        how = (f"more {unit} gave no more ({plateau}): the per-sample path on this client (opening files, "
               "handing batches between processes), not the storage, sets the pace; --mitigations measures packed "
               "layouts")
    else:
        how = "one reader count was measured: sweep --workers (or --threads) to see whether more get more"
    return "input-pipeline", other or ("storage" if near and plateau else None), (
        f"Limit: the input pipeline: it delivered {pct(share)} of what the storage gave, the CPU not saturated "
        f"({words}); {how}.")


def plateau_of(result: Result, sat: int | None, best: Run | None) -> str | None:
    """Where more readers stopped giving more: the loaders' sweep, else fio's; None when neither shows it."""
    if sat is not None and best is not None:
        return f"the loaders saturate at ~{sat} {reader_unit(best)}"
    raw = [b for b in (result.baseline.points if result.baseline else []) if b.cache == "cold" and raw_valid(b)]
    sat, _ = _saturation(mean_by_concurrency((b.concurrency, b.samples_per_s) for b in raw))
    tool = raw_tool(result)
    return None if sat is None else f"{tool} saturates at ~{raw_depth(tool, sat)}"


def cores_per_gpu(result: Result, pipe: Pipeline, rate: float, tau: float) -> str | None:
    """Where the client's CPU limits: the cores one GPU's input pipeline needs at the CPU per sample measured (its
    run's `cpu_us_per_sample`; for a result written before it, the cores it used over the samples/s)."""
    cores = pipe.run.cpu.iobench_cores
    if pipe.run.cpu_us_per_sample:
        per_sample = pipe.run.cpu_us_per_sample / 1e6  # CPU seconds per sample
    elif cores and pipe.samples_per_s:
        per_sample = cores / pipe.samples_per_s
    else:
        return None
    need = per_sample * rate * tau
    return (f"At the {1e6 * per_sample:,.1f} us of CPU per sample measured here, one {gpu_short(result.settings)} "
            f"needs ~{math.ceil(10 * need) / 10:,.1f} cores of a client for its input pipeline"
            + (" (decode included)" if pipe.run.decode else "") + ".")


KIND_WORDS = {
    "measured": "measured by iobench's makers training on one H200 with synthetic data: a compute ceiling, not a "
                "measurement of yours",
    "published": "NVIDIA's published training rate",
    "mlperf-storage": "MLPerf Storage's emulated accelerator, a sleep per batch",
    "given": "given with --rate",
}


def _cores(result: Result) -> str:
    usable = usable_cores(result)
    return f"{usable:g}-core " if usable else ""


def pipeline_label(result: Result) -> str:
    """The input pipeline this client's answer is for, in words ("torchvision pipeline (CPU decode)")."""
    return pipelines.parse(asked(result)).label(gpu_decode=result.settings.consumer == "cuda")


def first_line(result: Result, store: StorageFigure | None, storage: Count | None, client: Count, limit: str,
                other: str | None, asked: Asked | None, us: float | None = None) -> str:
    """The answer in one line: the storage's, then this client's. `us`: the CPU per sample of the pipeline's run,
    where its pipeline is named (a pipeline other than raw asked for): the pipeline and, when the CPU is the limit,
    that cost are said."""
    s = result.settings
    where = f"{result.mount.fstype} at {result.mount.path}"
    limit_words = LIMITS[limit].client
    if us is not None and limit == "client-cpu":
        limit_words += f", {us:,.0f} us per sample"
    if other:
        limit_words += f" (or {LIMITS[other].said}: too near to tell)"
    named = f" with the {pipeline_label(result)}" if us is not None else ""
    client_part = f"this {_cores(result)}client feeds {client.words()}{named}" + (
        "" if limit == "gpu" else f": {limit_words}")
    storage_part = storage_words(s, store.samples_per_s if store else None, storage, bool(store and store.lower_bound))
    if asked is None:
        return f"{where}: {storage_part}; {client_part}."
    n = s.gpus
    assert n is not None and s.rate_per_gpu is not None
    need = demand(n, s.rate_per_gpu, s.au_target)
    word = "Borderline" if asked.borderline else "Yes" if asked.fed else "No" if asked.fed is False else "Not shown"
    if asked.by == "client":
        fed = "fed" if asked.client_fed else "did not feed" if asked.client_fed is False else "may feed"
        return (f"{word}: this {_cores(result)}client {fed} {gpus_short(s, str(n), n)}{named} ({asked.words}); "
                f"{storage_part}.")
    assert store is not None
    gave = f"{store.samples_per_s:,.0f} samples/s cold{', at least' if store.lower_bound else ''}"
    if asked.fed:
        most = f" and up to {storage.words()}" if storage and storage.high > n else ""
        storage_said = (f"the storage feeds {gpus_short(s, str(n), n)}{most} ({n} need {need:,.0f} samples/s; it "
                        f"gave {gave})")
    else:  # not fed, or not shown (within its spread, or a lower bound)
        enough = f" (enough for {storage.words() if storage else 0})"
        storage_said = f"{gpus_short(s, str(n), n)} need {need:,.0f} samples/s; the storage gave {gave}" + (
            enough if asked.fed is False else " (this client's CPU set the pace: it may give more)"
            if store.lower_bound else f", within its spread of that{enough}")
    client_words = f"this client fed them ({asked.words})" if asked.client_fed else f"{client_part} ({asked.words})"
    return f"{word}: {storage_said}; {client_words}."


def storage_words(s: Settings, x: float | None, count: Count | None, lower_bound: bool,
                  read: str = "cold, one client") -> str:
    """The storage's part of the answer: the GPUs its figure `x` (read so: `read`, "temperature, by whom") feeds,
    at least that many where `lower_bound`."""
    if x is None or count is None:
        return "no valid cold run measured the storage"
    if lower_bound and count.high == 0:  # "at least 0" says nothing: say what was measured
        temp, _, by = read.partition(", ")
        return (f"the storage gave at least {x:,.0f} samples/s {temp} ({by}; one {gpu_short(s)} needs "
                f"{s.au_target * (s.rate_per_gpu or 0):,.0f})")
    least = "at least " if lower_bound else ""
    return f"the storage feeds {least}{gpus_short(s, count.words(), count.low)} ({x:,.0f} samples/s {read})"


def storage_line(result: Result, store: StorageFigure | None, best: Run | None, sat: int | None,
                  rising: bool) -> str:
    """The evidence line of the storage figure: what measured it, its p99, its sweep, its spread."""
    if store is None:
        return "Storage: no valid cold run, so no storage figure."
    mb = f", {store.mb_per_s:,.0f} MB/s" if store.mb_per_s else ""
    text = f"Storage: {store.samples_per_s:,.0f} samples/s cold ({store.what}{mb})"
    if store.lower_bound and store.run is not None and store.run.measures == "decode":
        text += ", at least: decoding took most of each reader's time while measuring it"
    elif store.lower_bound:
        cpu = store.run.cpu if store.run else store.raw.cpu if store.raw else None
        text += f", at least: {cpu_words(cpu, result)} while measuring it"
    if best is not None and store.run is not best:
        text += f"; the loaders' best {best.samples_per_s:,.0f} at {readers(best)} (p99 {best.timed.p99:.2f} ms)"
    elif best is not None:
        text += f"; p99 {best.timed.p99:.2f} ms"
    if best is not None and rising:
        text += f", still rising at the most {reader_unit(best)}"
    elif best is not None and sat is not None:
        text += f", saturating at ~{sat} {reader_unit(best)}"
    sp = store.spread
    if sp.measured:
        shown = -floor_to(-100 * sp.value, 1) if sp.value > UNSTABLE else floor_to(100 * sp.value, 1)
        text += f"; spread {shown:.1f}% {sp.words}" + (
            f": unstable, over the {UNSTABLE:.0%} MLPerf Storage allows; repeat on a quieter system"
            if sp.value > UNSTABLE else "")
    return text + "."


def throttle_line(result: Result, store: StorageFigure | None) -> list[str]:
    """The evidence line of a server that throttled (object storage: 503 SlowDown), where it did: how many of the
    requests at how many in flight, and what that makes the storage figure. A loader run's, else the raw baseline's
    (its client's retries off, each 503 counted)."""
    runs = [r for r in result.runs if r.throttled and r.kind == "replay"]
    points = [p for p in (result.baseline.points if result.baseline else []) if p.throttled]
    if runs:
        run = store.run if store and store.run and store.run.throttled else max(runs, key=lambda r: r.throttled)
        text = (f"Throttled: the server throttled {run.throttled:,} of {run.samples + run.throttled:,} requests "
                f"(503 SlowDown) at {run.in_flight:,} in flight, each retried after its pause"
                + (f" ({len(runs)} runs were throttled)" if len(runs) > 1 else ""))
        sets_figure = store is not None and store.run is run
    elif points:
        p = store.raw if store and store.raw and store.raw.throttled else max(points, key=lambda x: x.throttled)
        text = (f"Throttled: the server throttled {p.throttled:,} of {p.samples + p.throttled:,} requests of the raw "
                f"baseline ({raw_tool(result)}) at {p.concurrency:,} in flight (503 SlowDown), each retried after its "
                "pause")
        sets_figure = store is not None and store.raw is p
    else:
        return []
    if sets_figure:
        text += ("; the storage figure is the server's limit under throttling (what it lets this client have), "
                 "not what its media could give")
    return [text + "."]


def need_line(s: Settings, job: int | None = None) -> str:
    """The evidence line of what one GPU (and the GPUs asked about, or a distributed job's `job`) need."""
    assert s.rate_per_gpu is not None
    need = s.au_target * s.rate_per_gpu
    kind = KIND_WORDS.get(s.rate_kind or "", s.rate_kind or "rate")
    text = f"Need: {need:,.0f} samples/s per {gpu_short(s)}, {s.au_target:.0%} of {s.rate_per_gpu:,.0f} ({kind})"
    if (gpus := job or s.gpus) is not None:
        text += f"; {gpus:,} need {demand(gpus, s.rate_per_gpu, s.au_target):,.0f}"
    return text + "."


def mlperf_line(s: Settings, store: StorageFigure) -> list[str]:
    """With an MLPerf Storage workload, the storage's answer in each of its emulated accelerators too, at its AU
    rule: iobench's emulation of the workload, never an MLPerf Storage result."""

    rows = [r for r in rates("mlperf-storage") if r.model == s.model]
    if not rows:
        return []
    counts = ("at least " if store.lower_bound else "") + ", ".join(
        f"{gpus_for(store.samples_per_s, r.samples_per_s, s.au_target)} {r.gpu.upper()}" for r in rows)
    return [f"As MLPerf Storage's {s.model} workload emulates them (iobench's emulation, not an MLPerf Storage "
            f"result): the storage feeds {counts} at AU >= {s.au_target:.0%} from one client."]


def client_line(result: Result, pipe: Pipeline, named: bool = False) -> str:
    """The evidence line of this client's pipeline and its CPU (`named`: which pipeline, and its CPU per sample)."""
    which = f"the {pipeline_label(result)}" if named else "its input pipeline"
    us = f", {pipe.run.cpu_us_per_sample:,.0f} us of CPU per sample" if named and pipe.run.cpu_us_per_sample else ""
    return (f"This client: {which} delivered {pipe.samples_per_s:,.0f} samples/s ({pipe.what}{us}); "
            f"{cpu_words(pipe.run.cpu, result)}.")


def pipeline_line(name: str, v: Verdict) -> str:
    """The evidence line of another pipeline measured (--pipeline a,b): what this client fed with it."""
    label = pipelines.parse(name).label()
    if v.pipeline_samples_per_s is None or v.client_gpus_fed is None:
        return f"With the {label}: no valid training run, so no answer for this client with it."
    fed = count_words(v.client_gpus_fed, v.client_gpus_range)
    limit = LIMITS[v.limit or "storage"].client
    us = f", {v.pipeline_cpu_us_per_sample:,.0f} us of CPU per sample" if v.pipeline_cpu_us_per_sample else ""
    return (f"With the {label}: this client feeds {fed}: {limit} ({v.pipeline_samples_per_s:,.0f} samples/s "
            f"delivered{us}).")


def ceiling_line(c: Ceiling) -> str:
    """The evidence line of this client's CPU ceiling: its cores over the CPU per sample measured."""
    what = ("reading and decoding" if c.run.decode else "reading") if c.decode_us is None else \
        f"reading and decoding, {c.decode_us:,.1f} us of it decoding"
    return (f"This client's CPU ceiling: ~{c.samples_per_s:,.0f} samples/s = its {c.cores:g} cores / "
            f"{c.cpu_us_per_sample:,.1f} us of CPU per sample ({what}, measured at {readers(c.run)}): the most its "
            "CPU could deliver on this path.")


def no_answer(result: Result, invalid: list[Run]) -> list[str]:
    """The lines when no valid run remains: the answer (none, and what would give one: a --files that meets every
    rule it names at the rates measured), then why."""
    s = result.settings
    raw = [b for b in (result.baseline.points if result.baseline else []) if b.cache == "cold"]
    if not s.replay and raw:
        fastest = max(b.samples_per_s for b in raw)
        files = round_files(max(2 * MIN_SECONDS * fastest, 2 * result.dataset.files))  # fio's rate: no loader start-up
        return [f"{raw_baseline(result)} only, and no storage figure: read more, --files {files:,} or more.",
                f"Every cold {raw_tool(result)} run lasted under {MIN_SECONDS} s (the fastest read {fastest:,.0f} "
                "files/s; a cold run cannot loop over its files)."]
    if not invalid:
        return [f"No replay run was measured on {result.mount.fstype} at {result.mount.path}: no answer."]
    files = advised_files(result)
    more = (f"--files {files:,} or more" if result.dataset.made_by_iobench and s.replay
            else f"a dataset of {files:,} files or more")
    return [f"No valid measurement, so no GPU count: read more, {more}.",
            f"{len(invalid)} run(s) left out; the first: {invalid[0].invalid_reason}.",
            f"{files:,} files give each reader {MIN_BATCHES_PER_READER} batches or more and an epoch of "
            f"{MIN_SECONDS} s or more at {ADVICE_MARGIN}x the fastest rate measured."]


def advised_files(result: Result) -> int:
    """A dataset size that meets every rule a run is judged by, at the rates this result measured: 10 batches per
    reader at the most readers, 11 steps per GPU for the GPUs asked about, and an epoch of MIN_SECONDS at ADVICE_MARGIN
    times the fastest steady rate any of its runs reached (`steady_rate`: a short epoch is mostly its DataLoader's
    start-up, and a bigger one reads faster). A distributed run's: 11 steps for each rank, at its epochs' rate."""
    s, d = result.settings, result.distributed
    batch = s.batch_size if s.engine == "dataloader" or d else 1
    need = [(MIN_TRAIN_STEPS + 1) * batch * ((d.world_size if d else s.gpus) or 0)]
    if d is None:
        need += [MIN_BATCHES_PER_READER * batch * max(max(s.concurrency or [1]), 1), result.dataset.files + 1]
    fastest = max((steady_rate(r) for r in result.runs if d is None or r.ranks), default=0.0)
    return round_files(max(*need, math.ceil(ADVICE_MARGIN * MIN_SECONDS * fastest)))


def note_lines(result: Result, invalid: list[Run]) -> list[str]:
    """Lines after the evidence: remote cache, warm figures, invalid runs, start-up, mitigations."""
    out = []
    if result.remote:
        out.append(server_cache_note(result))
    warm = [r for r in replay_runs(result) if r.cache == "warm"]
    if warm:
        w = max(warm, key=lambda r: r.samples_per_s)
        kind = {"page-cache": "from the page cache", "storage": "re-read, not from this client's cache",
                "mixed": "partly from the page cache"}.get(w.measures, "cache state unknown")
        out.append(f"Warm ({kind}): {w.samples_per_s:,.0f} samples/s at {readers(w)}.")
    out += left_out(invalid, "run") + _startup_note(result) + _mitigation_note(result) + _fuse_note(result)
    return out


def _startup_note(result: Result) -> list[str]:
    """Listing cost at full scale, when it would exceed a minute."""
    if not result.metadata:
        return []
    m = max(result.metadata, key=lambda x: x.projected_list_s)
    if m.projected_list_s < STARTUP_NOTE_S:
        return []
    what, items = ((f"keys ({-(-m.scale_files // 1000):,} LIST requests of 1,000)", "keys") if result.mount.objects
                   else ("files as ImageFolder does", "files"))
    return [f"Start-up: listing {m.scale_files:,} {what} would take ~{m.projected_list_s / 60:,.1f} min ({m.cache}, "
            f"predicted from {m.files:,} {items}) before the first batch."]


def _mitigation_note(result: Result) -> list[str]:
    """The valid mitigation that buys the most, when it buys at least 10%."""
    better = [m for m in result.mitigations if m.name != "baseline" and m.valid and m.speedup >= MITIGATION_NOTE]
    if not better:
        return ["No mitigation measured bought 10% or more."] if result.mitigations else []
    m = max(better, key=lambda x: x.speedup)
    cost = f", for {m.extra_bytes / 1e9:.2f} GB more space" if m.extra_bytes else ""
    fed = f" (enough for {m.gpus_fed} GPUs by the rates, not a training run)" if m.gpus_fed is not None else ""
    return [f"Best mitigation: {m.name}, {times(m.speedup)} the baseline's samples/s{fed}{cost}."]


def _fuse_note(result: Result) -> list[str]:
    """`run --url --mount`: which way of reading the same bucket was faster, and by how much."""
    f = result.fuse_view
    if f is None:
        return []
    files = f"files through the FUSE view {f.mount} ({f.fstype}): {f.files_samples_per_s:,.0f} samples/s"
    objects = f"objects by GETs: {f.objects_samples_per_s:,.0f} samples/s"
    first, second = (files, objects) if f.faster == "files" else (objects, files)
    flag = "" if f.valid else " (an epoch of the two is invalid: see the runs)"
    return [f"Objects vs files on the same storage ({f.cache}, {f.readers} readers): {f.faster} are {times(f.ratio)} "
            f"as fast; {first}, {second}{flag}."]


CLIENT_SIDE = ("client-cpu", "input-pipeline")  # limits that name this client, not the storage or the GPUs


def verdict(result: Result) -> Verdict:
    """The answer of a result: the job's for a distributed run (`_job_answer`), else one client's for the
    first input pipeline asked (--pipeline), with a line for each other one measured (each its own view of the
    result: `view`, above); the storage's answer is the same for all."""
    if result.distributed is not None:
        return _job_answer(result)
    names = result.settings.pipelines or [RAW]
    named = names != [RAW]
    others = {n: _answer(view(result, n), named, []) for n in names[1:]}
    v = _answer(view(result, names[0]), named, [pipeline_line(n, o) for n, o in others.items()])
    if others:
        v.pipelines_fed = {names[0]: v.client_gpus_fed, **{n: o.client_gpus_fed for n, o in others.items()}}
    return v


def _answer(result: Result, named: bool, extra: list[str]) -> Verdict:
    """The answer of a result of one pipeline; `named`: the pipeline is named in the first line (a pipeline other
    than raw was asked for); `extra`: evidence lines of the other pipelines."""
    s = result.settings
    invalid = [r for r in result.runs if not r.valid]
    store = storage_figure(result)
    pipe = pipeline(result)
    pool = storage_runs(result)
    best = max(pool, key=lambda r: r.samples_per_s) if pool else None
    family = [r for r in pool if best and (r.order, r.engine, r.source) == (best.order, best.engine, best.source)]
    sat, rising = saturation(family)
    fields: dict = dict(
        storage_samples_per_s=store.samples_per_s if store else None, storage_from=store.what if store else None,
        storage_is_lower_bound=bool(store and store.lower_bound),
        storage_spread=round(store.spread.value, 4) if store else None,
        storage_spread_measured=bool(store and store.spread.measured),
        pipeline_samples_per_s=pipe.samples_per_s if pipe else None, pipeline_from=pipe.what if pipe else None,
        cpu_saturated=cpu_saturated(pipe.run.cpu if pipe else None, result),
        client_pipeline=asked(result), pipeline_cpu_us_per_sample=pipe.run.cpu_us_per_sample if pipe else None,
        gpus_asked=s.gpus, best_samples_per_s=best.samples_per_s if best else None,
        best_mb_per_s=best.mb_per_s if best else None, best_concurrency=best.concurrency if best else None,
        saturates_at=sat, still_rising=rising, order=best.order if best else None,
        unstable=bool(store and store.spread.measured and store.spread.value > UNSTABLE))
    if s.gpus is not None and s.rate_per_gpu:
        fields["demand_samples_per_s"] = round(demand(s.gpus, s.rate_per_gpu, s.au_target), 2)
    where = f"{result.mount.fstype} at {result.mount.path}"
    notes = note_lines(result, invalid)
    if store is None and pipe is None:
        first, *reasons = no_answer(result, invalid)
        return said(s, first, reasons + dataset_line(result) + extra, notes, **fields)
    evidence = [storage_line(result, store, best, sat, rising), *throttle_line(result, store), *dataset_line(result)]
    if s.rate_per_gpu is None or pipe is None:  # `iobench fio` (no loader), or no GPU consumer to count
        if pipe is None and store is not None and s.replay and s.rate_per_gpu:  # the raw baseline counted, no loader
            fed = count_of(store.samples_per_s, store.spread, s.rate_per_gpu, s.au_target)
            first = (f"{where}: the storage feeds {'at least ' if store.lower_bound else ''}"
                     f"{gpus_short(s, fed.words(), fed.low)} ({store.samples_per_s:,.0f} samples/s cold, "
                     f"{store.what}); no loader run counted, so this client was not measured.")
            first_invalid = invalid[0].invalid_reason if invalid else "none was made"
            evidence += [need_line(s), f"For this client's answer, read more: --files {advised_files(result):,} or "
                                        f"more (no loader run counted; the first: {first_invalid}).", *extra]
            return said(s, first, evidence, notes, storage_gpus_fed=fed.low, storage_gpus_range=fed.range, **fields)
        if pipe is None and store is not None:
            first = (f"{raw_baseline(result)} only: {where} gives {store.samples_per_s:,.0f} {raw_unit(result)} cold "
                     f"({store.what}).")
        else:  # a pipeline figure (with or without the storage's: not neither, answered above)
            assert pipe is not None
            first = (f"{where} gives {store.samples_per_s:,.0f} samples/s cold ({store.what}); this client's pipeline "
                     f"delivered {pipe.samples_per_s:,.0f}." if store else
                     f"{where}: no cold run, so no storage figure; this client's pipeline delivered "
                     f"{pipe.samples_per_s:,.0f} samples/s.")
            evidence.append(client_line(result, pipe, named))
        return said(s, first, evidence + extra, notes, **fields)

    rate, tau = s.rate_per_gpu, s.au_target
    # how far this client's rate (and so an AU) moves between identical runs: its replay configuration's spread
    supply = supply_run(result)
    pipe_spread = run_spread(result, supply) if supply is not None else store.spread if store else ASSUMED
    storage_count = count_of(store.samples_per_s, store.spread, rate, tau) if store else None
    capacity = min(x for x in (store.samples_per_s if store else None, pipe.samples_per_s) if x is not None)
    client = client_count(result, capacity, pipe_spread)
    asked_n = asked_for(result, store, pipe_spread, capacity)
    limit, other, why = limit_of(result, store, pipe, pipe_spread, rising, plateau_of(result, sat, best),
                               asked_n.client_fed if asked_n else None)
    if storage_count is not None and client.low > storage_count.low and limit in CLIENT_SIDE:
        # never "the storage feeds 2 ... this client feeds 3: its input pipeline is the limit": the client fed more
        # than the storage's cold figure only where it read faster than that (warm, or within a spread)
        limit, other, why = "storage", None, (
            f"Limit: the storage: this client's {client.words()} rest on reads faster than the storage's cold figure "
            f"({pipe.what}); read cold, the storage feeds {storage_count.words()}.")
    evidence.append(need_line(s))
    if s.rate_kind == "mlperf-storage" and store is not None:
        evidence += mlperf_line(s, store)
    evidence.append(client_line(result, pipe, named))
    predicted = gpus_for(capacity, rate, tau)
    if client.confirmed and client.low < predicted:
        over = [r for r in training_runs(result) if r.gpus == client.low + 1]
        batch = over[-1].batch_size or s.batch_size if over else s.batch_size
        evidence.append(f"The measured rates would feed {predicted}, but the training run at {client.low + 1} "
                        f"starved: each GPU waits on its own loader between steps (a batch of {batch} every "
                        f"{1000 * batch / rate:,.1f} ms), a cost the rates alone do not show.")
    evidence.append(why)
    if limit == "client-cpu" or other == "client-cpu":
        top = ceiling(result)
        if top is not None:
            evidence.append(ceiling_line(top))
        cores = cores_per_gpu(result, pipe, rate, tau)
        if cores is not None:
            evidence.append(cores)
    for count, spread in ((storage_count, store.spread if store else ASSUMED), (client, pipe_spread)):
        if count is not None and count.borderline:
            evidence.append(f"Borderline ({count.words()}): {count.near}, within the run-to-run spread "
                            f"({100 * spread.value:.1f}% {spread.words}).")
        elif count is not None and count.close:
            evidence.append(f"Near the line: {count.near} (within {UNSTABLE:.0%}, what MLPerf Storage lets repeats "
                            f"differ by): one run measures no spread, so whether identical runs give {count.low} "
                            "too is not shown; --repeat 3 measures it.")
    first = first_line(result, store, storage_count, client, limit, other, asked_n,
                       pipe.run.cpu_us_per_sample if named else None)
    if asked_n is not None:
        fields.update(asked_fed=asked_n.fed, asked_by=asked_n.by, asked_client_fed=asked_n.client_fed,
                      asked_confirmed=asked_n.confirmed)
    return said(s, first, evidence + extra, notes, limit=limit, limit_or=other,
                storage_gpus_fed=storage_count.low if storage_count else None,
                storage_gpus_range=storage_count.range if storage_count else None, client_gpus_fed=client.low,
                gpus_fed_confirmed=client.confirmed, client_gpus_range=client.range,
                borderline=bool(client.borderline or (storage_count and storage_count.borderline)
                                or (asked_n and asked_n.borderline)), **fields)


def _job_answer(result: Result) -> Verdict:
    """A distributed run's answer, in the single client's sentences where they say the same: does this storage feed
    the job's GPUs, and if not, what held the job back (the storage, a node's CPU, the slowest rank, or the ranks'
    input pipeline where epochs read the page cache). Two answers, as for one client: the storage's, for all the
    job's clients together (the GPUs its rate to them feeds; at least that many unless the storage was the limit),
    then the job's (the GPUs its ranks kept fed, the slowest rank setting the pace) and what held it back."""
    s = result.settings
    d = result.distributed
    assert d is not None and s.rate_per_gpu is not None
    nodes = f"{counted(d.world_size, 'rank')} on {counted(d.nodes, 'node')}"
    pool = job_runs(result)
    invalid = [r for r in result.runs if r.ranks and not r.valid]
    need = demand(d.world_size, s.rate_per_gpu, s.au_target)
    fields: dict = dict(gpus_asked=d.world_size, demand_samples_per_s=round(need, 2))
    notes = [server_cache_note(result)] if result.remote else []
    if d.shared_page_cache:
        notes.append("Ranks shared a host's page cache.")
    notes += left_out(invalid, "epoch")
    if not pool:
        why = invalid[0].invalid_reason if invalid else "no epoch finished"
        advised = advised_files(result)
        first = f"No valid distributed epoch ({why}), so no answer for {nodes}: read more, --files {advised:,} or more."
        evidence = [f"{advised:,} files give each rank {MIN_TRAIN_STEPS + 1} batches of {s.batch_size} or more and "
                    f"epochs of {MIN_SECONDS} s or more at {ADVICE_MARGIN}x the fastest rate measured."]
        return said(s, first, evidence, notes, **fields)
    temp = pool[0].cache  # cold, or warm where no cold epoch was valid
    run = min(pool, key=lambda r: r.samples_per_s)  # the slowest valid epoch decides: the job must get through each
    fed = all((r.au or 0.0) >= s.au_target for r in pool)
    any_cold = any(r.cache == "cold" for r in result.runs if r.ranks)
    state = "cold" if temp == "cold" else ("warm (from the page cache: no cold epoch was valid)" if any_cold
                                           else "warm (from the page cache)")
    workers = counted(d.workers, "DataLoader worker")
    tau = f">= {s.au_target:.0%} busy"
    au = f"AU {au_pct(run.au or 0.0)}, lowest rank {au_pct(run.au_min or 0.0)}"
    per_node = run.samples_per_s / d.nodes
    data_wait, allreduce, seconds = waits(result, run)
    evidence = [
        f"Cluster: {run.samples_per_s:,.0f} samples/s ({run.mb_per_s:,.0f} MB/s) read by {nodes} together, "
        f"{per_node:,.0f} per node, {workers} per rank, {state} (epoch {run.epoch}, the slowest of "
        f"{counted(len(pool), temp + ' epoch')}); every sample read exactly once across the ranks: "
        f"{'yes' if run.read_once else 'no'}.",
        need_line(s, d.world_size),
        f"Ranks: each waited {data_wait:,.2f} s for data and {allreduce:,.2f} s at the per-step allreduce in a "
        f"{seconds:,.2f} s epoch (means); the slowest ({where_rank(result, run.slowest_rank or 0)}) kept "
        f"{pct(1 - (run.straggler_spread or 0.0))} of the fastest one's pace.",
        *dataset_line(result),
    ]
    hosts = host_cpu(result, run.epoch)
    busy = [x for x in hosts if cpu_saturated(*as_client(result, x))]
    ram = run.cache == "warm" and run.measures != "storage"  # read (or may have) the page cache: not the storage
    if hosts:
        top = busy[0] if busy else max(hosts, key=lambda x: x.cores / x.usable if x.usable else 0.0)
        evidence.append(f"CPU: on the busiest node, {top.host}, {cpu_words(*as_client(result, top))}.")
    if fed:
        limit = "gpu"
        job_gpus, confirmed = d.world_size, True
        why = (f"Limit: the GPUs: every {temp} epoch kept them {tau}; what more GPUs would get was not "
               "measured (run with more ranks).")
    else:
        job_gpus, confirmed = min(gpus_for(run.samples_per_s, s.rate_per_gpu, s.au_target), d.world_size - 1), False
        if busy:
            limit = "client-cpu"
            why = (f"Limit: a node's CPU: {busy[0].host}'s cores were >= {CPU_SATURATED:.0%} busy (see CPU); "
                   + ("these epochs read the page cache, so the storage was not measured." if ram else
                      "the storage may give more to clients with more cores or fewer ranks."))
        elif (run.straggler_spread or 0.0) >= STRAGGLER:
            limit = "slowest-rank"
            why = (f"Limit: the slowest rank: {where_rank(result, run.slowest_rank or 0)} read at "
                   f"{pct(1 - (run.straggler_spread or 0.0))} of the fastest rank's pace, and every step waits for it "
                   "at the allreduce (see ranks[] for its host's mount and CPU).")
        else:  # ram: the page cache gave these samples, so what the storage gives was not measured
            limit = "input-pipeline" if ram else "storage"
            pace = (f"the ranks kept an even pace (within {pct(run.straggler_spread or 0.0)}) and spent "
                    f"{pct(data_wait / seconds if seconds else 0.0)} of the epoch waiting for data")
            why = (f"Limit: the ranks' input pipeline, not the storage: these epochs read the page cache, so the "
                   f"storage was not measured; {pace} at {counted(d.workers, 'worker')} per rank, no node's CPU "
                   "saturated. Run --cache cold for the storage's figure." if ram else
                   f"Limit: the storage: {pace}, no node's CPU saturated; at {counted(d.workers, 'worker')} per rank "
                   "(more workers per rank were not measured).")
    evidence.append(why)
    # the storage's answer: what its rate to all these clients feeds; at least that while something else held the
    # job back (the GPUs took what they asked, a CPU or a rank was slower than the storage)
    storage = None if ram else run.samples_per_s
    at_least = fed or limit != "storage"
    storage_gpus = gpus_for(storage, s.rate_per_gpu, s.au_target) if storage is not None else None
    count = Count(storage_gpus, storage_gpus, False) if storage_gpus is not None else None
    storage_part = storage_words(s, storage, count, at_least, f"{temp}, {nodes}")
    if fed:
        first = f"Yes: {storage_part}; the job fed all its GPUs ({au})."
    else:
        held = "a node's CPU" if limit == "client-cpu" else LIMITS[limit].said
        first = (f"No: {gpus_short(s, str(d.world_size), d.world_size)} need {need:,.0f} samples/s; {storage_part}; "
                 f"the job fed {job_gpus} of its {d.world_size}: {held} is the limit.")
    return said(s, first, evidence, notes, limit=limit, storage_samples_per_s=storage, storage_is_lower_bound=at_least,
                storage_from=f"{nodes}, {d.workers} DataLoader workers per rank, {temp}",
                storage_gpus_fed=storage_gpus, client_gpus_fed=job_gpus, pipeline_samples_per_s=run.delivered_per_s,
                pipeline_from=f"epoch {run.epoch} of the job", cpu_saturated=bool(busy), gpus_fed_confirmed=confirmed,
                asked_fed=fed, asked_by="storage" if storage is not None else "client", asked_client_fed=fed,
                asked_confirmed=True, best_samples_per_s=run.samples_per_s, best_mb_per_s=run.mb_per_s,
                best_concurrency=d.workers, order="shuffled", **fields)
