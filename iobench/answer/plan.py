"""Capacity arithmetic (`iobench plan`): what N GPUs training a model ask of the storage, and what a measured result
says it gives, with its what-ifs (predictions, never measurements). Pure functions, no IO. Its conventions (demand,
minimum, the default mean sample, the kinds of rate, the cache and Little's-law what-ifs) are docs/plan.md's."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from io import StringIO
from typing import TYPE_CHECKING

from iobench import pipelines
from iobench.answer.client import asked, ceiling
from iobench.answer.cluster import job_run
from iobench.answer.rules import demand as need
from iobench.answer.rules import gpus_for, mean_by_concurrency, replay_runs, still_rising, storage_figure, storage_runs
from iobench.answer.words import raw_depth, raw_tool, server_cache_note
from iobench.answer.words import readers as readers_of
from iobench.dataset.sizes import IMAGENET_MEAN
from iobench.gpu.rates import (
    CPU_PREPROCESS_PER_CORE,
    GIVEN,
    KIND_ALIASES,
    KINDS,
    canonical_gpu,
    canonical_model,
    cpu_cores_for_decode,
    first_kinds,
    kind_of_source,
    kinds_of,
    rate_for,
    sample_size,
)
from iobench.result import Result, Run

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

IMAGENET_FILES = 1_281_167
CACHE_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)
CONCURRENCY_STEPS = (1, 2, 4, 8, 16)  # multiples of the reference run's readers for the Little's-law what-if
# Past these a figure comes of an absurd input (a typo, an edited result), not of a plan: refused, never printed
MAX_GPUS = 10_000_000  # more GPUs than any cluster holds
MAX_RATE = 1e9  # samples/s one GPU consumes
MAX_FILES = 10**12  # samples in a dataset
MAX_MEAN_KB = 1e9  # kB a sample holds on average (1 TB)
EVEN = 0.9  # per-node rate at more nodes >= 90% of that at the fewest: the storage scaled with its clients
MAX_FIGURE = 1e18  # any figure of the plan (samples/s, MB/s, s, B): beyond, the inputs are absurd together


class Implausible(ValueError):
    """A plan figure past what any real input gives (MAX_GPUS, ...): `plan` says which and prints none."""


def gpus_supported(samples_per_s: float, rate_per_gpu: float, au_target: float) -> int:
    """GPUs a sustained rate keeps at AU >= au_target: floor(rate / (au_target x per-GPU rate)), the verdict's rule.
    Implausible past MAX_GPUS (a rate no storage gives: the plan would print a number of hundreds of digits)."""
    if not au_target * rate_per_gpu > 0:
        return 0
    if not samples_per_s / (au_target * rate_per_gpu) <= MAX_GPUS:
        raise Implausible(f"{samples_per_s:,.3g} samples/s would keep more than {MAX_GPUS:,} GPUs of "
                          f"{rate_text(rate_per_gpu)} samples/s at AU >= {au_target:.0%}")
    return gpus_for(samples_per_s, rate_per_gpu, au_target)


def within(value: float, most: float, what: str, why: str) -> None:
    """`value` (an input: `what` it counts) is finite and at most `most`, else Implausible saying `why` not."""
    if value <= most and (isinstance(value, int) or math.isfinite(value)):
        return
    digits = len(str(value))
    shown = (f"{value:,}" if digits <= 18 else f"a {digits}-digit number of") if isinstance(value, int) else \
        f"{value:,.3g}"
    raise Implausible(f"{shown} {what} is more than {most:,.0f} ({why}): not a plausible plan")


def printable(plan: DataclassInstance | type[DataclassInstance], where: str = "") -> None:
    """Every figure of the plan finite and within MAX_FIGURE (what the inputs give together: a tiny --rate makes an
    epoch last for ever), else Implausible naming it: nothing of hundreds of digits is printed."""
    for f in fields(plan):
        value = getattr(plan, f.name)
        for k, v in enumerate(value) if isinstance(value, list) else [(None, value)]:
            name = f"{where}{f.name}" + (f"[{k}]" if k is not None else "")
            if is_dataclass(v):
                printable(v, f"{name}.")
            elif isinstance(v, int | float) and not isinstance(v, bool) and not abs(v) <= MAX_FIGURE:
                raise Implausible(f"its {name} would be {float(v):,.3g}, more than {MAX_FIGURE:.0e}")


def cache_mix_rate(x: float, cached: float, storage: float) -> float:
    """Prediction: samples/s when a fraction x of samples come from a cache at `cached`/s and the rest from
    storage at `storage`/s: 1 / (x/cached + (1-x)/storage) (DS-Analyzer)."""
    if not 0.0 <= x <= 1.0:
        raise ValueError("x must be within [0, 1]")
    if cached <= 0 or storage <= 0:
        raise ValueError("rates must be > 0")
    return 1.0 / (x / cached + (1.0 - x) / storage)


def littles_law(in_flight: float, latency_s: float) -> float:
    """Throughput X = L / W (Little's law): `in_flight` requests at once, each `latency_s` long."""
    if latency_s <= 0:
        raise ValueError("latency must be > 0")
    return in_flight / latency_s


@dataclass(frozen=True)
class CacheWhatIf:
    """Prediction: rate with a fraction of the dataset cached."""

    fraction: float  # of samples served from the cache
    samples_per_s: float
    gpus: int  # GPUs that rate keeps at the AU target
    label: str = ""  # what the fraction stands for, e.g. "this client's RAM"


@dataclass(frozen=True)
class ConcurrencyWhatIf:
    """Prediction: rate with `readers` readers (Little's law), beside what was measured at that count."""

    readers: int
    samples_per_s: float  # the prediction, capped
    uncapped: float  # X0 x readers / c0 before the cap
    measured: float | None  # measured cold rate at this many readers, when the sweep has one
    gpus: int


@dataclass(frozen=True)
class ScalePoint:
    """One distributed result in a scaling series."""

    nodes: int
    ranks: int
    samples_per_s: float  # the job's, all ranks together
    per_node: float
    per_node_vs_fewest: float  # per_node / per_node at the fewest nodes measured: 1.0 scales linearly
    fed: bool  # the job's GPUs were fed: samples_per_s is then a lower bound of what the storage gives


def point(result: Result) -> ScalePoint | None:
    """A distributed result's point: the job's figure (the slowest valid cold epoch, all ranks together), per node;
    a lower bound where the job was fed."""
    d = result.distributed
    run = job_run(result)
    if d is None or run is None:
        return None
    fed = bool(result.verdict and result.verdict.asked_fed)
    return ScalePoint(d.nodes, d.world_size, run.samples_per_s, run.samples_per_s / d.nodes, 1.0, fed)


def scaling(results: list[Result]) -> list[ScalePoint]:
    """The results' points by node count (for one count, the last given), each against the fewest nodes'."""
    points = {p.nodes: p for p in (point(r) for r in results) if p is not None}
    ordered = [points[n] for n in sorted(points)]
    if not ordered:
        return []
    base = ordered[0].per_node
    return [replace(p, per_node_vs_fewest=p.per_node / base if base else 0.0) for p in ordered]


def scaling_sentence(points: list[ScalePoint]) -> str | None:
    """How the storage scaled with client nodes, from two or more points; None from fewer."""
    if len(points) < 2:
        return None
    first, last = points[0], points[-1]
    if last.per_node_vs_fewest >= EVEN:
        how = "scaled with its clients"
    elif last.samples_per_s > first.samples_per_s * 1.1:
        how = "scaled less than linearly"
    else:
        how = "did not scale: more clients shared the same rate"
    bound = " (lower bounds where the job was fed)" if any(p.fed for p in points) else ""
    return (f"measured at {', '.join(str(p.nodes) for p in points)} nodes: the storage {how}: "
            f"{first.samples_per_s:,.0f} samples/s at {first.nodes} node{'s' if first.nodes > 1 else ''} "
            f"({first.per_node:,.0f} per node), {last.samples_per_s:,.0f} at {last.nodes} ({last.per_node:,.0f} per "
            f"node, {last.per_node_vs_fewest:.0%} of the first's){bound}")


@dataclass(frozen=True)
class Measured:
    """What a result says the storage gives, set against the plan's demand."""

    label: str  # "ext4 at /mnt/x"
    samples_per_s: float  # S: best cold (storage) rate; the warm rate only when no cold run exists
    cache: str  # "cold" or "warm"
    readers: int
    engine: str
    p50_ms: float
    dataset_mean_bytes: float
    gpus_supported: int  # floor(S / (target x per-GPU rate)): prediction from the sustained rate
    nodes_supported: int  # gpus_supported // gpus_per_node
    headroom: float  # S / minimum: >= 1 means enough
    spare_samples_per_s: float  # S - minimum (negative: shortfall)
    verdict_gpus_fed: int | None  # the client's answer of the result's own verdict, for the same GPU, model and rate
    verdict_confirmed: bool
    warm_samples_per_s: float | None  # C: best warm rate from the page cache, the cache what-if's cache rate
    startup_list_s: float | None  # prediction: measured list time scaled to dataset_files
    cache_whatif: list[CacheWhatIf] = field(default_factory=list)
    concurrency_whatif: list[ConcurrencyWhatIf] = field(default_factory=list)
    in_flight: float | None = None  # L = X0 x W at the reference run
    in_flight_needed: float | None = None  # L = X x W: the plan's minimum X at p50_ms, the storage figure's point
    objects: bool = False  # the result read object storage (GETs, keys), not files
    cap: float | None = None
    cap_reason: str = ""
    notes: list[str] = field(default_factory=list)
    kind_warning: str | None = None  # `mixed_kinds` of the plan's rate and the result's
    nodes_measured: int | None = None  # distributed result: client nodes that read at once (samples_per_s is theirs)
    per_node_samples_per_s: float | None = None  # samples_per_s / nodes_measured
    scaling: list[ScalePoint] = field(default_factory=list)  # distributed results at several node counts
    scaling_note: str | None = None
    cpu_us_per_sample: float | None = None  # the measuring client's CPU per sample (`client.ceiling`)
    decode_cpu_us_per_sample: float | None = None  # of it, decoding's (null: the result did not decode)
    cpu_readers: str = ""  # where it was measured: "4 DataLoader workers"
    cpu_pipeline: str | None = None  # the input pipeline whose CPU per sample is used (plan --pipeline)
    cpu_decoded: bool = False  # that CPU per sample includes decoding (--decode, or a pipeline that decodes)


@dataclass(frozen=True)
class CapacityPlan:
    """What `gpus` GPUs of a kind training a model ask of the storage (and, with a result, what it gives)."""

    gpu: str
    gpus: int
    model: str
    rate_per_gpu: float
    rate_source: str
    rate_kind: str  # "measured", "published", "mlperf-storage" (gpus.KINDS) or "given" (--rate)
    au_target: float
    gpus_per_node: int
    dataset_files: int
    mean_bytes: float
    mean_source: str
    demand_samples_per_s: float  # gpus x rate: every GPU busy all the time
    minimum_samples_per_s: float  # au_target x demand: the least that keeps AU >= target
    demand_mb_per_s: float
    minimum_mb_per_s: float
    demand_opens_per_s: float  # one open per sample (files source)
    minimum_opens_per_s: float
    startup_entries: int  # directory entries listed before the first batch (one per file)
    cpu_cores_demand: float  # decode + augment at demand (with a result: at the CPU per sample measured, `cpu_from`)
    cpu_cores_minimum: float
    epoch_s_demand: float  # dataset_files / demand
    epoch_s_minimum: float
    dataset_bytes: float
    measured: Measured | None = None
    kind_note: str | None = None  # other GPUs of the model take other kinds of rate: `kinds_apart`
    cpu_from: str | None = None  # the CPU cores measured on the result's client: how; None: the table's decode rate

    @property
    def nodes(self) -> int:
        """Client nodes the GPUs sit in."""
        return math.ceil(self.gpus / self.gpus_per_node)


def rate_text(x: float) -> str:
    """4677.3 -> "4,677.3", 100.0 -> "100"."""
    return f"{x:,.1f}".removesuffix(".0")


def mixed_kinds(figures: Iterable[tuple[str, float | None, str | None]]) -> str | None:
    """A warning when figures set side by side rest on per-GPU rates of different kinds, else None.

    figures: (what the figure is, e.g. "this plan (h100, resnet50)" or a result's label; its per-GPU samples/s;
    its kind: a `gpus.KINDS` name or "given", e.g. from `rate_kind_of`). Figures without a rate or a kind are left
    out; kinds that differ on the same samples/s mix nothing (e.g. a result's own rate passed back as --rate).
    """
    known = [(what, float(rate), KIND_ALIASES.get(kind, kind)) for what, rate, kind in figures if rate and kind]
    kinds = {k for _, _, k in known}
    if len(kinds) < 2 or all(math.isclose(r, known[0][1], rel_tol=1e-6) for _, r, _ in known):
        return None
    order = [*KINDS, GIVEN]
    names = ", ".join(sorted(kinds, key=lambda k: order.index(k) if k in order else len(order)))
    listed = "; ".join(f"{what}: {rate_text(r)} samples/s per GPU ({k})" for what, r, k in known)
    return (f"this comparison mixes kinds of per-GPU rate ({names}): {listed}; GPU counts taken at one rate do not "
            "compare with counts taken at the other (use one --rate-kind for both)")


def kinds_apart(model: str, gpu: str, kind: str) -> str | None:
    """One line when other GPUs of `model` take other kinds of rate than `kind` without --rate-kind (each its
    first kind: `gpus.first_kinds`), so that their plans do not compare with this one; None when all take `kind`,
    or for a given rate (which names no GPU)."""
    if kind == GIVEN:
        return None
    here = canonical_gpu(gpu)
    others: dict[str, list[str]] = {}
    for g, k in first_kinds(model).items():
        if g != here and k != kind:
            others.setdefault(k, []).append(g)
    if not others:
        return None
    listed = "; ".join(f"{k} on {', '.join(sorted(others[k]))}" for k in KINDS if k in others)
    mine = kinds_of(model, gpu)
    shared = [f"{g} at --rate-kind {'|'.join(both)}" for g in sorted(g for gs in others.values() for g in gs)
              if (both := [k for k in mine if k in kinds_of(model, g)])]  # the kinds this GPU compares with g at
    how = f"compare with {', '.join(shared)}" if shared else f"none of them has a rate of a kind {here} has"
    return (f"{canonical_model(model)}'s rate is of another kind on other GPUs without --rate-kind ({listed}): their "
            f"plans do not compare with this {kind} one; {how}")


def figure(x: float) -> str:
    """A figure as the plan prints it: whole from 10 up, one decimal below."""
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:,.1f}"


