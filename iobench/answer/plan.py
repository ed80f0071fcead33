"""Capacity arithmetic: what N GPUs training a model ask of the storage, and what a measured result says it gives.
Here: `plan`, from its inputs to its figures; the arithmetic and the plan's dataclasses are in plan_figures.py,
what a measured result says against it in plan_measured.py, the plan in words in plan_words.py (this module names
what callers use of them).

Pure functions over numbers (and, optionally, a `Result`); no IO. The conventions, stated once:

- *demand* = GPUs x per-GPU rate: the samples/s that keep every GPU busy all the time (AU 1.0).
- *minimum* = AU target x demand. With a prefetching input pipeline, IO overlaps compute, so a GPU that receives a
  fraction f of the samples it could consume computes f of the time: AU = min(1, supply / demand). AU >= target
  therefore needs supply >= target x demand. This is how iobench's verdict counts GPUs fed
  (`rate // (target x per-GPU rate)`) and how MLPerf Storage passes a run. It is an ideal-overlap bound:
  jitter and stalls need more, so plan for *demand* to leave no idle time, and treat *minimum* as the floor.
- MB/s = samples/s x mean sample size (1 MB = 10^6 B; `mean_kb` in kB = 1,000 B). Default mean: a result's
  measured dataset mean where the result ran this model, or the model trains on ImageNet-sized images; else the
  model's sample where its dataset is not ImageNet's (`gpus.SAMPLE_BYTES`: MLPerf Storage v3.0's unet3d
  146,600,628 B, cosmoflow 2,828,486 B, retinanet 322,957 B); else ImageNet-1k's 110,000 B
  (iobench.dataset.sizes.IMAGENET_MEAN). The plan says which (`mean_source`).
- File opens/s = samples/s: the files source opens one file per sample (LMDB or tar shards open far fewer).
- Start-up metadata: torchvision's ImageFolder lists every class folder with scandir before the first batch:
  one directory entry per file (`dataset_files` entries). With a result's metadata phase, the listing time is
  predicted by scaling its measured list time linearly.
- CPU cores for decode: `gpus.cpu_cores_for_decode` (Pillow decode + RandomResizedCrop + flip, measured per core).
  With a result, the CPU per sample measured on its client instead (`client_figures.ceiling`: reading, and
  decoding where it ran with --decode; where it did not, reading as measured and decode at the per-core figure).
- Per-GPU rate: the row of the kind asked for, else the first kind the GPU and model have (`gpus.KINDS` order:
  measured, published, mlperf-storage), its kind printed beside it; a GPU with no row of the asked kind is an
  error. Where other GPUs of the model take another kind without --rate-kind (resnet50: measured on an h200,
  published on an a100, mlperf-storage on an h100), the plan says so in one line (`kind_note`): their plans do
  not compare with this one. A rate given with --rate has the kind "given" and is described as "a GPU consuming
  N samples/s", not as a GPU model. A result measured with a rate of another kind is compared with a warning
  (`mixed_kinds`): its verdict and training runs counted GPUs at its own rate.
- The plan's dataset (`dataset_files`, default ImageNet-1k's 1,281,167 files) is the one planned for, not the
  (usually much smaller) dataset a result measured; labels say which.

What-ifs (each a prediction, never a measurement):

- *cache*: a fraction x of the dataset served from a cache at rate C (the best warm rate read from the page
  cache) and the rest from storage at rate S (the cold rate): F = 1 / (x/C + (1-x)/S), the harmonic mix DS-Analyzer uses
  (Mohan et al., "Analyzing and Mitigating Data Stalls in DNN Training", VLDB 2021).
- *concurrency*: Little's law, L = X x W. At the reference run's c0 readers, X0 samples/s at the median
  per-sample latency W (p50) means L = X0 x W requests were at the storage at once. With c readers and W
  unchanged, L x c / c0 are in flight, so X(c) = (L x c / c0) / W = X0 x c / c0. Latency does not stay flat
  under load for ever, so the prediction is capped by what was seen: at the best cold rate when the measured
  sweep had already stopped rising (more readers then bought nothing); else at the best warm rate from the page
  cache (what this client's readers reached from RAM: the client's own ceiling); else, where no run read from
  RAM, at the highest rate of any run or fio job in the result.
"""

