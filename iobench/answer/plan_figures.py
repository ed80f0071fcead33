"""The plan's arithmetic and its figures: GPUs a rate keeps fed, the cache mix and Little's law (the formulas
plan.py's docstring states), the bounds past which a figure is not plausible, and the plan's dataclasses."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass
from typing import TYPE_CHECKING

from iobench.answer.rules import gpus_for
from iobench.answer.scaling import ScalePoint

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
    cpu_us_per_sample: float | None = None  # the measuring client's CPU per sample (`client_figures.ceiling`)
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
    text = f"{x:,.1f}"
    return text[:-2] if text.endswith(".0") else text