def _duration(s: float) -> str:
    unit, seconds = ("s", 1) if s < 120 else ("min", 60) if s < 7200 else ("h", 3600)
    return f"{s / seconds:,.1f} {unit}"


def who(p: CapacityPlan) -> str:
    """What the plan's GPUs are: "H100 training resnet50 at 1,785.7 samples/s (mlperf-storage rate)", or, for a
    rate given with --rate, "a GPU consuming 100 samples/s (given rate)" (not a GPU model: the rate is the user's)."""
    if p.rate_kind == GIVEN:
        return f"a GPU consuming {rate_text(p.rate_per_gpu)} samples/s (given rate)"
    return f"{p.gpu.upper()} training {p.model} at {rate_text(p.rate_per_gpu)} samples/s ({p.rate_kind} rate)"


def planned(p: CapacityPlan, result: Result | None = None) -> str:
    """The plan's dataset by name and size: "ImageNet-scale (1,281,167 files, 141 GB)", set apart from the dataset
    a result measured (usually far smaller)."""
    size = f"{p.dataset_files:,} files, {figure(p.dataset_bytes / 1e9)} GB"
    if result is not None and p.dataset_files == result.dataset.files:
        return f"the measured dataset ({size})"
    name = "ImageNet-scale" if p.dataset_files == IMAGENET_FILES else "the planned dataset"
    if result is None:
        return f"{name} ({size})"
    return (f"{name} ({size}), not the measured dataset ({result.dataset.files:,} files, "
            f"{figure(result.dataset.bytes / 1e9)} GB)")


