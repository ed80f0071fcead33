"""The consumption-rate table: sources, lookups, the figures it rests on."""

from __future__ import annotations

import json
import tomllib
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


@pytest.mark.parametrize(("model", "gpu", "kind", "want"), [
    ("resnet50", "h200", None, ("resnet50", "h200")),
    ("ResNet-50", "NVIDIA H200", None, ("resnet50", "h200")),
    ("rn50", "a100-80gb", "published", ("resnet50", "a100")),
    ("resnet50v1.5", "V100-16GB", "published", ("resnet50", "v100")),
    ("RESNET_50", "h100-sxm", "mlperf-storage", ("resnet50", "h100")),
    ("ViT-B/16", "h200", None, ("vit_b_16", "h200")),
    ("vit-b16", "H200-SXM", "measured", ("vit_b_16", "h200")),
    ("Inception-v3", "h200", None, ("inception_v3", "h200")),
])
def test_lookup_accepts_aliases(model, gpu, kind, want):
    row = gpus.lookup(model, gpu, kind)
    assert (row.model, row.gpu) == want


def test_kinds_and_the_default_kind():
    assert gpus.KINDS == ("measured", "published", "mlperf-storage")
    assert gpus.DEFAULT_KIND == "measured" and gpus.GIVEN == "given"
    assert gpus.normalise_kind("mlperf-storage-emulated") == "mlperf-storage"  # the old name is still read
    assert [r.kind for r in gpus.rates("measured")] == ["measured"] * 10
    assert {r.gpu for r in gpus.rates("mlperf-storage-emulated")} == {"a100", "h100", "b200", "mi355"}
    assert gpus.kinds_of("rn50", "A100-80GB") == ["published", "mlperf-storage"]
    assert gpus.kinds_of("resnet50", "t4") == []


def test_lookup_takes_one_kind_and_never_falls_back():
    """The bug: --gpu h100 took MLPerf Storage's emulated rate, --gpu a100 NVIDIA's published one (2.7x apart)."""
    assert gpus.lookup("resnet50", "h200").kind == "measured"
    for gpu, has in (("h100", "mlperf-storage"), ("a100", "published, mlperf-storage"), ("v100", "published")):
        with pytest.raises(UserError) as info:
            gpus.lookup("resnet50", gpu)
        msg = str(info.value)
        assert msg.startswith(f"no measured rate for resnet50 on {gpu} (resnet50 on {gpu} has: {has}); "
                              f"use --rate-kind {has.replace(', ', '|')} or --rate N; measured rows: "), msg
        assert "resnet50, resnet18, resnet101" in msg and msg.endswith("on h200") and "\n" not in msg
    published = gpus.lookup("resnet50", "a100", "published")
    emulated = gpus.lookup("resnet50", "a100", "mlperf-storage")
    assert published.samples_per_s / emulated.samples_per_s == pytest.approx(2.69, abs=0.01)
    assert emulated.batch == 400 and gpus.lookup("resnet50", "a100", "mlperf-storage-emulated") == emulated
    # within one kind the H100 is the faster GPU, so it asks more of the storage than the A100
    assert gpus.lookup("resnet50", "h100", "mlperf-storage").samples_per_s > emulated.samples_per_s


