"""Per-GPU training consumption rates: model x GPU -> samples/s, each row with its source.

The GPU consumer of a replay computes for `batch / rate` seconds per batch; this table says what `rate` is.
Every row names where its figure comes from and what kind of figure it is:

- "measured": trained here, on a real GPU (one NVIDIA H200, `shared/anchors/gpu_rates_h200.json`): eager
  PyTorch, bf16 autocast, channels_last, synthetic data already on the GPU. A compute ceiling: no loading.
- "published": NVIDIA's DeepLearningExamples READMEs (PyTorch ResNet50 v1.5, mixed precision), the 1-GPU
  figure (the 8-GPU figure / 8 is given in the source text beside it).
- "mlperf-storage-emulated": the sleep per step that MLPerf Storage (DLIO) uses to stand for an accelerator,
  batch / computation_time from mlcommons/storage `configs/dlio/workload/*.yaml`. Use it to compare with
  published MLPerf Storage results; it is not a measurement of a GPU.

Names are matched case-insensitively, ignoring "-", "_", "/", "." and spaces, and a leading "nvidia"; a few
aliases are known (`MODEL_ALIASES`, `GPU_ALIASES`): "ResNet-50", "rn50" and "resnet50v1.5" are `resnet50`,
"ViT-B/16" is `vit_b_16`, "H100-SXM" is `h100`, "A100-80GB" is `a100`, "V100-16GB" is `v100`.
When a model and GPU have rows of several kinds, `lookup` takes the first of `KINDS` unless told a kind.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from iobench.errors import UserError

KINDS = ("measured", "published", "mlperf-storage-emulated")
"""Kinds of rows, in the order `lookup` prefers them when a model and GPU have several."""

CPU_PREPROCESS_PER_CORE = 335.2
"""Images/s one CPU core decodes and augments: Pillow decode of a ~86 KB 500x375 JPEG + RandomResizedCrop(224)
+ flip + PILToTensor, one thread, measured on the 16-core H200 host on 2026-11-29
(shared/anchors/gpu_rates_h200.json, `cpu_preprocess_img_per_s_per_core`)."""


class GpuRate(BaseModel):
    """One row of the table: how many training samples per second one GPU of a kind consumes on a model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="model, torchvision's name: resnet50, vit_b_16, ...")
    gpu: str = Field(description="GPU kind, lower case: v100, v100-32gb, a100, h100, h200")
    samples_per_s: float = Field(gt=0, description="training samples (images) per second, one GPU")
    batch: int = Field(gt=0, description="per-GPU batch size the figure was taken at")
    precision: str = Field(description="numeric precision / emulation the figure was taken with")
    source: str = Field(description="where the figure comes from, precisely enough to check it")
    kind: str = Field(description='"measured", "published" or "mlperf-storage-emulated" (see KINDS)')


_H200_SOURCE = ("measured on one NVIDIA H200, 2026-11-29, eager PyTorch 2.11 bf16 channels_last, synthetic data "
                "(shared/anchors/gpu_rates_h200.json, train.{model}, image size {size})")

# Transcribed from shared/anchors/gpu_rates_h200.json "train": model -> (img_per_s, batch, image size).
# tests/test_gpus.py checks these against the JSON wherever the anchors folder is at hand.
_H200_TRAIN: dict[str, tuple[float, int, int]] = {
    "resnet50": (4677.3, 256, 224),
    "resnet18": (13148.9, 256, 224),
    "resnet101": (3095.4, 256, 224),
    "vgg16": (3466.6, 128, 224),
    "googlenet": (6654.1, 256, 224),
    "inception_v3": (2274.0, 128, 299),
    "efficientnet_b0": (5074.7, 256, 224),
    "mobilenet_v3_large": (8100.8, 256, 224),
    "vit_b_16": (2206.2, 128, 224),
    "convnext_tiny": (2737.2, 128, 224),
}

_DLE_README = "NVIDIA/DeepLearningExamples PyTorch/Classification/ConvNets/resnet50v1.5/README.md"
_DLE_BATCH = ("batch 256 per GPU: PyTorch/Classification/ConvNets/configs.yml, models.resnet50.{platform}.AMP."
              "batch_size")


