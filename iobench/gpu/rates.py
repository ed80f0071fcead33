"""Per-GPU training consumption rates: model x GPU -> samples/s, each row with its source and its kind (`KINDS`):
"measured" (read from the shipped H200 measurement, `H200_FILE`: iobench's makers', a compute ceiling, never the
user's system), "published" (NVIDIA DeepLearningExamples' 1-GPU figures) and "mlperf-storage" (the sleep per step
with which MLPerf Storage's DLIO stands for an accelerator, read at `MLPERF_COMMIT`: not a measurement of a GPU).
The kinds differ by up to 2.7x for the same GPU, so the kind always goes with the rate (`PerGpuRate.kind`). A row's
source is a note shared by the rows of one source and its own detail: `iobench gpus` prints each note once.
Names match case-insensitively, ignoring "-", "_", "/", "." and spaces and a leading "nvidia", and through
`MODEL_ALIASES` and `GPU_ALIASES`. No row stands for an MI300X: no primary source found gives one a figure."""

from __future__ import annotations

import json
import re
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, computed_field

from iobench.errors import UserError

KINDS = ("measured", "published", "mlperf-storage")  # `iobench gpus`'s order; told no kind, a pair takes its first
GIVEN = "given"  # the kind of a rate given with --rate (or `rate` in a workload file): not from the table
KIND_ALIASES = {"mlperf-storage-emulated": "mlperf-storage"}  # old names, still read (workload files, old results)

H200_FILE_SHOWN = "iobench/data/gpu_rates_h200.json in the installed package"  # as sources name H200_FILE
# the shipped H200 measurement: training images/s of ten torchvision models, the date, torch version and conditions,
# and the CPU decode + augment rate per core
H200_FILE = Path(str(files("iobench") / "data" / "gpu_rates_h200.json"))
# mlcommons/storage 1833c96ef11c0e1498568efa04a2f4106ce31c97 (PR #544, 2026-06-26; MLPerf Storage v3.0, package
# 3.0.23, DLIO pinned to mlcommons/DLIO_local_changes 17d982a; there is no v3.0 tag)
MLPERF_COMMIT = "1833c96"
MLPERF_V2 = "7e71ca1"  # its v2.0 tag: 7e71ca162d8f9e7ae4b5b698d7d79b0883817f25


def normalise_kind(kind: str) -> str:
    """A kind's current name ("mlperf-storage-emulated" -> "mlperf-storage"); UserError for an unknown one."""
    name = KIND_ALIASES.get(kind, kind)
    if name not in KINDS:
        raise UserError(f"unknown kind of rate {kind!r} (known: {', '.join(KINDS)})")
    return name


@cache
def h200_measurement() -> dict:
    """The shipped H200 measurement (`H200_FILE`), parsed."""
    try:
        return json.loads(H200_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"iobench is installed without its H200 measurement {H200_FILE}: {exc}") from None


CPU_PREPROCESS_PER_CORE: float = float(h200_measurement()["cpu_preprocess_img_per_s_per_core"]["value"])
"""Images/s one CPU core decodes and augments: Pillow decode of a ~86 KB 500x375 JPEG + RandomResizedCrop(224)
+ flip + PILToTensor, one thread, measured on the 16-core H200 host (335.2 on 2026-11-29); read from `H200_FILE`,
`cpu_preprocess_img_per_s_per_core`."""


class GpuRate(BaseModel):
    """One row of the table: how many training samples per second one GPU of a kind consumes on a model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="model, torchvision's name: resnet50, vit_b_16, ...")
    gpu: str = Field(description="GPU kind, lower case: v100, v100-32gb, a100, h100, h200, b200, mi355")
    samples_per_s: float = Field(gt=0, description="training samples (images) per second, one GPU")
    batch: int = Field(gt=0, description="per-GPU batch size the figure was taken at")
    precision: str = Field(description="numeric precision / emulation the figure was taken with")
    kind: str = Field(description='"measured", "published" or "mlperf-storage" (see KINDS)')
    # the source in two parts: `iobench gpus` prints each note once; left out of the JSON, which has `source`
    note: str = Field(exclude=True, description="where the figure comes from and how it is read, shared by the "
                                                "rows of one source")
    detail: str = Field(exclude=True, description="what this row reads there")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def source(self) -> str:
        """Where the figure comes from, precisely enough to check it: the note and this row's detail."""
        return f"{self.note}: {self.detail}"


class PerGpuRate(NamedTuple):
    """The per-GPU rate a run or plan uses: samples/s, where it comes from, and its kind (KINDS or "given")."""

    samples_per_s: float
    source: str
    kind: str