@pytest.mark.parametrize(("model", "gpu", "kind", "says"), [
    ("resnet50", "t4", None, "no consumption rate for resnet50 on t4 (of any kind): give one with --rate"),
    ("bert", "h100", None, "no consumption rate for bert on h100 (of any kind)"),
    ("resnet50", "t4", "published", "no consumption rate for resnet50 on t4 (of any kind)"),
    ("resnet50", "h200", "mlperf-storage", "no mlperf-storage rate for resnet50 on h200 (resnet50 on h200 has: "
                                           "measured); use --rate-kind measured or --rate N; mlperf-storage rows: "
                                           "resnet50, cosmoflow on a100, h100; retinanet on a100, b200, h100, mi355; "
                                           "unet3d on a100, b200, h100"),
    ("retinanet", "mi355x", None, "no measured rate for retinanet on mi355x (retinanet on mi355 has: "
                                  "mlperf-storage); use --rate-kind mlperf-storage or --rate N"),
    ("resnet50", "b200", "mlperf-storage", "no consumption rate for resnet50 on b200 (of any kind)"),
    ("unet3d", "MI355X", "mlperf-storage", "no consumption rate for unet3d on MI355X (of any kind)"),
    ("retinanet", "mi300x", "mlperf-storage", "no consumption rate for retinanet on mi300x (of any kind)"),
    ("resnet50", "h200", "mlperf-storage-emulated", "no mlperf-storage rate for resnet50 on h200"),
    ("retinanet", "a100", "published", "published rows: resnet50 on a100, v100, v100-32gb"),
    ("resnet50", "h200", "guessed", "unknown kind of rate 'guessed' for resnet50 on h200 (known: measured, "
                                    "published, mlperf-storage)"),
])
def test_missing_pair_or_kind_is_a_one_line_error_listing_known_rows(model, gpu, kind, says):
    with pytest.raises(UserError) as info:
        gpus.lookup(model, gpu, kind)
    msg = str(info.value)
    assert "\n" not in msg
    assert says in msg, msg
    if "of any kind" in msg:
        assert "resnet50 on a100, h100, h200, v100, v100-32gb" in msg


def test_mlperf_storage_rates_are_batch_over_step_time():
    a100 = gpus.lookup("resnet50", "a100", "mlperf-storage")
    h100 = gpus.lookup("resnet50", "h100", "mlperf-storage")
    assert a100.samples_per_s == 400 / 0.435 and round(a100.samples_per_s, 1) == 919.5
    assert h100.samples_per_s == 400 / 0.224 and round(h100.samples_per_s, 1) == 1785.7
    assert "resnet50_a100.yaml" in a100.source and "resnet50_h100.yaml" in h100.source


def test_published_rows_name_the_readme():
    published = [r for r in gpus.rates() if r.kind == "published"]
    assert {r.gpu for r in published} >= {"v100", "a100"}
    for r in published:
        assert "DeepLearningExamples" in r.source and "resnet50v1.5/README.md" in r.source
    assert gpus.lookup("resnet50", "a100", "published").samples_per_s == 2470.0
    assert gpus.lookup("resnet50", "v100", "published").samples_per_s == 1200.0


def test_h200_rows_cover_all_ten_models():
    measured = {r.model: r for r in gpus.rates() if r.kind == "measured"}
    assert len(measured) == 10 and all(r.gpu == "h200" for r in measured.values())
    assert measured["resnet50"].samples_per_s == 4677.3 and measured["resnet50"].batch == 256
    assert measured["vit_b_16"].samples_per_s == 2206.2 and measured["vit_b_16"].batch == 128


def test_h200_rows_are_read_from_the_shipped_measurement():
    assert gpus.H200_FILE == REPO / "iobench" / "data" / "gpu_rates_h200.json"  # inside the package
    shipped = json.loads(gpus.H200_FILE.read_text())
    measured = {r.model: r for r in gpus.rates("measured")}
    assert set(measured) == set(shipped["train"])
    for model, fig in shipped["train"].items():
        assert measured[model].samples_per_s == fig["img_per_s"] and measured[model].batch == fig["batch"]
        source = measured[model].source
        # every condition the figure was taken under, and where to check it in what was installed
        for needle in (shipped["measured"], shipped["torch"], "bf16 autocast", "channels_last", "synthetic data",
                       f"train.{model}", f"batch {fig['batch']}", "iobench/data/gpu_rates_h200.json in the installed "
                                                                  "package"):
            assert needle in source, (needle, source)
        assert measured[model].precision in shipped["what"]
    assert gpus.CPU_PREPROCESS_PER_CORE == shipped["cpu_preprocess_img_per_s_per_core"]["value"] == 335.2


def test_the_h200_measurement_is_package_data():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "data/*.json" in project["package-data"]["iobench"] and "iobench" in project["packages"]


