"""The consumption-rate table: sources, lookups, the figures it rests on."""

from __future__ import annotations

import json
import os
import re
import runpy
import tomllib
from pathlib import Path

import pytest
from conftest import iobench
from pydantic import ValidationError

from iobench.errors import UserError
from iobench.gpu import rates as gpus

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


def test_kinds_and_their_order():
    assert gpus.KINDS == ("measured", "published", "mlperf-storage") and gpus.GIVEN == "given"
    assert not hasattr(gpus, "DEFAULT_KIND"), "no one default kind: each pair takes its first kind"
    assert gpus.normalise_kind("mlperf-storage-emulated") == "mlperf-storage"  # the old name is still read
    assert [r.kind for r in gpus.rates("measured")] == ["measured"] * 10
    assert {r.gpu for r in gpus.rates("mlperf-storage-emulated")} == {"a100", "h100", "b200", "mi355"}
    assert gpus.kinds_of("rn50", "A100-80GB") == ["published", "mlperf-storage"]
    assert gpus.kinds_of("resnet50", "t4") == []


def test_without_a_kind_each_pair_takes_its_first_kind_and_an_asked_kind_never_falls_back():
    """The bug: without --rate-kind only h200 worked ("no measured rate for resnet50 on h100", exit 2)."""
    for gpu, kind, rate in (("h200", "measured", 4677.3), ("a100", "published", 2470.0), ("v100", "published", 1200.0),
                            ("h100", "mlperf-storage", 400 / 0.224)):
        row = gpus.lookup("resnet50", gpu)
        assert (row.kind, row.samples_per_s) == (kind, rate), gpu
        assert gpus.rate_for("resnet50", gpu) == (rate, gpus.rate_for("resnet50", gpu, kind=kind).source, kind)
    assert gpus.lookup("retinanet", "b200").kind == gpus.lookup("unet3d", "h100").kind == "mlperf-storage"
    assert gpus.first_kinds("ResNet-50") == {"h200": "measured", "v100": "published", "v100-32gb": "published",
                                             "a100": "published", "h100": "mlperf-storage"}
    assert gpus.first_kinds("bert") == {}
    # a kind asked for is that kind or an error naming the kinds the pair has, never another kind
    with pytest.raises(UserError) as info:
        gpus.lookup("resnet50", "h100", "measured")
    msg = str(info.value)
    assert msg.startswith("no measured rate for resnet50 on h100 (resnet50 on h100 has: mlperf-storage); use "
                          "--rate-kind mlperf-storage or --rate N; measured rows: "), msg
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
                                           "resnet50, cosmoflow on a100, h100; retinanet on b200, mi355; "
                                           "unet3d on a100, b200, h100"),
    ("retinanet", "mi355x", "measured", "no measured rate for retinanet on mi355x (retinanet on mi355 has: "
                                        "mlperf-storage); use --rate-kind mlperf-storage or --rate N"),
    ("retinanet", "h100", None, "no consumption rate for retinanet on h100 (of any kind): MLPerf Storage v3.0 has no "
                                "retinanet config for h100: retinanet_h100.yaml was deleted before v3.0 "
                                "(mlcommons/storage e5bfa17, 2026-03-09)"),
    ("resnet50", "b200", "mlperf-storage", "no consumption rate for resnet50 on b200 (of any kind)"),
    ("unet3d", "MI355X", "mlperf-storage", "no consumption rate for unet3d on MI355X (of any kind)"),
    ("retinanet", "mi300x", "mlperf-storage", "no consumption rate for retinanet on mi300x (of any kind)"),
    ("resnet50", "h200", "mlperf-storage-emulated", "no mlperf-storage rate for resnet50 on h200"),
    ("retinanet", "A100-80GB", "published", "v3.0's retinanet runs on b200 and mi355; give one with --rate"),
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
        # whose measurement it is, first: never read as one taken on the user's own system
        assert source.startswith("measured by iobench's makers, not on your system: one NVIDIA H200"), source
        for needle in (shipped["measured"], shipped["torch"], "bf16 autocast", "channels_last", "synthetic data",
                       "a compute ceiling", f"train.{model}", f"batch {fig['batch']}",
                       "iobench/data/gpu_rates_h200.json in the installed package"):
            assert needle in source, (needle, source)
        assert measured[model].precision in shipped["what"]
    assert gpus.CPU_PREPROCESS_PER_CORE == shipped["cpu_preprocess_img_per_s_per_core"]["value"] == 335.2