def format_plan(p: CapacityPlan, width: int = 120) -> str:
    """The plan as terminal text (rich tables, no colour codes): demand, measured storage, what-ifs."""
    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None, soft_wrap=False, highlight=False)

    def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
        t = Table(title=title)
        for col in columns:
            t.add_column(col, justify="right" if col else "left")
        for row in rows:
            t.add_row(*row)
        con.print(t)

    kind = f"{p.rate_kind} rate"
    nodes = f"{p.nodes} node{'s' if p.nodes != 1 else ''} of {p.gpus_per_node}"
    each = (f"each {who(p)}" if p.rate_kind == GIVEN else
            f"{p.gpu.upper()} training {p.model} at {rate_text(p.rate_per_gpu)} samples/s per GPU ({kind})")
    name = "ImageNet-scale" if p.dataset_files == IMAGENET_FILES else "planned"
    con.print(f"{p.gpus} GPUs ({nodes}), {each}; {name} dataset {p.dataset_files:,} files x "
              f"{p.mean_bytes / 1000:,.1f} kB mean ({p.mean_source}) = {p.dataset_bytes / 1e9:,.1f} GB")
    con.print(f"per-GPU rate ({p.rate_kind}): {rate_text(p.rate_per_gpu)} samples/s, "
              f"{p.rate_source.removeprefix(f'{p.rate_kind}: ')}")
    m = p.measured
    for warning in (p.kind_note, m and m.kind_warning):
        if warning:
            con.print(f"warning: {warning}")
    objects = m is not None and m.objects
    rows = [("samples/s", p.minimum_samples_per_s, p.demand_samples_per_s),
            ("MB/s", p.minimum_mb_per_s, p.demand_mb_per_s),
            ("GETs/s (one per sample)" if objects else "file opens/s (one per sample)", p.minimum_opens_per_s,
             p.demand_opens_per_s),
            ("CPU cores for decode + augment" if p.cpu_from is None else "CPU cores (measured on this client)",
             p.cpu_cores_minimum, p.cpu_cores_demand),
            ("  per node", p.cpu_cores_minimum / p.nodes, p.cpu_cores_demand / p.nodes)]
    if p.cpu_from is not None:
        rows.append(("  per GPU", p.cpu_cores_minimum / p.gpus, p.cpu_cores_demand / p.gpus))
    table(f"what the storage must sustain for {p.gpus} GPUs at {rate_text(p.rate_per_gpu)} samples/s each ({kind}; "
          "MB = 10^6 B)", ("", f"minimum: AU >= {p.au_target:.0%}", "full speed: AU 100%"),
          [(what, figure(low), figure(high)) for what, low, high in rows]
          + [("epoch time", _duration(p.epoch_s_minimum), _duration(p.epoch_s_demand))])
    if p.cpu_from is not None:
        con.print(f"CPU cores: {p.cpu_from}.")
    if objects:
        con.print(f"start-up: {p.startup_entries:,} keys to list (a map-style dataset lists its prefix, 1,000 keys a "
                  f"request: {-(-p.startup_entries // 1000):,} LIST requests) before the first batch.")
    else:
        con.print(f"start-up: {p.startup_entries:,} directory entries to list (ImageFolder scans every file) before "
                  "the first batch.")
    con.print(f"minimum = {p.au_target:.2f} x demand: with IO overlapping compute, AU = supply / demand (as the "
              "verdict and MLPerf Storage count); plan for full speed to leave no idle time.")
    if m is None:
        return buf.getvalue()
    unit = "in flight" if m.objects else "readers"  # objects: readers x --in-flight, the sweep's axis
    fed = f"GPUs consuming {rate_text(p.rate_per_gpu)} samples/s" if p.rate_kind == GIVEN else f"{p.gpu.upper()} GPUs"
    got = [(f"sustained samples/s ({m.cache})", figure(m.samples_per_s)),
            (f"MB/s at the plan's mean ({p.mean_bytes / 1000:,.0f} kB)", figure(m.samples_per_s * p.mean_bytes / 1e6)),
            (f"{fed} it keeps at AU >= {p.au_target:.0%} (predicted, {kind})", str(m.gpus_supported))]
    if m.verdict_gpus_fed is not None:
        how = "confirmed by training runs" if m.verdict_confirmed else "predicted"
        got.append((f"GPUs the measuring client fed, in the result's verdict (same {rate_text(p.rate_per_gpu)} "
                    "samples/s)", f"{m.verdict_gpus_fed} ({how})"))
    if m.nodes_measured is not None and m.per_node_samples_per_s is not None:
        got.append((f"per client node ({m.nodes_measured} measured at once)", figure(m.per_node_samples_per_s)))
    got += [(f"client nodes of {p.gpus_per_node} GPUs (predicted, {kind})", str(m.nodes_supported)),
             (f"headroom over the minimum for {p.gpus} GPUs", f"{m.headroom:.2f}x"),
             ("spare (shortfall if negative) samples/s", figure(m.spare_samples_per_s))]
    if m.startup_list_s is not None:
        got.append((f"listing {p.dataset_files:,} files (predicted)", _duration(m.startup_list_s)))
    table(f"measured: {m.label} ({m.cache}, {m.readers} {unit}, {m.engine})", ("", "value"), got)
    if m.cache_whatif:
        table(f"prediction: part of the {name} dataset cached, F = 1 / (x/C + (1-x)/S), "
              f"C = {figure(m.warm_samples_per_s or 0)} warm, S = {figure(m.samples_per_s)} cold",
              ("cached fraction x", "samples/s (predicted)", f"GPUs fed (predicted, {kind})", ""),
              [(f"{w.fraction:.0%}", figure(w.samples_per_s), str(w.gpus), w.label) for w in m.cache_whatif])
    if m.concurrency_whatif:
        more = "requests in flight" if m.objects else "readers"
        at = f"(of {m.readers} kept)" if m.objects else f"at {m.readers} readers"
        table(f"prediction: more {more}, Little's law: L = {m.in_flight or 0:.2f} in flight {at}, "
              f"p50 {m.p50_ms:.3f} ms",
              (unit, "L/W (uncapped)", "samples/s (predicted)", "measured", f"GPUs fed (predicted, {kind})"),
              [(str(c.readers), figure(c.uncapped), figure(c.samples_per_s),
                figure(c.measured) if c.measured is not None else "-", str(c.gpus)) for c in m.concurrency_whatif])
        con.print(m.cap_reason)
        if m.in_flight_needed is not None:
            what = "GETs" if m.objects else "reads"
            con.print(f"in flight for the minimum: {figure(p.minimum_samples_per_s)} samples/s x {m.p50_ms:.3f} ms = "
                      f"{m.in_flight_needed:,.0f} {what} at once across the job (Little's law at the p50 measured at "
                      f"{m.readers} {unit}; a floor: latency grows as the storage nears its limit)")
    if m.scaling:
        table("measured: the storage with more client nodes reading at once",
              ("nodes", "ranks", "samples/s together", "per node", "per node vs the fewest", "job fed"),
              [(str(pt.nodes), str(pt.ranks), figure(pt.samples_per_s), figure(pt.per_node),
                f"{pt.per_node_vs_fewest:.0%}", "yes (lower bound)" if pt.fed else "no") for pt in m.scaling])
    for line in [m.scaling_note or "", *(f"note: {note}" for note in m.notes)]:
        if line:
            con.print(line)
    return buf.getvalue()