def _dle(table: str, one: float, eight: float, platform: str) -> str:
    return (f"{_DLE_README}, 'Training performance: {table}', pytorch-21.03 NGC container, mixed precision: "
            f"the 1-GPU figure {one:,.0f} img/s (8 GPUs: {eight:,.0f} img/s = {eight / 8:,.1f} per GPU); "
            + _DLE_BATCH.format(platform=platform))


def _mlperf(path: str, commit: str, batch: int, step_s: float, au: float) -> str:
    return (f"mlcommons/storage {path} (commit {commit}): reader.batch_size {batch}, train.computation_time "
            f"{step_s} s per step, so {batch}/{step_s} samples/s; DLIO sleeps this long per batch to stand for "
            f"one accelerator (pass at AU >= {au:.2f}); not a measurement of a GPU")


def _rows() -> tuple[GpuRate, ...]:
    rows = [GpuRate(model=m, gpu="h200", samples_per_s=rate, batch=batch, precision="bf16 autocast, channels_last",
                    source=_H200_SOURCE.format(model=m, size=size), kind="measured")
            for m, (rate, batch, size) in _H200_TRAIN.items()]
    amp = "mixed precision (AMP)"
    rows += [
        GpuRate(model="resnet50", gpu="v100", samples_per_s=1200.0, batch=256, precision=amp, kind="published",
                source=_dle("NVIDIA DGX-1 16GB (8x V100 16GB)", 1200, 8322, "DGX1V")),
        GpuRate(model="resnet50", gpu="v100-32gb", samples_per_s=1156.0, batch=256, precision=amp, kind="published",
                source=_dle("NVIDIA DGX-1 32GB (8x V100 32GB)", 1156, 8056, "DGX1V")),
        GpuRate(model="resnet50", gpu="a100", samples_per_s=2470.0, batch=256, precision=amp, kind="published",
                source=_dle("NVIDIA DGX A100 (8x A100 80GB)", 2470, 16621, "DGXA100")),
    ]
    emulated = "emulated (a sleep per batch)"
    rows += [
        GpuRate(model="resnet50", gpu="a100", samples_per_s=400 / 0.435, batch=400, precision=emulated,
                kind="mlperf-storage-emulated",
                source=_mlperf("configs/dlio/workload/resnet50_a100.yaml", "be18c3e", 400, 0.435, 0.90)),
        GpuRate(model="resnet50", gpu="h100", samples_per_s=400 / 0.224, batch=400, precision=emulated,
                kind="mlperf-storage-emulated",
                source=_mlperf("configs/dlio/workload/resnet50_h100.yaml", "ac0424f", 400, 0.224, 0.90)),
        GpuRate(model="retinanet", gpu="a100", samples_per_s=16 / 0.210, batch=16, precision=emulated,
                kind="mlperf-storage-emulated",
                source=_mlperf("configs/dlio/workload/retinanet_a100.yaml", "c8d70b6", 16, 0.210, 0.85)),
        GpuRate(model="retinanet", gpu="h100", samples_per_s=16 / 0.180, batch=16, precision=emulated,
                kind="mlperf-storage-emulated",
                source=_mlperf("configs/dlio/workload/retinanet_h100.yaml", "fa24012", 16, 0.180, 0.85)),
    ]
    return tuple(rows)


_TABLE = _rows()

MODEL_ALIASES = {
    "rn50": "resnet50", "resnet50v15": "resnet50", "resnet50v1": "resnet50",
    "rn18": "resnet18", "rn101": "resnet101", "resnet101v15": "resnet101",
    "vitb16": "vit_b_16", "vitbase16": "vit_b_16",
    "inceptionv3": "inception_v3", "efficientnetb0": "efficientnet_b0",
    "mobilenetv3large": "mobilenet_v3_large", "convnexttiny": "convnext_tiny",
}
GPU_ALIASES = {
    "v10016gb": "v100", "v100sxm2": "v100", "v100sxm216gb": "v100", "v100sxm232gb": "v100-32gb",
    "a10080gb": "a100", "a100sxm": "a100", "a100sxm4": "a100", "a100sxm480gb": "a100",
    "h100sxm": "h100", "h100sxm5": "h100", "h10080gb": "h100", "h100sxm580gb": "h100",
    "h200sxm": "h200", "h200141gb": "h200",
}