def _h200_rows() -> list[GpuRate]:
    """The measured rows, read from the shipped H200 measurement (not transcribed)."""
    data = h200_measurement()
    gpu_name = data["gpu"]  # "NVIDIA H200"
    gpu = _key(gpu_name)
    what = data["what"]
    conditions = what.partition(f"on one {gpu_name}, ")[2] or what
    # whose measurement it is first: it must never read as one taken on the user's own system
    note = (f"measured by iobench's makers, not on your system: one {gpu_name} training each model, "
            f"{data['measured']}, torch {data['torch']}, torchvision {data['torchvision']}, {conditions} "
            f"({H200_FILE_SHOWN})")
    return [GpuRate(model=model, gpu=gpu, samples_per_s=float(fig["img_per_s"]), batch=int(fig["batch"]),
                    precision="bf16 autocast, channels_last", kind="measured", note=note,
                    detail=f"train.{model}, batch {fig['batch']}, {fig['size']} px")
            for model, fig in data["train"].items()]


_DLE_NOTE = ("NVIDIA/DeepLearningExamples PyTorch/Classification/ConvNets/resnet50v1.5/README.md, pytorch-21.03 NGC "
             "container, mixed precision, batch 256 per GPU (PyTorch/Classification/ConvNets/configs.yml, "
             "models.resnet50.PLATFORM.AMP.batch_size), the 1-GPU figure of a table")


def _dle(table: str, one: float, eight: float, platform: str) -> str:
    return (f"'Training performance: {table}', 1 GPU: {one:,.0f} img/s (8 GPUs: {eight / 8:,.1f} each); PLATFORM "
            f"{platform}")


_MLPERF_NOTE = (f"mlcommons/storage at commit {MLPERF_COMMIT} (MLPerf Storage v3.0): reader.batch_size samples per "
                "train.computation_time seconds, the sleep per batch with which DLIO stands for one accelerator, "
                "passing a run at AU >= metric.au; not a measurement of a GPU")


def _mlperf(model: str, gpu: str, batch: int, step_s: float, au: float, remark: str = "", note: str = "") -> GpuRate:
    path = f"configs/dlio/workload/{model}_{gpu}.yaml"
    return GpuRate(model=model, gpu=gpu, samples_per_s=batch / step_s, batch=batch,
                   precision="emulated (a sleep per batch)", kind="mlperf-storage", note=_MLPERF_NOTE,
                   detail=f"{path}{note}: batch {batch} per {step_s} s, AU >= {au:.2f}{remark}")


_WHATIF = f"; v3.0: whatif mode only (as in v2.0, {MLPERF_V2})"
_RETINANET_V3 = "; v3.0's dataset: 1,170,301 JPEGs of 322,957 B"


def _rows() -> tuple[GpuRate, ...]:
    rows = _h200_rows()
    amp = "mixed precision (AMP)"
    rows += [
        GpuRate(model="resnet50", gpu=gpu, samples_per_s=float(one), batch=256, precision=amp, kind="published",
                note=_DLE_NOTE, detail=_dle(table, one, eight, platform))
        for gpu, table, one, eight, platform in (
            ("v100", "NVIDIA DGX-1 16GB (8x V100 16GB)", 1200, 8322, "DGX1V"),
            ("v100-32gb", "NVIDIA DGX-1 32GB (8x V100 32GB)", 1156, 8056, "DGX1V"),
            ("a100", "NVIDIA DGX A100 (8x A100 80GB)", 2470, 16621, "DGXA100"))]
    rows += [
        _mlperf("resnet50", "a100", 400, 0.435, 0.90, _WHATIF),
        _mlperf("resnet50", "h100", 400, 0.224, 0.90, _WHATIF),
        # v3.0's closed accelerators for retinanet (mlpstorage_py/config.py: ACCELERATORS_CLOSED = [B200, MI355])
        _mlperf("retinanet", "b200", 24, 0.04755, 0.85, _RETINANET_V3),
        _mlperf("retinanet", "mi355", 36, 0.071325, 0.85, _RETINANET_V3, note=" (AMD Instinct MI355X)"),
        _mlperf("unet3d", "a100", 7, 0.636, 0.90),
        _mlperf("unet3d", "h100", 7, 0.323, 0.90),
        _mlperf("unet3d", "b200", 7, 0.162, 0.90, "; the file says 'B200 computation_time = H100 (0.323 s) ÷ 2': "
                                                  "MLCommons' estimate, not a B200 timing"),
        _mlperf("cosmoflow", "a100", 1, 0.00551, 0.70, _WHATIF),
        _mlperf("cosmoflow", "h100", 1, 0.00350, 0.70, _WHATIF),
    ]
    return tuple(rows)