def rate_kind_of(result: Result) -> str | None:
    """The kind of per-GPU rate a result ran with: `settings.rate_kind`, or for results written before that field,
    what `settings.rate_source` says ("given with --rate", "measured on ...", "published: ...",
    "mlperf-storage-emulated: ..."); None when the result has no rate or the source does not say."""
    s = result.settings
    if s.rate_kind:
        return KIND_ALIASES.get(s.rate_kind, s.rate_kind)
    return kind_of_source(s.rate_source) if s.rate_per_gpu or s.rate_source else None


def from_result(p: CapacityPlan, result: Result, pipeline: str | None = None) -> Measured | None:
    """What `result` says the storage gives, set against `p`'s demand; None when it has no run to tell. The CPU per
    sample is that of input pipeline `pipeline` (default: the result's first)."""
    pool = storage_runs(result)
    warm = [r for r in replay_runs(result) if r.cache == "warm"]
    notes: list[str] = []
    job = job_run(result) if result.distributed is not None else None
    fig = storage_figure(result) if job is None else None
    ref: Run | None
    if job is not None:  # many clients at once: the job's figure, not one client's best
        ref, cache, pool, warm = job, job.cache, [], []
    elif fig is not None:  # the storage figure (fio's or a loader's); the loaders' best for Little's law
        ref = max(pool, key=lambda r: r.samples_per_s) if pool else None
        cache = "cold"
    elif warm:
        ref = max(warm, key=lambda r: r.samples_per_s)
        cache = "warm"
        notes.append("no cold (storage) run in the result: the figures below are the warm rate, from the page "
                     "cache, not the storage")
    else:
        return None
    assert ref is not None or fig is not None
    s = fig.samples_per_s if fig is not None else ref.samples_per_s  # type: ignore[union-attr]
    point = fig.run or fig.raw if fig is not None else ref
    assert point is not None
    readers = point.in_flight if isinstance(point, Run) else point.concurrency  # objects: readers x --in-flight
    engine = point.engine if isinstance(point, Run) else raw_tool(result)
    # C, the cache rate: warm runs that really read from the page cache (a FUSE or NFS client may not keep it)
    c_rate = max((r.samples_per_s for r in warm if r.measures == "page-cache"), default=None)
    if cache == "cold" and warm and c_rate is None:
        notes.append("no warm run read from the page cache (this client does not cache this mount's data): no cache "
                     "rate C was measured, so there is no cache what-if")
    supported = gpus_supported(s, p.rate_per_gpu, p.au_target)
    v = result.verdict
    same = (v is not None and v.client_gpus_fed is not None and v.rate_per_gpu is not None
            and math.isclose(v.rate_per_gpu, p.rate_per_gpu) and math.isclose(v.au_target or 0, p.au_target))
    if same and v is not None and v.client_gpus_fed is not None and v.client_gpus_fed > MAX_GPUS:
        raise Implausible(f"its verdict's {v.client_gpus_fed:,.3g} GPUs fed is more than {MAX_GPUS:,}")
    if abs(result.dataset.mean_bytes - p.mean_bytes) > 0.1 * p.mean_bytes:
        notes.append(f"the measured dataset's mean sample ({result.dataset.mean_bytes / 1000:,.0f} kB) differs from "
                     f"the plan's ({p.mean_bytes / 1000:,.0f} kB) by more than 10%: samples/s may not carry over")
    objects = result.mount.objects
    if result.remote or objects:
        note = server_cache_note(result)
        notes.append(note[0].lower() + note[1:].removesuffix("."))
    if not result.complete:
        notes.insert(0, "the result is of an unfinished run (complete: false): its figures cover only what was "
                        "measured before it stopped")
    d = result.distributed
    if d is None:
        notes.append("measured from one client: whether the storage gives each of several client nodes this rate at "
                     "once was not measured")
    else:
        notes.append(f"measured with {d.nodes} client node{'s' if d.nodes > 1 else ''} reading at once ({d.world_size} "
                     f"ranks, {d.workers} DataLoader workers each): {s / d.nodes:,.0f} samples/s per node; more "
                     "nodes than that were not measured")
        if v is not None and v.asked_fed:
            notes.append("the job's GPUs were fed in that run: its rate is what they asked for, a lower bound of what "
                         "the storage gives")
    startup = None
    if result.metadata:
        per_file = max(m.list_s / m.files for m in result.metadata if m.files)
        startup = per_file * p.dataset_files
    m = Measured(
        label=f"{result.mount.fstype} at {result.mount.path}", samples_per_s=s, cache=cache,
        readers=readers, engine=engine, p50_ms=(point.timed if isinstance(point, Run) else point.latency_ms).p50,
        dataset_mean_bytes=result.dataset.mean_bytes, gpus_supported=supported,
        nodes_supported=supported // p.gpus_per_node, headroom=s / p.minimum_samples_per_s,
        spare_samples_per_s=s - p.minimum_samples_per_s,
        verdict_gpus_fed=v.client_gpus_fed if same and v is not None else None,
        verdict_confirmed=bool(same and v is not None and v.gpus_fed_confirmed),
        warm_samples_per_s=c_rate, startup_list_s=startup, notes=notes,
        nodes_measured=d.nodes if d else None, per_node_samples_per_s=s / d.nodes if d else None, objects=objects)
    s_rate = result.settings.rate_per_gpu or (v.rate_per_gpu if v is not None else None)
    extra: dict = {"kind_warning": mixed_kinds([
        (f"this plan ({who(p)})", p.rate_per_gpu, p.rate_kind),
        (f"the result ({m.label}, {result.settings.gpu or '?'} on {result.settings.model or '?'})", s_rate,
         rate_kind_of(result))])}
    top = ceiling(result, pipeline) if job is None else None  # one client's CPU per sample; a job's is per rank
    if top is not None:
        extra.update(cpu_us_per_sample=top.cpu_us_per_sample, decode_cpu_us_per_sample=top.decode_us,
                     cpu_readers=readers_of(top.run), cpu_pipeline=pipeline or asked(result),
                     cpu_decoded=top.run.decode)
    if cache == "cold" and c_rate:
        extra["cache_whatif"] = _cache_whatif(p, result, s, c_rate)
    if cache == "cold" and job is None and ref is not None:  # Little's law over one client's loaders; a job has none
        extra.update(_concurrency_whatif(p, ref, pool, c_rate, _highest_seen(result)))
        # the requests a job keeps in flight to get the plan's minimum, by Little's law at the latency of the point
        # the storage figure comes from (m.p50_ms, the one the sentence names; a floor: a request's latency grows
        # as the storage nears its limit)
        extra["in_flight_needed"] = p.minimum_samples_per_s * m.p50_ms / 1000.0 if m.p50_ms else None
    return replace(m, **extra)