@pytest.mark.skipif(ANCHORS is None, reason="shared/anchors/gpu_rates_h200.json is not beside this checkout")
def test_shipped_h200_measurement_equals_the_anchor():
    assert ANCHORS is not None
    assert gpus.H200_FILE.read_bytes() == ANCHORS.read_bytes()


def test_explicit_rate_wins():
    assert gpus.per_gpu_rate("resnet50", "h200", 1234.5) == (1234.5, "given with --rate")
    assert gpus.per_gpu_rate("anything", "t4", 10) == (10.0, "given with --rate")
    rate, source = gpus.per_gpu_rate("resnet50", "h200", None)
    assert rate == 4677.3 and source.startswith("measured on one NVIDIA H200")
    rate, source = gpus.per_gpu_rate("resnet50", "h100", None, "mlperf-storage")
    assert rate == 400 / 0.224 and source.startswith("mlperf-storage: mlcommons/storage")
    with pytest.raises(UserError, match="--rate"):
        gpus.per_gpu_rate("resnet50", "h200", 0.0)


def test_rate_for_names_the_kind_and_refuses_a_kind_for_a_given_rate():
    assert gpus.rate_for("resnet50", "h200") == (4677.3, gpus.rate_for("resnet50", "h200").source, "measured")
    assert gpus.rate_for("resnet50", "a100", kind="published").kind == "published"
    assert gpus.rate_for("anything", "t4", 100) == (100.0, "given with --rate", "given")
    with pytest.raises(UserError, match=r"^--rate and --rate-kind do not go together: a given rate \(100 samples/s\) "
                                        r"has no kind"):
        gpus.rate_for("resnet50", "h200", 100, "measured")


@pytest.mark.parametrize(("source", "kind"), [
    ("given with --rate", "given"), ("measured on one NVIDIA H200, 2026-11-29", "measured"),
    ("published: NVIDIA/DeepLearningExamples ...", "published"),
    ("mlperf-storage-emulated: mlcommons/storage ...", "mlperf-storage"),
    ("mlperf-storage: mlcommons/storage ...", "mlperf-storage"), ("somewhere", None), (None, None),
])
def test_kind_of_source_reads_old_and_new_sources(source, kind):
    assert gpus.kind_of_source(source) == kind


def test_cpu_cores_for_decode():
    assert gpus.cpu_cores_for_decode(335.2) == pytest.approx(1.0)
    assert gpus.cpu_cores_for_decode(4677.3) == pytest.approx(13.95, abs=0.01)  # ~14 cores feed one H200
    assert gpus.cpu_cores_for_decode(1000, per_core=500) == 2.0
    assert gpus.cpu_cores_for_decode(0) == 0.0


# The newer accelerators: MLPerf Storage's workload files, (path, commit, batch, computation_time, AU) as they read
# (mlcommons/storage configs/dlio/workload/*.yaml: reader.batch_size, train.computation_time, metric.au).
MLPERF_STORAGE_FILES = {
    ("retinanet", "b200"): ("retinanet_b200.yaml", "11460d0", 24, 0.04755, 0.85),
    ("retinanet", "mi355"): ("retinanet_mi355.yaml", "76f4545", 32, 0.0634, 0.85),
    ("unet3d", "a100"): ("unet3d_a100.yaml", "be18c3e", 7, 0.636, 0.90),
    ("unet3d", "h100"): ("unet3d_h100.yaml", "7e73663", 7, 0.323, 0.90),
    ("unet3d", "b200"): ("unet3d_b200.yaml", "0d75b41", 7, 0.162, 0.90),
    ("cosmoflow", "a100"): ("cosmoflow_a100.yaml", "e3ffed0", 1, 0.00551, 0.70),
    ("cosmoflow", "h100"): ("cosmoflow_h100.yaml", "c25079c", 1, 0.00350, 0.70),
}


