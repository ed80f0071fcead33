"""The consumption-rate table: sources, lookups, the figures it rests on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from iobench import gpus
from iobench.errors import UserError

REPO = Path(__file__).resolve().parents[1]
ANCHORS = next((p for p in (REPO / "shared" / "anchors" / "gpu_rates_h200.json",
                            REPO.parent / "shared" / "anchors" / "gpu_rates_h200.json") if p.is_file()), None)


def test_every_row_has_a_source_a_kind_and_a_positive_rate():
    rows = gpus.rates()
    assert len(rows) >= 15
    for r in rows:
        assert r.samples_per_s > 0 and r.batch > 0
        assert r.kind in gpus.KINDS
        assert len(r.source) > 30 and r.precision
    pairs = [(r.model, r.gpu, r.kind) for r in rows]
    assert len(pairs) == len(set(pairs)), "one row per model, GPU and kind"


def test_rows_are_frozen():
    row = gpus.rates()[0]
    with pytest.raises(ValidationError, match="frozen"):
        row.samples_per_s = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(("model", "gpu", "want"), [
    ("resnet50", "h200", ("resnet50", "h200")),
    ("ResNet-50", "NVIDIA H200", ("resnet50", "h200")),
    ("rn50", "a100-80gb", ("resnet50", "a100")),
    ("resnet50v1.5", "V100-16GB", ("resnet50", "v100")),
    ("RESNET_50", "h100-sxm", ("resnet50", "h100")),
    ("ViT-B/16", "h200", ("vit_b_16", "h200")),
    ("vit-b16", "H200-SXM", ("vit_b_16", "h200")),
    ("Inception-v3", "h200", ("inception_v3", "h200")),
])
def test_lookup_accepts_aliases(model, gpu, want):
    row = gpus.lookup(model, gpu)
    assert (row.model, row.gpu) == want


def test_lookup_prefers_published_over_emulated_unless_told():
    assert gpus.lookup("resnet50", "a100").kind == "published"
    assert gpus.lookup("resnet50", "a100", "mlperf-storage-emulated").batch == 400


@pytest.mark.parametrize(("model", "gpu", "kind"), [
    ("resnet50", "t4", None), ("bert", "h100", None), ("resnet50", "h200", "mlperf-storage-emulated"),
    ("resnet50", "h200", "guessed"),
])
def test_missing_pair_is_a_one_line_error_listing_known_pairs(model, gpu, kind):
    with pytest.raises(UserError) as info:
        gpus.lookup(model, gpu, kind)
    msg = str(info.value)
    assert "\n" not in msg
    assert model in msg and gpu in msg
    if kind != "guessed":
        assert "resnet50 on a100, h100, h200, v100, v100-32gb" in msg


def test_mlperf_storage_emulated_rates_are_batch_over_step_time():
    a100 = gpus.lookup("resnet50", "a100", "mlperf-storage-emulated")
    h100 = gpus.lookup("resnet50", "h100", "mlperf-storage-emulated")
    assert a100.samples_per_s == 400 / 0.435 and round(a100.samples_per_s, 1) == 919.5
    assert h100.samples_per_s == 400 / 0.224 and round(h100.samples_per_s, 1) == 1785.7
    assert "resnet50_a100.yaml" in a100.source and "resnet50_h100.yaml" in h100.source


def test_published_rows_name_the_readme():
    published = [r for r in gpus.rates() if r.kind == "published"]
    assert {r.gpu for r in published} >= {"v100", "a100"}
    for r in published:
        assert "DeepLearningExamples" in r.source and "resnet50v1.5/README.md" in r.source
    assert gpus.lookup("resnet50", "a100").samples_per_s == 2470.0
    assert gpus.lookup("resnet50", "v100").samples_per_s == 1200.0


def test_h200_rows_cover_all_ten_models():
    measured = {r.model: r for r in gpus.rates() if r.kind == "measured"}
    assert len(measured) == 10 and all(r.gpu == "h200" for r in measured.values())
    assert measured["resnet50"].samples_per_s == 4677.3 and measured["resnet50"].batch == 256
    assert measured["vit_b_16"].samples_per_s == 2206.2 and measured["vit_b_16"].batch == 128


@pytest.mark.skipif(ANCHORS is None, reason="shared/anchors/gpu_rates_h200.json is not beside this checkout")
def test_h200_rows_equal_the_anchors_json():
    assert ANCHORS is not None
    train = json.loads(ANCHORS.read_text())["train"]
    measured = {r.model: r for r in gpus.rates() if r.kind == "measured"}
    assert set(measured) == set(train)
    for model, fig in train.items():
        assert measured[model].samples_per_s == fig["img_per_s"]
        assert measured[model].batch == fig["batch"]
    per_core = json.loads(ANCHORS.read_text())["cpu_preprocess_img_per_s_per_core"]["value"]
    assert per_core == gpus.CPU_PREPROCESS_PER_CORE


def test_explicit_rate_wins():
    assert gpus.per_gpu_rate("resnet50", "h200", 1234.5) == (1234.5, "given with --rate")
    assert gpus.per_gpu_rate("anything", "t4", 10) == (10.0, "given with --rate")
    rate, source = gpus.per_gpu_rate("resnet50", "h200", None)
    assert rate == 4677.3 and source.startswith("measured on one NVIDIA H200")
    rate, source = gpus.per_gpu_rate("resnet50", "h100", None)
    assert rate == 400 / 0.224 and source.startswith("mlperf-storage-emulated: mlcommons/storage")
    with pytest.raises(UserError, match="--rate"):
        gpus.per_gpu_rate("resnet50", "h200", 0.0)


def test_cpu_cores_for_decode():
    assert gpus.cpu_cores_for_decode(335.2) == pytest.approx(1.0)
    assert gpus.cpu_cores_for_decode(4677.3) == pytest.approx(13.95, abs=0.01)  # ~14 cores feed one H200
    assert gpus.cpu_cores_for_decode(1000, per_core=500) == 2.0
    assert gpus.cpu_cores_for_decode(0) == 0.0