def _cache_whatif(p: CapacityPlan, result: Result, storage: float, cached: float) -> list[CacheWhatIf]:
    def row(x: float, label: str = "") -> CacheWhatIf:
        f = cache_mix_rate(x, cached, storage)
        return CacheWhatIf(x, f, gpus_supported(f, p.rate_per_gpu, p.au_target), label)

    rows = [row(x) for x in CACHE_FRACTIONS]
    ram = result.host.ram_bytes
    if ram and p.dataset_bytes:
        rows.append(row(min(1.0, ram / p.dataset_bytes),
                        f"this client's RAM ({figure(ram / 1e9)} GB) over {planned(p, result)}"))
        rows.sort(key=lambda r: (r.fraction, r.label))
    return rows


def _highest_seen(result: Result) -> tuple[float, str] | None:
    """The highest rate of any complete run or fio job in the result, and what it was."""
    seen = [(r.samples_per_s, f"{r.cache} {r.mitigation or r.source}, "
                              + (f"{r.in_flight} in flight" if r.source == "objects" else f"{r.concurrency} readers"))
            for r in result.runs if r.complete and r.gpus is None]
    tool = raw_tool(result)
    seen += [(b.samples_per_s, f"{tool} {b.cache}, {raw_depth(tool, b.concurrency)}")
             for b in (result.baseline.points if result.baseline else [])]
    return max(seen) if seen else None