def test_the_h200_measurement_is_package_data(monkeypatch):
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "data/*.json" in project["package-data"]["iobench"]
    # the packages are what setup.py hands setuptools (found from the project folder, as a build does)
    import setuptools

    given: dict = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: given.update(kw))
    monkeypatch.chdir(REPO)
    runpy.run_path(str(REPO / "setup.py"))
    assert {"iobench", "iobench.report", "iobench.workloads"} <= set(given["packages"])


@pytest.mark.skipif(ANCHORS is None, reason="shared/anchors/gpu_rates_h200.json is not beside this checkout")
def test_shipped_h200_measurement_equals_the_anchor():
    assert ANCHORS is not None
    assert gpus.H200_FILE.read_bytes() == ANCHORS.read_bytes()


def test_explicit_rate_wins():
    assert gpus.rate_for("resnet50", "h200", 1234.5)[:2] == (1234.5, "given with --rate")
    assert gpus.rate_for("anything", "t4", 10)[:2] == (10.0, "given with --rate")
    rate, source, _ = gpus.rate_for("resnet50", "h200", None)
    assert rate == 4677.3 and source.startswith("measured by iobench's makers, not on your system: one NVIDIA H200")
    rate, source, _ = gpus.rate_for("resnet50", "h100", None, "mlperf-storage")
    assert rate == 400 / 0.224 and source.startswith("mlperf-storage: mlcommons/storage")
    with pytest.raises(UserError, match="--rate"):
        gpus.rate_for("resnet50", "h200", 0.0)


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
    assert gpus.cpu_cores_for_decode(0) == 0.0


# MLPerf Storage's workload files as they read at mlcommons/storage 1833c96 (MLPerf Storage v3.0), (batch,
# computation_time, AU): configs/dlio/workload/{model}_{gpu}.yaml reader.batch_size, train.computation_time, metric.au
# (research notes: /work/notes/mlperf.md).
MLPERF_STORAGE_FILES = {
    ("resnet50", "a100"): (400, 0.435, 0.90),
    ("resnet50", "h100"): (400, 0.224, 0.90),
    ("retinanet", "b200"): (24, 0.04755, 0.85),
    ("retinanet", "mi355"): (36, 0.071325, 0.85),
    ("unet3d", "a100"): (7, 0.636, 0.90),
    ("unet3d", "h100"): (7, 0.323, 0.90),
    ("unet3d", "b200"): (7, 0.162, 0.90),
    ("cosmoflow", "a100"): (1, 0.00551, 0.70),
    ("cosmoflow", "h100"): (1, 0.00350, 0.70),
}


def test_the_mlperf_storage_rows_are_v3s_files_exactly():
    assert {(r.model, r.gpu) for r in gpus.rates("mlperf-storage")} == set(MLPERF_STORAGE_FILES)


@pytest.mark.parametrize(("model", "gpu"), sorted(MLPERF_STORAGE_FILES))
def test_mlperf_storage_rows_are_batch_over_step_time_as_their_file_says(model, gpu):
    batch, step_s, au = MLPERF_STORAGE_FILES[(model, gpu)]
    row = gpus.lookup(model, gpu, "mlperf-storage")
    assert (row.model, row.gpu, row.kind) == (model, gpu, "mlperf-storage") and row.kind in gpus.KINDS
    assert row.batch == batch and row.samples_per_s == batch / step_s
    # every row cites its file and the commit it was read at
    assert row.source.startswith("mlcommons/storage at commit 1833c96 (MLPerf Storage v3.0): "), row.source
    for needle in (f"configs/dlio/workload/{model}_{gpu}.yaml", f"batch {batch} per {step_s} s", f"AU >= {au:.2f}",
                   "not a measurement of a GPU"):
        assert needle in row.source, (needle, row.source)
    assert row.precision == "emulated (a sleep per batch)"
    if model in ("resnet50", "cosmoflow"):  # not v3.0 closed/open workloads: the source says so
        assert "v3.0: whatif mode only (as in v2.0, 7e71ca1)" in row.source
    # only MLPerf Storage's emulated kind for these pairs but resnet50 on a100 (NVIDIA's published figure)
    assert gpus.kinds_of(model, gpu) == ["mlperf-storage"] or (model, gpu) == ("resnet50", "a100")