NOT_IN_V3 = {
    ("retinanet", gpu): (f"MLPerf Storage v3.0 has no retinanet config for {gpu}: retinanet_{gpu}.yaml was deleted "
                         "before v3.0 (mlcommons/storage e5bfa17, 2026-03-09) and emulated another dataset (1,743,042 "
                         "JPEGs of 153,600 B +- 51,200 B); v3.0's retinanet runs on b200 and mi355")
    for gpu in ("a100", "h100")}
"""Model/GPU pairs MLPerf Storage had before v3.0 and not in it: no row, and `lookup` says why."""


class SampleSize(NamedTuple):
    """The size of one sample of a model's dataset, and where the figure comes from."""

    bytes: int
    source: str


def _mlperf_sample(model: str, size: int, stdev: int | None) -> SampleSize:
    spread = f", stdev {stdev:,} B" if stdev else ", every sample that size"
    return SampleSize(size, f"{model}'s sample in MLPerf Storage v3.0: record_length_bytes of mlcommons/storage "
                            f"configs/dlio/workload/{model}_*.yaml at {MLPERF_COMMIT}, {size:,} B{spread}")


SAMPLE_BYTES: dict[str, SampleSize] = {
    "unet3d": _mlperf_sample("unet3d", 146_600_628, 68_341_808),  # KiTS19 volumes, ~140 MiB each
    "cosmoflow": _mlperf_sample("cosmoflow", 2_828_486, 71_311),
    "retinanet": _mlperf_sample("retinanet", 322_957, None),  # workloads/mlperf-storage-retinanet.toml: the same
}
"""Sample size per model where the model's dataset is not ImageNet's; the other models of the table train on
ImageNet-sized images (iobench.dataset.sizes.IMAGENET_MEAN), so they are not listed."""


MODEL_ALIASES = {
    "rn50": "resnet50", "resnet50v15": "resnet50", "resnet50v1": "resnet50",
    "rn18": "resnet18", "rn101": "resnet101", "resnet101v15": "resnet101",
    "vitb16": "vit_b_16", "vitbase16": "vit_b_16",
    "inceptionv3": "inception_v3", "efficientnetb0": "efficientnet_b0",
    "mobilenetv3large": "mobilenet_v3_large", "convnexttiny": "convnext_tiny",
    "3dunet": "unet3d",
}
GPU_ALIASES = {
    "v10016gb": "v100", "v100sxm2": "v100", "v100sxm216gb": "v100", "v100sxm232gb": "v100-32gb",
    "a10080gb": "a100", "a100sxm": "a100", "a100sxm4": "a100", "a100sxm480gb": "a100",
    "h100sxm": "h100", "h100sxm5": "h100", "h10080gb": "h100", "h100sxm580gb": "h100",
    "h200sxm": "h200", "h200141gb": "h200",
    "b200sxm": "b200", "b200180gb": "b200", "hgxb200": "b200", "dgxb200": "b200",
    "mi355x": "mi355", "amdmi355x": "mi355", "instinctmi355x": "mi355", "amdinstinctmi355x": "mi355",
    "amdmi355": "mi355",
}


def _key(name: str) -> str:
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return key[len("nvidia"):] if key.startswith("nvidia") else key


def _canonical(name: str, known: set[str], aliases: dict[str, str]) -> str | None:
    by_key = {_key(k): k for k in known}
    key = _key(name)
    return by_key.get(key) or aliases.get(key)


_TABLE = _rows()


def canonical_model(name: str) -> str | None:
    """The table's name for a model ("ResNet-50" -> "resnet50"), or None when the table has no such model."""
    return _canonical(name, {r.model for r in _TABLE}, MODEL_ALIASES)


def canonical_gpu(name: str) -> str | None:
    """The table's name for a GPU ("NVIDIA H100-SXM" -> "h100"), or None when the table has no such GPU."""
    return _canonical(name, {r.gpu for r in _TABLE}, GPU_ALIASES)


def sample_size(model: str) -> SampleSize | None:
    """The sample size of `model`'s dataset from `SAMPLE_BYTES` (names as the table's), or None for a model that
    trains on ImageNet-sized images or that the table does not know."""
    m = canonical_model(model)
    return SAMPLE_BYTES.get(m) if m else None


def rates(kind: str | None = None) -> list[GpuRate]:
    """Rows of the table (of `kind` only, when given): measured H200 rows first, then published, then MLPerf
    Storage's emulated ones."""
    want = normalise_kind(kind) if kind is not None else None
    return [r for r in _TABLE if want is None or r.kind == want]


def known_pairs(kind: str | None = None) -> str:
    """'resnet50 on a100, h100, h200, v100, v100-32gb; resnet18, resnet101, ... on h200; ...' for error messages:
    the model/GPU pairs of the table, or of one kind."""
    by_model: dict[str, set[str]] = {}
    for r in rates(kind):
        by_model.setdefault(r.model, set()).add(r.gpu)
    groups: dict[tuple[str, ...], list[str]] = {}
    for model, gpu_set in by_model.items():
        groups.setdefault(tuple(sorted(gpu_set)), []).append(model)
    return "; ".join(f"{', '.join(models)} on {', '.join(g)}" for g, models in groups.items()) or "none"