def _concurrency_whatif(p: CapacityPlan, ref: Run, pool: list[Run], warm: float | None,
                        seen: tuple[float, str] | None = None) -> dict:
    """Little's law from the reference (best cold) run, capped by what was seen (docs/plan.md)."""
    # the readers; for objects x --in-flight
    means = mean_by_concurrency((r.in_flight, r.samples_per_s) for r in pool if r.order == ref.order)
    concs = list(means)
    rising = len(concs) < 2 or (ref.in_flight == concs[-1] and still_rising(means))
    if not rising:
        unit = "requests in flight" if ref.source == "objects" else "readers"
        cap, reason = ref.samples_per_s, (f"capped at the best cold rate: the sweep ({', '.join(map(str, concs))} "
                                          f"{unit}) stopped rising, so more {unit} bought nothing there")
    elif warm:
        cap, reason = warm, "capped at the best warm rate: what this client's readers reached from RAM"
    elif seen:
        cap, reason = seen[0], (f"capped at the highest rate this client reached in any run of the result "
                                f"({seen[1]}): no run read from RAM to show the client's own ceiling")
    else:
        cap, reason = None, "not capped: no run measured this client's own ceiling"
    w = ref.timed.p50 / 1000.0
    in_flight = ref.samples_per_s * w if w > 0 else None
    rows = []
    for k in CONCURRENCY_STEPS:
        c = ref.in_flight * k
        if in_flight is None:
            break
        uncapped = littles_law(in_flight * c / ref.in_flight, w)
        pred = min(uncapped, cap) if cap is not None else uncapped
        rows.append(ConcurrencyWhatIf(c, pred, uncapped, means.get(c), gpus_supported(pred, p.rate_per_gpu,
                                                                                      p.au_target)))
    return {"concurrency_whatif": rows, "in_flight": in_flight, "cap": cap, "cap_reason": reason}