from __future__ import annotations

from iobench import pipelines
from iobench.answer.plan_figures import (
    IMAGENET_FILES,
    MAX_FILES,
    MAX_GPUS,
    MAX_MEAN_KB,
    MAX_RATE,
    CacheWhatIf,
    CapacityPlan,
    ConcurrencyWhatIf,
    Implausible,
    Measured,
    cache_mix_rate,
    gpus_supported,
    littles_law,
    printable,
    within,
)
from iobench.answer.plan_measured import from_result, rate_kind_of
from iobench.answer.plan_words import format_plan, kinds_apart, mixed_kinds
from iobench.answer.rules import demand as need
from iobench.answer.scaling import scaling, scaling_sentence
from iobench.dataset.sizes import IMAGENET_MEAN
from iobench.gpu.rates import CPU_PREPROCESS_PER_CORE, canonical_model, cpu_cores_for_decode, rate_for, sample_size
from iobench.result import Result

__all__ = ["IMAGENET_FILES", "CacheWhatIf", "CapacityPlan", "ConcurrencyWhatIf", "Implausible", "Measured",
           "cache_mix_rate", "format_plan", "gpus_supported", "littles_law", "mixed_kinds", "plan", "rate_kind_of"]


def _ran(result: Result, model: str) -> bool:
    """Whether `result` measured a consumer of `model` (names as the rate table's)."""
    ran = result.settings.model
    return ran is not None and (canonical_model(ran) or ran) == (canonical_model(model) or model)


def plan(gpu: str, gpus: int, model: str, dataset_files: int = IMAGENET_FILES, mean_kb: float | None = None,
         au_target: float = 0.9, rate: float | None = None, result: Result | None = None,
         gpus_per_node: int = 8, kind: str | None = None, series: list[Result] | None = None,
         pipeline: str | None = None) -> CapacityPlan:
    """The capacity arithmetic for `gpus` x `gpu` training `model` (see the module docstring for each figure).

    rate: samples/s one GPU consumes, kind "given" (default: the table's row of `kind`, see `gpus.rate_for`).
    kind: the kind of table rate, "measured", "published" or "mlperf-storage" (default: the first the GPU and
    model have, in that order); not with `rate` (UserError). A model and GPU without a row of that kind is a
    UserError naming the kinds they have.
    mean_kb: mean sample size in kB (1,000 B); default the result's dataset mean where it ran this model or the
    model trains on ImageNet-sized images, else the model's sample (`gpus.SAMPLE_BYTES`), else ImageNet's 110 kB.
    result: a measured `iobench run`: adds how many GPUs / nodes it supports, the headroom and the what-ifs. A
    distributed result gives the rate its nodes read at once, per node (iobench.answer.scaling).
    series: distributed results at several node counts (`result` among them): how the storage scaled.
    pipeline: the input pipeline whose measured CPU per sample the client's cores are planned at (default the
    result's first; one the result has no training run of is a ValueError naming those it has).
    """
    if gpus < 1:
        raise ValueError("gpus must be >= 1")
    if gpus_per_node < 1:
        raise ValueError("gpus_per_node must be >= 1")
    if dataset_files < 1:
        raise ValueError("dataset_files must be >= 1")
    if not 0 < au_target <= 1:
        raise ValueError("au_target must be within (0, 1]")
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
            measured = Measured(**{**measured.__dict__, "scaling": points if len(points) > 1 else [],
                                   "scaling_note": scaling_sentence(points)})
        cpu = _measured_cpu(p, measured) if measured is not None and measured.cpu_us_per_sample else {}
        with_result = CapacityPlan(**{**p.__dict__, "measured": measured, **cpu})
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
