"""The figures of one client's answer: its input pipeline's figure, the GPUs fed by the storage and by this client
(a range where the evidence is within its spread of a line), the answer for the GPUs asked about, and the limit
with the sentence that shows it, each by the rules of rules.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

from iobench.answer.rules import (
    CPU_SATURATED,
    REACHES,
    Spread,
    StorageFigure,
    _saturation,
    au_pct,
    cpu_saturated,
    cpu_words,
    demand,
    gpus_for,
    gpus_range,
    mean_by_concurrency,
    near_line,
    pct,
    raw_valid,
    supply_run,
    training_runs,
    usable_cores,
)
from iobench.answer.search import count_aus
from iobench.answer.words import gpu_short, raw_depth, raw_tool, reader_unit, readers
from iobench.pipelines import RAW
from iobench.result import Result, Run


@dataclass(frozen=True)
class Pipeline:
    """What this client's training-shaped input pipeline delivered: the figure, what measured it, that run."""

    samples_per_s: float
    what: str
    run: Run


@dataclass(frozen=True)
class Count:
    """GPUs fed, as a range when the evidence is within its spread of a GPU boundary, and how it was found."""

    low: int
    high: int
    confirmed: bool  # training runs measured it
    how: str
    near: str = ""  # which figure sits nearest which line (said when borderline, or close to it)
    close: bool = False  # a figure of one run within 5% of its line: no range claimed, but said

    @property
    def value(self) -> int:
        """The count stated: the low end (a borderline count is never rounded up)."""
        return self.low

    @property
    def borderline(self) -> bool:
        return self.low != self.high

    def words(self) -> str:
        return f"{self.low}-{self.high}" if self.borderline else f"{self.low}"


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
    run: Run

    @property
    def decodes(self) -> bool:
        """Its CPU per sample includes decoding (--decode, or a pipeline that decodes)."""
        return self.run.decode


def ceiling(result: Result, name: str | None = None) -> Ceiling | None:
    """This client's CPU ceiling with input pipeline `name` (default the one asked first), from the run its pipeline
    figure comes from; None where that run measured no CPU per sample (a result written before it) or no pipeline
    ran."""
    name = name or asked(result)
    if (result.settings.pipelines or [RAW]) != [RAW] or name != RAW:
        result = view(result, name)
    pipe = pipeline(result)
    usable = usable_cores(result)
    if pipe is None or not usable or not pipe.run.cpu_us_per_sample:
        return None
    us = pipe.run.cpu_us_per_sample
    return Ceiling(round(usable * 1e6 / us, 2), usable, us, pipe.run.decode_cpu_us_per_sample, pipe.run)


def storage_gpus(store: StorageFigure, rate: float, tau: float) -> Count:
    """GPUs the storage figure feeds, a range within its spread of a line."""
    low, high = gpus_range(store.samples_per_s, store.spread, rate, tau)
    line = _nearest_line(store.samples_per_s, low, rate, tau)
    near = (f"the storage's {store.samples_per_s:,.0f} samples/s against the {line:,.0f} that "
            f"{round(line / (rate * tau))} need")
    return Count(low, high, False, "from the storage figure", near,
                 near_line(store.samples_per_s, line, store.spread))


def _nearest_line(x: float, low: int, rate: float, tau: float) -> float:
    """Of the demands of `low` and `low + 1` GPUs, the one nearer x."""
    lines = [demand(n, rate, tau) for n in (low, low + 1) if n > 0]
    return min(lines, key=lambda d: abs(d - x))


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
        how = (f"a training run at 1 reached AU {au_pct(best_over.au)}" if fed == 0 else
               f"training runs: AU >= {tau:.0%} at {fed}, {au_pct(best_over.au)} at {fed + 1}")
        nearest = min([c for c in (best_at, best_over) if c is not None], key=lambda c: abs(c.au - tau))
        twice = "" if nearest.runs == 1 else f", run {nearest.runs} times: their mean"
        near = (f"the training run at {nearest.run.gpus} ({readers(nearest.run).split(' x ')[-1]} each{twice}) "
                f"reached AU {au_pct(nearest.au)} against the {tau:.0%} target")
        return Count(max(low, 0), high, True, how, near, near_line(nearest.au, tau, spread))
    predicted = gpus_for(capacity, s.rate_per_gpu, tau)
    if fed > predicted:
        return Count(fed, fed, False, f"a training run fed {fed}; {fed + 1} was not tried")
    low, high = gpus_range(capacity, spread, s.rate_per_gpu, tau)
    how = "predicted from the measured rates" + (f"; a training run confirmed {fed}" if fed else "")
    line = _nearest_line(capacity, max(low, fed), s.rate_per_gpu, tau)
    near = f"{capacity:,.0f} samples/s against the {line:,.0f} that {round(line / (s.rate_per_gpu * tau))} need"
    return Count(max(low, fed), max(high, fed), False, how, near, near_line(capacity, line, spread))


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


def _unit(result: Result) -> str:
    return "requests in flight" if result.mount.objects else "readers"


def _more(result: Result) -> str:
    """What to raise for more readers: for object storage, the requests in flight (each a GET, not a thread)."""
    if result.mount.objects:
        return "requests in flight (--in-flight per reader, e.g. 16,64; or --workers/--threads)"
    return "--workers (or --threads)"


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
            f"Limit: the storage: the pipeline reached {pct(share)} of it and more {_unit(result)} gave no more "
            f"({plateau}).")
    if share >= REACHES and still_rising:
        return "input-pipeline", other, ("Limit: the input pipeline's reader count: the rate still rose with the most "
                                         f"{_unit(result)} measured, so the storage's own limit was not reached: try "
                                         f"more {_more(result)}.")
    if share >= REACHES:
        return "input-pipeline", other, ("Limit: the input pipeline's reader count, perhaps: one reader count was "
                                         "measured, so whether more readers get more from the storage was not "
                                         "tested: sweep --workers (or --threads), e.g. 2,4,8.")
    if still_rising:
        how = f"the loaders still rose with more {_unit(result)}: more {_more(result)} may get more of it"
    elif plateau:
        how = (f"more {_unit(result)} gave no more ({plateau}): the per-sample path on this client (opening files, "
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