def _ran(result: Result, model: str) -> bool:
    """Whether `result` measured a consumer of `model` (names as the rate table's)."""
    ran = result.settings.model
    return ran is not None and (canonical_model(ran) or ran) == (canonical_model(model) or model)


def plan(gpu: str, gpus: int, model: str, dataset_files: int = IMAGENET_FILES, mean_kb: float | None = None,
         au_target: float = 0.9, rate: float | None = None, result: Result | None = None,
         gpus_per_node: int = 8, kind: str | None = None, series: list[Result] | None = None,
         pipeline: str | None = None) -> CapacityPlan:
    """The capacity arithmetic for `gpus` x `gpu` training `model` (docs/plan.md says each figure). rate: samples/s
    one GPU consumes, kind "given" (else the table's row of `kind`: `rates.rate_for`, a UserError where it has none);
    mean_kb in kB (1,000 B); result: adds what it says the storage gives and the what-ifs; series: distributed
    results at several node counts (`result` among them); pipeline: the input pipeline whose CPU per sample plans
    the cores (default the result's first; a ValueError where the result has no training run through it)."""
    for ok, why in ((gpus >= 1, "gpus must be >= 1"), (gpus_per_node >= 1, "gpus_per_node must be >= 1"),
                    (dataset_files >= 1, "dataset_files must be >= 1"),
                    (0 < au_target <= 1, "au_target must be within (0, 1]")):
        if not ok:
            raise ValueError(why)
    within(gpus, MAX_GPUS, "GPUs", "more than any cluster holds")
    within(dataset_files, MAX_FILES, "dataset files", "no training set holds that many")
    per_gpu, source, rate_kind = rate_for(model, gpu, rate, kind)
    within(per_gpu, MAX_RATE, "samples/s per GPU", "no GPU consumes that many")
    known = sample_size(model)
    if mean_kb is not None:
        if not mean_kb > 0:
            raise ValueError("mean_kb must be > 0")
        within(mean_kb, MAX_MEAN_KB, "kB mean", "a sample of over a terabyte")
        mean, mean_source = mean_kb * 1000.0, "given"
    elif result is not None and (known is None or _ran(result, model)):
        # the measured dataset stands for the model's: it ran this model, or one of ImageNet-sized images
        mean, mean_source = result.dataset.mean_bytes, f"the measured dataset's mean ({result.dataset.files:,} files)"
    elif known is not None:
        mean, mean_source = float(known.bytes), known.source
    else:
        mean, mean_source = float(IMAGENET_MEAN), "ImageNet-1k's mean (iobench.dataset.sizes.IMAGENET_MEAN)"
    demand = need(gpus, per_gpu, 1.0)  # the verdict's rule at AU 1.0: every GPU busy all the time
    minimum = need(gpus, per_gpu, au_target)
    p = CapacityPlan(
        gpu=gpu, gpus=gpus, model=model, rate_per_gpu=per_gpu, rate_source=source, rate_kind=rate_kind,
        au_target=au_target,
        gpus_per_node=gpus_per_node, dataset_files=dataset_files, mean_bytes=mean, mean_source=mean_source,
        demand_samples_per_s=demand, minimum_samples_per_s=minimum,
        demand_mb_per_s=demand * mean / 1e6, minimum_mb_per_s=minimum * mean / 1e6,
        demand_opens_per_s=demand, minimum_opens_per_s=minimum, startup_entries=dataset_files,
        cpu_cores_demand=cpu_cores_for_decode(demand), cpu_cores_minimum=cpu_cores_for_decode(minimum),
        epoch_s_demand=dataset_files / demand, epoch_s_minimum=dataset_files / minimum,
        dataset_bytes=dataset_files * mean, kind_note=kinds_apart(model, gpu, rate_kind))
    try:
        printable(p)
    except Implausible as exc:
        raise Implausible(f"{exc}: the inputs are not a plausible plan together") from None
    if result is None:
        return p
    try:
        measured = from_result(p, result, _pipeline_of(result, pipeline))
        if measured is not None and result.distributed is not None:
            points = scaling(series or [result])
            measured = replace(measured, scaling=points if len(points) > 1 else [],
                               scaling_note=scaling_sentence(points))
        cpu = _measured_cpu(p, measured) if measured is not None and measured.cpu_us_per_sample else {}
        with_result = replace(p, measured=measured, **cpu)
        printable(with_result)
    except Implausible as exc:  # the result's figures: read back in range, yet no storage gives them
        raise Implausible(f"{exc}, from the result of {result.mount.fstype} at {result.mount.path}: not plausible "
                          "for a measurement (an edited or damaged result?)") from None
    return with_result