def test_retinanet_rows_are_v3s_and_the_deleted_configs_are_gone():
    """The bugs: mi355 was batch 32 at 0.0634 s (a stale copy; v3.0 has 36 at 0.071325), and retinanet on a100 and
    h100 cited configs deleted before v3.0 (another dataset: 153,600 B JPEGs)."""
    b200 = gpus.lookup("retinanet", "b200", "mlperf-storage")
    mi355 = gpus.lookup("retinanet", "mi355", "mlperf-storage")
    assert (b200.batch, mi355.batch) == (24, 36)
    assert round(b200.samples_per_s, 2) == round(mi355.samples_per_s, 2) == 504.73  # 24/0.04755 == 36/0.071325
    for row in (b200, mi355):
        assert "v3.0's dataset: 1,170,301 JPEGs of 322,957 B" in row.source and "153,600" not in row.source
    assert "AMD Instinct MI355X" in mi355.source and "0.0634" not in mi355.source
    for gpu in ("a100", "h100"):
        assert gpus.kinds_of("retinanet", gpu) == []
        with pytest.raises(UserError, match=rf"retinanet_{gpu}.yaml was deleted before v3.0"):
            gpus.lookup("retinanet", gpu, "mlperf-storage")
    unet_b200 = gpus.lookup("unet3d", "b200", "mlperf-storage")
    assert round(unet_b200.samples_per_s, 2) == 43.21
    assert "H100 (0.323 s) ÷ 2" in unet_b200.source and "not a B200 timing" in unet_b200.source
    assert round(gpus.lookup("cosmoflow", "h100", "mlperf-storage").samples_per_s, 1) == 285.7


def test_sample_sizes_of_the_models_whose_dataset_is_not_imagenets():
    assert gpus.sample_size("3D U-Net") == gpus.SAMPLE_BYTES["unet3d"]
    assert gpus.SAMPLE_BYTES["unet3d"].bytes == 146_600_628
    assert gpus.sample_size("CosmoFlow").bytes == 2_828_486 and gpus.sample_size("retinanet").bytes == 322_957
    for model, text in (("unet3d", "stdev 68,341,808 B"), ("cosmoflow", "stdev 71,311 B"),
                        ("retinanet", "every sample that size")):
        source = gpus.SAMPLE_BYTES[model].source
        assert f"configs/dlio/workload/{model}_*.yaml at 1833c96" in source and "record_length_bytes" in source
        assert text in source
    assert gpus.sample_size("resnet50") is None and gpus.sample_size("vit_b_16") is None  # ImageNet's images
    assert gpus.sample_size("bert") is None


def _terminal(*args: str, columns: int = 120) -> str:
    """The real CLI's stdout as a terminal of `columns` columns shows it (rich takes TTY_COMPATIBLE for a tty)."""
    env = {**os.environ, "TTY_COMPATIBLE": "1", "COLUMNS": str(columns), "NO_COLOR": "1"}
    out = iobench(*args, check=True, env=env).stdout
    return re.sub(r"\x1b\[[0-9;]*m", "", out)


def test_gpus_prints_each_source_once_as_numbered_notes_at_120_columns():
    """The bug: every row repeated its four-line source."""
    text = _terminal("gpus")
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 120
    notes = {n: line for line in lines if (n := line[:4]) in ("[1] ", "[2] ", "[3] ")}
    assert notes["[1] "].startswith("[1] measured by iobench's makers, not on your system: one NVIDIA H200")
    assert notes["[2] "].startswith("[2] NVIDIA/DeepLearningExamples")
    assert notes["[3] "].startswith("[3] mlcommons/storage at commit 1833c96 (MLPerf Storage v3.0)")
    for once in ("iobench's makers", "DeepLearningExamples", "mlcommons/storage", "synthetic data"):
        assert text.count(once) == 1, once
    rows = [line for line in lines if line.startswith("│ ") and line.split("│")[1].strip()]
    assert len(rows) == len(gpus.rates())  # one line that names the model per row: each row 1-4 lines
    assert len([line for line in lines if line.startswith("│ ")]) <= 3 * len(gpus.rates())
    body = " ".join(line.split("│")[6].strip() for line in lines if line.startswith("│ "))
    assert body.count("[1]") == 10 and body.count("[2]") == 3 and body.count("[3]") == 9
    assert "│ mlperf-storage │" in text and "(resnet50 on a100 takes published)" in text
    published = _terminal("gpus", "--rate-kind", "published")
    assert "[1] NVIDIA/DeepLearningExamples" in published and "[2] " not in published
    # --json: a list of rows, each with its full source (the note and the row's detail)
    rows_json = json.loads(iobench("gpus", "--json", "-", check=True).stdout)
    assert [r["source"] for r in rows_json] == [r.source for r in gpus.rates()]
    unet = next(r for r in rows_json if (r["model"], r["gpu"]) == ("unet3d", "b200"))
    assert unet["source"].startswith("mlcommons/storage at commit 1833c96") and "unet3d_b200.yaml" in unet["source"]
    assert set(unet) == {"model", "gpu", "samples_per_s", "batch", "precision", "source", "kind"}


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
    # the newer accelerators have only MLPerf Storage's emulated rows: without a kind they take it
    assert gpus.lookup("retinanet", "b200").kind == "mlperf-storage"