def _key(name: str) -> str:
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return key[len("nvidia"):] if key.startswith("nvidia") else key


def _canonical(name: str, known: set[str], aliases: dict[str, str]) -> str | None:
    by_key = {_key(k): k for k in known}
    key = _key(name)
    return by_key.get(key) or aliases.get(key)


def canonical_model(name: str) -> str | None:
    """The table's name for a model ("ResNet-50" -> "resnet50"), or None when the table has no such model."""
    return _canonical(name, {r.model for r in _TABLE}, MODEL_ALIASES)


def canonical_gpu(name: str) -> str | None:
    """The table's name for a GPU ("NVIDIA H100-SXM" -> "h100"), or None when the table has no such GPU."""
    return _canonical(name, {r.gpu for r in _TABLE}, GPU_ALIASES)


def rates() -> list[GpuRate]:
    """Every row of the table: measured H200 rows first, then published, then MLPerf Storage's emulated ones."""
    return list(_TABLE)


def known_pairs() -> str:
    """'resnet50 on a100, h100, h200, v100, v100-32gb; vit_b_16 on h200; ...' for error messages."""
    by_model: dict[str, list[str]] = {}
    for r in _TABLE:
        gpus = by_model.setdefault(r.model, [])
        if r.gpu not in gpus:
            gpus.append(r.gpu)
    return "; ".join(f"{m} on {', '.join(sorted(g))}" for m, g in by_model.items())


def _rank(kind: str) -> int:
    return KINDS.index(kind) if kind in KINDS else len(KINDS)


def lookup(model: str, gpu: str, kind: str | None = None) -> GpuRate:
    """The row for `model` on `gpu` (names as in the module docstring); of several, the first kind in KINDS,
    or the row of `kind` when given. Raises UserError listing the known pairs when there is none."""
    m, g = canonical_model(model), canonical_gpu(gpu)
    rows = [r for r in _TABLE if r.model == m and r.gpu == g]
    if kind is not None:
        if kind not in KINDS:
            raise UserError(f"unknown kind of rate {kind!r} for {model} on {gpu} (use {', '.join(KINDS)})")
        found = [r for r in rows if r.kind == kind]
        if not found:
            have = f" (have: {', '.join(sorted({r.kind for r in rows}))})" if rows else ""
            raise UserError(f"no {kind} rate for {model} on {gpu}{have}; known pairs: {known_pairs()}")
        rows = found
    if not rows:
        raise UserError(f"no consumption rate for {model} on {gpu}: give one with --rate SAMPLES_PER_S, "
                        f"or use a known pair: {known_pairs()}")
    return min(rows, key=lambda r: _rank(r.kind))


def per_gpu_rate(model: str, gpu: str, rate: float | None, kind: str | None = None) -> tuple[float, str]:
    """(samples/s one GPU consumes, where that figure comes from). An explicit `rate` wins over the table."""
    if rate is not None:
        if not rate > 0:
            raise UserError(f"--rate must be > 0 samples/s, got {rate}")
        return float(rate), "given with --rate"
    row = lookup(model, gpu, kind)
    return row.samples_per_s, row.source if row.source.startswith(row.kind) else f"{row.kind}: {row.source}"


def cpu_cores_for_decode(samples_per_s: float, per_core: float = CPU_PREPROCESS_PER_CORE) -> float:
    """CPU cores that Pillow decode + RandomResizedCrop + flip need to keep up with `samples_per_s`.

    The default per-core figure is measured (see CPU_PREPROCESS_PER_CORE): feeding one H200 on ResNet-50
    (4,677.3 img/s) takes 4677.3 / 335.2 = ~14 cores.
    """
    if per_core <= 0:
        raise ValueError("per_core must be > 0")
    return max(samples_per_s, 0.0) / per_core