def _pipeline_of(result: Result, pipeline: str | None) -> str | None:
    """The pipeline asked for, checked against those the result's training runs went through."""
    if pipeline is None:
        return None
    name = pipelines.parse(pipeline).text
    ran = sorted({r.pipeline or pipelines.RAW for r in result.runs if r.kind == "training"})
    if name not in ran:
        raise ValueError(f"--pipeline {name}: the result has no training run through it (it has "
                         f"{', '.join(ran) or 'none'})")
    return name


def _measured_cpu(p: CapacityPlan, m: Measured) -> dict:
    """The plan's CPU cores at the CPU per sample measured on the result's client: reading and decoding as measured
    where it decoded; else reading as measured, decode + augment at the per-core figure."""
    us = m.cpu_us_per_sample or 0.0
    decoded = m.cpu_decoded or m.decode_cpu_us_per_sample is not None
    on = f" with the {pipelines.parse(m.cpu_pipeline).label()}" if m.cpu_pipeline not in (None, pipelines.RAW) else ""

    def cores(samples_per_s: float) -> float:
        return samples_per_s * us / 1e6 + (0.0 if decoded else cpu_cores_for_decode(samples_per_s))

    how = (f"read + decode + augment at {us:,.1f} us of CPU per sample, measured on this client{on} at "
           f"{m.cpu_readers}" if decoded else
           f"read at {us:,.1f} us of CPU per sample, measured on this client{on} at {m.cpu_readers} (it did not "
           "decode), "
           f"+ decode + augment at {CPU_PREPROCESS_PER_CORE:g} samples/s per core")
    return {"cpu_cores_demand": cores(p.demand_samples_per_s), "cpu_cores_minimum": cores(p.minimum_samples_per_s),
            "cpu_from": how}