def kinds_of(model: str, gpu: str) -> list[str]:
    """The kinds of rows the table has for `model` on `gpu`, in KINDS order (empty when none); the first is the
    one `lookup` takes when told no kind."""
    m, g = canonical_model(model), canonical_gpu(gpu)
    have = {r.kind for r in _TABLE if r.model == m and r.gpu == g}
    return [k for k in KINDS if k in have]


def first_kinds(model: str) -> dict[str, str]:
    """{GPU: the kind `lookup` takes for `model` on it when told no kind}, for every GPU the table has `model` on
    ({} for a model it does not know)."""
    m = canonical_model(model)
    return {gpu: lookup(model, gpu).kind for gpu in dict.fromkeys(r.gpu for r in _TABLE if r.model == m)}


def lookup(model: str, gpu: str, kind: str | None = None) -> GpuRate:
    """The row of `kind` for `model` on `gpu` (names as in the module docstring); told no kind, the pair's first
    kind in KINDS order (measured, published, mlperf-storage). A kind asked for never falls back to another:
    UserError (one line) when the pair has no row of that kind, naming the kinds it has and the known rows of the
    asked kind, or when it has no row at all (saying why, for a pair MLPerf Storage dropped before v3.0)."""
    if kind is not None and KIND_ALIASES.get(kind, kind) not in KINDS:
        raise UserError(f"unknown kind of rate {kind!r} for {model} on {gpu} (known: {', '.join(KINDS)})")
    m, g = canonical_model(model), canonical_gpu(gpu)
    rows = [r for r in _TABLE if r.model == m and r.gpu == g]
    if not rows:
        gone = NOT_IN_V3.get((m or "", g or ""))
        why = f"{gone}; " if gone else ""
        raise UserError(f"no consumption rate for {model} on {gpu} (of any kind): {why}give one with --rate "
                        f"SAMPLES_PER_S, or use a known pair: {known_pairs()}")
    if kind is None:
        return min(rows, key=lambda r: KINDS.index(r.kind))
    want = normalise_kind(kind)
    found = [r for r in rows if r.kind == want]
    if not found:
        have = kinds_of(model, gpu)
        raise UserError(f"no {want} rate for {model} on {gpu} ({m} on {g} has: {', '.join(have)}); use --rate-kind "
                        f"{'|'.join(have)} or --rate N; {want} rows: {known_pairs(want)}")
    return found[0]


def rate_for(model: str, gpu: str, rate: float | None = None, kind: str | None = None) -> PerGpuRate:
    """The per-GPU rate to use: `rate` when given (kind "given"), else the table's row of `kind` (without one, the
    pair's first kind; see `lookup`). A given rate has no kind, so `rate` with `kind` is a UserError."""
    if rate is not None:
        check_rate_and_kind(rate, kind)
        if not rate > 0:
            raise UserError(f"--rate must be > 0 samples/s, got {rate}")
        return PerGpuRate(float(rate), "given with --rate", GIVEN)
    row = lookup(model, gpu, kind)
    source = row.source if row.source.startswith(row.kind) else f"{row.kind}: {row.source}"
    return PerGpuRate(row.samples_per_s, source, row.kind)


def check_rate_and_kind(rate: float | None, kind: str | None) -> None:
    """UserError when both a rate (--rate) and a kind (--rate-kind) are given: a given rate has no kind."""
    if rate is not None and kind is not None:
        raise UserError(f"--rate and --rate-kind do not go together: a given rate ({rate:g} samples/s) has no kind; "
                        f"drop --rate-kind {kind}, or drop --rate to take the table's {kind} row")


def kind_of_source(source: str | None) -> str | None:
    """The kind of a rate from its source text (for results written before `Settings.rate_kind`): "given",
    a kind of KINDS, or None when the text does not say."""
    if not source:
        return None
    if source.startswith("given"):
        return GIVEN
    for name in sorted([*KINDS, *KIND_ALIASES], key=len, reverse=True):
        if source.startswith(name):
            return KIND_ALIASES.get(name, name)
    return None


def cpu_cores_for_decode(samples_per_s: float) -> float:
    """CPU cores that Pillow decode + RandomResizedCrop + flip need to keep up with `samples_per_s` (one H200 on
    ResNet-50, 4,677.3 img/s, takes 4677.3 / 335.2 = ~14 cores)."""
    return max(samples_per_s, 0.0) / CPU_PREPROCESS_PER_CORE