@pytest.mark.parametrize(("model", "gpu"), sorted(MLPERF_STORAGE_FILES))
def test_newer_mlperf_storage_rows_are_batch_over_step_time_as_their_file_says(model, gpu):
    path, commit, batch, step_s, au = MLPERF_STORAGE_FILES[(model, gpu)]
    row = gpus.lookup(model, gpu, "mlperf-storage")
    assert (row.model, row.gpu, row.kind) == (model, gpu, "mlperf-storage") and row.kind in gpus.KINDS
    assert row.batch == batch and row.samples_per_s == batch / step_s
    for needle in (f"mlcommons/storage configs/dlio/workload/{path} (commit {commit})", f"reader.batch_size {batch}",
                   f"train.computation_time {step_s} s per step", f"{batch}/{step_s} samples/s",
                   f"AU >= {au:.2f}", "not a measurement of a GPU"):
        assert needle in row.source, (needle, row.source)
    assert row.precision == "emulated (a sleep per batch)"
    # only MLPerf Storage's emulated kind for these pairs: no measured or published figure was found
    assert gpus.kinds_of(model, gpu) == ["mlperf-storage"] or (model, gpu) == ("retinanet", "a100")


def test_newer_rows_figures_and_caveats():
    b200 = gpus.lookup("retinanet", "b200", "mlperf-storage")
    mi355 = gpus.lookup("retinanet", "mi355", "mlperf-storage")
    assert round(b200.samples_per_s, 1) == round(mi355.samples_per_s, 1) == 504.7  # 24/0.04755 == 32/0.0634
    for row in (b200, mi355):  # MLPerf Storage v3.0 redefined RetinaNet's dataset: the source says so
        assert "1,170,301 JPEGs of 322,957 bytes" in row.source and "1,743,042 of 153,600" in row.source
    assert "AMD Instinct MI355X" in mi355.source
    unet_b200 = gpus.lookup("unet3d", "b200", "mlperf-storage")
    assert round(unet_b200.samples_per_s, 2) == 43.21
    assert "H100 (0.323 s) ÷ 2" in unet_b200.source and "not a B200 timing" in unet_b200.source
    assert gpus.lookup("unet3d", "h100", "mlperf-storage").samples_per_s == 7 / 0.323
    assert round(gpus.lookup("cosmoflow", "h100", "mlperf-storage").samples_per_s, 1) == 285.7


@pytest.mark.parametrize(("model", "gpu", "want"), [
    ("retinanet", "B200", ("retinanet", "b200")),
    ("RetinaNet", "NVIDIA B200-SXM", ("retinanet", "b200")),
    ("retinanet", "b200-180gb", ("retinanet", "b200")),
    ("retinanet", "HGX B200", ("retinanet", "b200")),
    ("retinanet", "mi355", ("retinanet", "mi355")),
    ("retinanet", "MI355X", ("retinanet", "mi355")),
    ("retinanet", "AMD Instinct MI355X", ("retinanet", "mi355")),
    ("retinanet", "amd-mi355x", ("retinanet", "mi355")),
    ("3D U-Net", "b200", ("unet3d", "b200")),
    ("UNet3D", "H100-SXM", ("unet3d", "h100")),
    ("CosmoFlow", "a100-80gb", ("cosmoflow", "a100")),
])
def test_lookup_by_the_new_names_and_aliases(model, gpu, want):
    row = gpus.lookup(model, gpu, "mlperf-storage")
    assert (row.model, row.gpu) == want
    assert gpus.canonical_gpu(gpu) == want[1] and gpus.canonical_model(model) == want[0]


def test_every_alias_names_a_gpu_or_model_of_the_table():
    assert set(gpus.GPU_ALIASES.values()) <= {r.gpu for r in gpus.rates()}
    assert set(gpus.MODEL_ALIASES.values()) <= {r.model for r in gpus.rates()}
    assert gpus.canonical_gpu("mi300x") is None, "no source gives an MI300X figure: no row, no alias"
    # the newer accelerators have only MLPerf Storage's emulated rows: the default kind says so, no fall-back
    with pytest.raises(UserError, match=r"^no measured rate for retinanet on b200 \(retinanet on b200 has: "
                                        r"mlperf-storage\)"):
        gpus.lookup("retinanet", "b200")
