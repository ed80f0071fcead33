"""Capacity arithmetic (iobench.answer.plan) against hand arithmetic."""

import math
import os
import re
from pathlib import Path

import pytest
from conftest import iobench

from iobench.answer.plan import (
    IMAGENET_FILES,
    cache_mix_rate,
    format_plan,
    gpus_supported,
    littles_law,
    mixed_kinds,
    plan,
    rate_kind_of,
)
from iobench.answer.rules import demand
from iobench.errors import UserError
from iobench.gpu.rates import lookup
from iobench.result import Cpu, Dataset, Host, Latency, Mount, Result, Run, Settings, Verdict

H100_RN50 = 400 / 0.224  # MLPerf Storage's emulated H100 on ResNet-50: batch 400 per 0.224 s step
MLPERF = "mlperf-storage"  # the only kind of rate the table has for an H100


def test_32_h100_resnet50_by_hand():
    assert lookup("resnet50", "h100", MLPERF).samples_per_s == pytest.approx(H100_RN50)
    p = plan("h100", 32, "resnet50", kind=MLPERF)
    assert p.rate_kind == MLPERF
    demand = 32 * H100_RN50  # 57,142.86 samples/s: every GPU busy all the time
    assert p.rate_per_gpu == pytest.approx(1785.714, abs=1e-3)
    assert p.demand_samples_per_s == pytest.approx(demand) == pytest.approx(57_142.857, abs=1e-3)
    assert p.minimum_samples_per_s == pytest.approx(0.9 * demand) == pytest.approx(51_428.571, abs=1e-3)
    # MB/s at ImageNet's mean sample, 110,000 B
    assert p.mean_bytes == 110_000
    assert p.demand_mb_per_s == pytest.approx(demand * 0.11) == pytest.approx(6_285.714, abs=1e-3)
    assert p.minimum_mb_per_s == pytest.approx(5_657.143, abs=1e-3)
    # one file open per sample
    assert p.minimum_opens_per_s == p.minimum_samples_per_s and p.demand_opens_per_s == p.demand_samples_per_s
    # CPU: 335.2 images/s per core decode + augment
    assert p.cpu_cores_demand == pytest.approx(demand / 335.2) == pytest.approx(170.47, abs=0.01)
    assert p.cpu_cores_minimum == pytest.approx(153.42, abs=0.01)
    # epoch of ImageNet-1k train
    assert p.dataset_files == IMAGENET_FILES == 1_281_167
    assert p.epoch_s_demand == pytest.approx(1_281_167 / demand) == pytest.approx(22.42, abs=0.01)
    assert p.epoch_s_minimum == pytest.approx(24.91, abs=0.01)
    assert p.startup_entries == 1_281_167
    assert p.nodes == 4 and p.dataset_bytes == pytest.approx(140.93e9, rel=1e-4)
    assert p.measured is None


def test_given_rate_mean_and_target():
    p = plan("h100", 8, "resnet50", dataset_files=100_000, mean_kb=150, au_target=0.7, rate=1000)
    assert p.rate_source == "given with --rate" and p.rate_kind == "given" and p.mean_bytes == 150_000
    assert p.minimum_samples_per_s == pytest.approx(5600)  # 0.7 x 8 x 1000
    assert p.minimum_mb_per_s == pytest.approx(840)  # x 150 kB
    assert p.epoch_s_demand == pytest.approx(12.5)  # 100,000 / 8,000


def test_h200_measured_rate_is_the_default_row():
    p = plan("H200", 1, "ResNet-50")
    assert p.rate_per_gpu == 4677.3 and p.rate_source.startswith("measured") and p.rate_kind == "measured"
    assert p.cpu_cores_demand == pytest.approx(4677.3 / 335.2)  # ~14 cores per H200


def test_helpers():
    assert demand(32, H100_RN50, 0.9) == pytest.approx(51_428.571, abs=1e-3)  # the verdict's rule, plan's minimum
    assert gpus_supported(5000, 1000, 0.9) == 5  # 5000 / 900 = 5.6
    assert gpus_supported(900, 1000, 0.9) == 1  # exactly one GPU's need
    assert gpus_supported(899, 1000, 0.9) == 0
    # DS-Analyzer's mix: half the samples at 10,000/s from cache, half at 1,000/s from storage
    assert cache_mix_rate(0.5, 10_000, 1_000) == pytest.approx(1 / (0.5 / 10_000 + 0.5 / 1_000))
    assert cache_mix_rate(0.5, 10_000, 1_000) == pytest.approx(1818.18, abs=0.01)
    assert cache_mix_rate(0.0, 10_000, 1_000) == pytest.approx(1_000)
    assert cache_mix_rate(1.0, 10_000, 1_000) == pytest.approx(10_000)
    # Little's law: 4 requests in flight, 2 ms each -> 2,000/s
    assert littles_law(4, 0.002) == pytest.approx(2000)
    with pytest.raises(ValueError):
        cache_mix_rate(1.5, 1, 1)
    with pytest.raises(ValueError):
        littles_law(1, 0)


def test_bad_input():
    with pytest.raises(ValueError):
        plan("h100", 0, "resnet50")
    with pytest.raises(ValueError):
        plan("h100", 1, "resnet50", mean_kb=0, kind=MLPERF)
    with pytest.raises(UserError, match="no consumption rate"):
        plan("h100", 1, "vgg16")  # no H100 row for VGG-16: give --rate


LAT = Latency(p50=2.0, p90=3, p99=5, p999=8, max=10, mean=2.5)


def _run(conc: int, rate: float, cache: str = "cold", p50: float = 2.0) -> Run:
    lat = LAT.model_copy(update={"p50": p50})
    return Run(source="files", order="shuffled", engine="threads", concurrency=conc, cache=cache, epoch=1,
               complete=True, eviction="drop_caches", resident_before=0.0 if cache == "cold" else 1.0,
               measures="storage" if cache == "cold" else "page-cache", samples=1000, bytes=110_000_000,
               seconds=1000 / rate, samples_per_s=rate, mb_per_s=rate * 0.11, latency_ms=lat, open_ms=lat,
               cpu=Cpu(system_busy_pct=50, iowait_pct=10, iobench_cores=0.5), disk=None, timeline=[])


def _result(runs: list[Run], ram: int = 16 * 10**9, verdict: Verdict | None = None) -> Result:
    return Result(
        created="2026-11-29T00:00:00+0000", command=["iobench", "run"],
        host=Host(hostname="h", kernel="6", cpus=2, ram_bytes=ram, ram_available_bytes=ram, python="3.11",
                  iobench="0", root=True),
        mount=Mount(path="/mnt/x", source="srv:/x", fstype="nfs4", options="rw", family="nfs", device=None,
                    read_ahead_kb=128, bdi="0:50", details={}, unread=[]),
        dataset=Dataset(path="/mnt/x/d", files=1000, bytes=110_000_000, mean_bytes=110_000, median_bytes=97_000,
                        made_by_iobench=True, params=None, fits_in_ram=True),
        settings=Settings(orders=["shuffled"], concurrency=[1, 4, 16], cache=["cold", "warm"], epochs=1, seed=0),
        remote=True, runs=runs, verdict=verdict)


def test_plan_against_a_measured_result_still_rising():
    # cold: 500/s at 1 reader, 1,800 at 4, 6,000 at 16 (still rising); warm 20,000/s from RAM
    r = _result([_run(1, 500), _run(4, 1800), _run(16, 6000, p50=2.0), _run(16, 20_000, "warm", p50=0.1)])
    p = plan("h100", 32, "resnet50", kind=MLPERF, result=r)
    m = p.measured
    assert m is not None and m.cache == "cold" and m.samples_per_s == 6000 and m.readers == 16
    assert m.gpus_supported == math.floor(6000 / (0.9 * H100_RN50)) == 3  # 6000 / 1607.1 = 3.7
    assert m.nodes_supported == 0  # 3 GPUs < one node of 8
    assert m.headroom == pytest.approx(6000 / (0.9 * 32 * H100_RN50))
    assert m.spare_samples_per_s == pytest.approx(6000 - 0.9 * 32 * H100_RN50)
    # cache what-if: C = 20,000 warm, S = 6,000 cold
    by_x = {w.fraction: w for w in m.cache_whatif if not w.label}
    assert by_x[0.0].samples_per_s == pytest.approx(6000) and by_x[1.0].samples_per_s == pytest.approx(20_000)
    assert by_x[0.5].samples_per_s == pytest.approx(1 / (0.5 / 20_000 + 0.5 / 6000))
    ram_row = next(w for w in m.cache_whatif if w.label)
    assert ram_row.fraction == pytest.approx(16e9 / (IMAGENET_FILES * 110_000))  # RAM over the dataset
    # the projection is ImageNet-scale, not the 1,000-file dataset the result measured
    assert ram_row.label == ("this client's RAM (16 GB) over ImageNet-scale (1,281,167 files, 141 GB), not the "
                             "measured dataset (1,000 files, 0.1 GB)")
    # Little's law: 6,000/s x 2 ms = 12 in flight at 16 readers; 32 readers -> 24 in flight / 2 ms = 12,000/s
    assert m.in_flight == pytest.approx(12.0)
    rows = {w.readers: w for w in m.concurrency_whatif}
    assert rows[16].samples_per_s == pytest.approx(6000) and rows[16].measured == pytest.approx(6000)
    assert rows[32].uncapped == pytest.approx(12_000) and rows[32].samples_per_s == pytest.approx(12_000)
    # capped at what the client reached from RAM (20,000/s): 64 readers would give 24,000
    assert rows[64].uncapped == pytest.approx(24_000) and rows[64].samples_per_s == pytest.approx(20_000)
    assert "warm" in m.cap_reason
    assert any("server's cache" in n for n in m.notes)
    text = " ".join(format_plan(p, width=300).split())  # wrapped lines joined
    for needle in ("51,429", "57,143", "5,657", "prediction", "Little's law", "F = 1 / (x/C + (1-x)/S)",
                   "headroom", "12,000", "ImageNet-scale (1,281,167 files, 141 GB), not the measured dataset"):
        assert needle in text, needle
    assert "over the dataset" not in text


@pytest.mark.parametrize("decode_us", [None, 2500.0])
def test_plan_with_a_result_takes_the_cpu_per_sample_measured_on_its_client(decode_us):
    cpu = {"cpu_us_per_sample": 3000.0 if decode_us else 40.0, "decode_cpu_us_per_sample": decode_us}
    r = _result([_run(1, 500), _run(4, 1800), _run(16, 6000).model_copy(update=cpu)])
    table = plan("h100", 32, "resnet50", kind=MLPERF)
    p = plan("h100", 32, "resnet50", kind=MLPERF, result=r)
    assert p.measured is not None and p.measured.cpu_us_per_sample == cpu["cpu_us_per_sample"]
    full = 32 * H100_RN50  # samples/s at AU 100%
    if decode_us:  # read + decode as measured: the table's decode figure is not used
        assert p.cpu_cores_demand == pytest.approx(full * 3000e-6)
        assert "read + decode + augment at 3,000.0 us of CPU per sample, measured on this client" in p.cpu_from
    else:  # reading as measured, decode + augment at the table's per-core rate
        assert p.cpu_cores_demand == pytest.approx(full * 40e-6 + table.cpu_cores_demand)
        assert "read at 40.0 us of CPU per sample, measured on this client at 16 threads (it did not decode)" \
            in p.cpu_from
    assert p.cpu_cores_minimum == pytest.approx(0.9 * p.cpu_cores_demand)
    text = format_plan(p, width=200)
    assert "CPU cores (measured on this client)" in text and "per GPU" in text and f"CPU cores: {p.cpu_from}." in text
    assert table.cpu_from is None and "CPU cores for decode + augment" in format_plan(table)
    plain = plan("h100", 32, "resnet50", kind=MLPERF, result=_result([_run(16, 6000)]))
    assert plain.cpu_from is None and plain.cpu_cores_demand == table.cpu_cores_demand  # none measured: the table's


def test_plan_caps_at_the_best_cold_rate_when_the_sweep_stopped_rising():
    r = _result([_run(1, 1000), _run(4, 3000), _run(16, 3100), _run(16, 20_000, "warm")])
    m = plan("h100", 1, "resnet50", kind=MLPERF, result=r).measured
    assert m is not None and m.samples_per_s == 3100 and m.cap == 3100
    assert all(w.samples_per_s <= 3100 for w in m.concurrency_whatif)
    assert "stopped rising" in m.cap_reason
    assert m.headroom == pytest.approx(3100 / (0.9 * H100_RN50))


def test_plan_without_a_page_cache_rate_caps_at_the_highest_rate_seen():
    # a FUSE mount whose client keeps no page cache: the warm re-read measured the storage again
    warm = _run(16, 2500, "warm").model_copy(update={"measures": "storage"})
    r = _result([_run(1, 500), _run(4, 1800), _run(16, 2400), warm])
    m = plan("h100", 1, "resnet50", kind=MLPERF, result=r).measured
    assert m is not None and m.warm_samples_per_s is None and m.cache_whatif == []
    assert m.cap == 2500 and "highest rate" in m.cap_reason
    assert [w.samples_per_s for w in m.concurrency_whatif][:2] == pytest.approx([2400, 2500])  # 4,800 capped
    assert any("no cache rate C" in n for n in m.notes)


def test_plan_uses_the_verdict_only_for_the_same_consumer():
    v = Verdict(text="t", gpus_fed=2, gpus_fed_confirmed=True, rate_per_gpu=H100_RN50, au_target=0.9,
                best_samples_per_s=3100, best_mb_per_s=341, best_concurrency=16, saturates_at=4, order="shuffled")
    r = _result([_run(1, 1000), _run(16, 3100)], verdict=v)
    assert plan("h100", 4, "resnet50", kind=MLPERF, result=r).measured.verdict_gpus_fed == 2
    assert plan("h200", 4, "resnet50", result=r).measured.verdict_gpus_fed is None


def test_plan_with_only_warm_runs_says_so():
    m = plan("h100", 1, "resnet50", kind=MLPERF, result=_result([_run(4, 20_000, "warm")])).measured
    assert m is not None and m.cache == "warm" and not m.cache_whatif and not m.concurrency_whatif
    assert any("page cache" in n for n in m.notes)
    assert plan("h100", 1, "resnet50", kind=MLPERF, result=_result([])).measured is None


def test_cache_whatif_of_the_measured_dataset_says_so():
    r = _result([_run(16, 6000), _run(16, 20_000, "warm")])
    m = plan("h200", 1, "resnet50", dataset_files=1000, result=r).measured
    assert next(w for w in m.cache_whatif if w.label).label == ("this client's RAM (16 GB) over the measured dataset "
                                                                "(1,000 files, 0.1 GB)")


@pytest.mark.parametrize(("gpu", "kind", "rate"), [("h200", "measured", 4677.3), ("a100", "published", 2470.0),
                                                   ("v100", "published", 1200.0), ("h100", MLPERF, H100_RN50)])
def test_without_a_kind_each_gpu_takes_its_first_kind(gpu, kind, rate):
    """The bug: only h200 planned without --rate-kind ("no measured rate for resnet50 on h100", exit 2)."""
    p = plan(gpu, 8, "resnet50")
    assert (p.rate_kind, p.rate_per_gpu) == (kind, rate)
    assert f"({kind} rate)" in format_plan(p, width=300)
    with pytest.raises(UserError, match=r"^no measured rate for resnet50 on v100 \(resnet50 on v100 has: published\)"):
        plan("v100", 8, "resnet50", kind="measured")  # a kind asked for never falls back


def test_a_plan_says_when_other_gpus_take_other_kinds():
    """The bug: `plan` said 64 A100s need more than 64 H100s: a published A100 rate beside an emulated H100 one."""
    a100, h100, h200 = (plan(g, 64, "resnet50") for g in ("a100", "h100", "h200"))
    assert a100.kind_note == ("resnet50's rate is of another kind on other GPUs without --rate-kind (measured on h200; "
                              "mlperf-storage on h100): their plans do not compare with this published one; compare "
                              "with h100 at --rate-kind mlperf-storage")
    assert h100.kind_note is not None and "(measured on h200; published on a100, v100, v100-32gb)" in h100.kind_note
    assert h100.kind_note.endswith("compare with a100 at --rate-kind mlperf-storage")
    assert h200.kind_note is not None and h200.kind_note.endswith("none of them has a rate of a kind h200 has")
    text = " ".join(format_plan(a100, width=300).split())
    assert f"warning: {a100.kind_note}" in text
    # one kind on every GPU of the model, or a given rate: nothing to say
    assert plan("h100", 8, "unet3d").kind_note is None and plan("a100", 8, "resnet50", rate=100).kind_note is None
    # at one kind the faster GPU asks more, as it should
    assert plan("h100", 64, "resnet50", kind=MLPERF).minimum_samples_per_s > plan(
        "a100", 64, "resnet50", kind=MLPERF).minimum_samples_per_s


@pytest.mark.parametrize(("gpu", "model", "size", "says"), [
    ("h100", "unet3d", 146_600_628, "unet3d's sample in MLPerf Storage v3.0: record_length_bytes of "
                                    "mlcommons/storage configs/dlio/workload/unet3d_*.yaml at 1833c96, 146,600,628 B, "
                                    "stdev 68,341,808 B"),
    ("a100", "CosmoFlow", 2_828_486, "cosmoflow_*.yaml at 1833c96, 2,828,486 B"),
    ("mi355", "retinanet", 322_957, "retinanet_*.yaml at 1833c96, 322,957 B, every sample that size"),
    ("h200", "resnet50", 110_000, "ImageNet-1k's mean"),
])
def test_the_sample_size_is_the_models_unless_given(gpu, model, size, says):
    """The bug: `plan --model unet3d` kept ImageNet's 110 kB sample (unet3d's are ~140 MB)."""
    p = plan(gpu, 64, model)
    assert p.mean_bytes == size and says in p.mean_source
    assert p.demand_mb_per_s == pytest.approx(64 * p.rate_per_gpu * size / 1e6)
    given = plan(gpu, 64, model, mean_kb=200)
    assert (given.mean_bytes, given.mean_source) == (200_000, "given")
    # a result's measured mean stands in for ImageNet's, and for the model's own only where it ran that model
    r = _result([_run(16, 6000)])
    r = r.model_copy(update={"dataset": r.dataset.model_copy(update={"mean_bytes": 150_000.0})})
    assert plan(gpu, 1, model, result=r).mean_bytes == (150_000 if size == 110_000 else size)
    ran = r.model_copy(update={"settings": r.settings.model_copy(update={"model": model.lower()})})
    assert plan(gpu, 1, model, result=ran).mean_source == "the measured dataset's mean (1,000 files)"


def test_plan_cli_takes_the_first_kind_and_the_models_sample(tmp_path):
    """The real CLI, as a buyer runs it."""
    env = {**__import__("os").environ, "COLUMNS": "200"}
    h100 = " ".join(iobench("plan", "--gpu", "h100", "--gpus", "64", "--model", "resnet50", check=True,
                            env=env).stdout.split())
    assert "H100 training resnet50 at 1,785.7 samples/s per GPU (mlperf-storage rate)" in h100
    assert "per-GPU rate (mlperf-storage): 1,785.7 samples/s, mlcommons/storage at commit 1833c96" in h100
    assert "warning: resnet50's rate is of another kind on other GPUs without --rate-kind" in h100
    a100 = " ".join(iobench("plan", "--gpu", "a100", "--gpus", "64", "--model", "resnet50", check=True,
                            env=env).stdout.split())
    assert "A100 training resnet50 at 2,470 samples/s per GPU (published rate)" in a100
    assert "their plans do not compare with this published one; compare with h100 at --rate-kind mlperf-storage" in a100
    unet = " ".join(iobench("plan", "--gpu", "h100", "--gpus", "64", "--model", "unet3d", check=True,
                            env=env).stdout.split())
    assert "x 146,600.6 kB mean (unet3d's sample in MLPerf Storage v3.0" in unet
    # 0.9 x 64 x 7/0.323 samples/s x 146.6 MB: 183,000 MB/s, not ImageNet's 137
    assert f"│ MB/s │ {0.9 * 64 * 7 / 0.323 * 146.600628:,.0f} │" in unet


def test_one_kind_keeps_faster_gpus_asking_more():
    a100 = plan("a100", 32, "resnet50", kind=MLPERF)
    h100 = plan("h100", 32, "resnet50", kind=MLPERF)
    assert h100.minimum_samples_per_s > a100.minimum_samples_per_s
    assert plan("a100", 32, "resnet50", kind="published").rate_per_gpu == 2470.0
    with pytest.raises(UserError, match="no published rate for resnet50 on h100"):
        plan("h100", 32, "resnet50", kind="published")


def test_a_given_rate_is_a_gpu_consuming_it_and_has_no_kind():
    text = format_plan(plan("h200", 32, "resnet50", rate=100))
    assert "each a GPU consuming 100 samples/s (given rate)" in text and "per-GPU rate (given)" in text
    r = _result([_run(16, 6000)])
    fed = " ".join(format_plan(plan("h200", 32, "resnet50", rate=100, result=r), width=300).split())
    assert "GPUs consuming 100 samples/s it keeps at AU >= 90% (predicted, given rate)" in fed and "H200" not in fed
    assert "H200" not in text and "training resnet50" not in text
    with pytest.raises(UserError, match=r"^--rate and --rate-kind do not go together"):
        plan("h200", 32, "resnet50", rate=100, kind="measured")


def test_the_kind_is_printed_beside_every_rate():
    r = _result([_run(1, 500), _run(16, 6000), _run(16, 20_000, "warm", p50=0.1)])
    text = " ".join(format_plan(plan("h100", 32, "resnet50", kind=MLPERF, result=r), width=300).split())
    for needle in ("H100 training resnet50 at 1,785.7 samples/s per GPU (mlperf-storage rate)",
                   "per-GPU rate (mlperf-storage): 1,785.7 samples/s, mlcommons/storage",
                   "at 1,785.7 samples/s each (mlperf-storage rate;",
                   "H100 GPUs it keeps at AU >= 90% (predicted, mlperf-storage rate)",
                   "GPUs fed (predicted, mlperf-storage rate)"):
        assert needle in text, needle
    assert "this comparison mixes kinds" not in text  # the result has no per-GPU rate of its own


def _with_rate(r: Result, rate: float, source: str, kind: str | None) -> Result:
    settings = r.settings.model_copy(update={"gpu": "h200", "model": "resnet50", "rate_per_gpu": rate,
                                             "rate_source": source, "rate_kind": kind})
    return r.model_copy(update={"settings": settings})


def test_rate_kind_of_a_result_new_and_old():
    r = _result([])
    assert rate_kind_of(r) is None
    assert rate_kind_of(_with_rate(r, 4677.3, "measured on one NVIDIA H200", "measured")) == "measured"
    assert rate_kind_of(_with_rate(r, 100, "given with --rate", None)) == "given"
    assert rate_kind_of(_with_rate(r, H100_RN50, "mlperf-storage-emulated: mlcommons/storage ...", None)) == MLPERF


def test_mixed_kinds():
    assert mixed_kinds([]) is None
    assert mixed_kinds([("a", 4677.3, "measured"), ("b", 2206.2, "measured")]) is None  # one kind
    assert mixed_kinds([("a", 1000.0, "given"), ("b", 1000.0, "measured")]) is None  # the same figure
    assert mixed_kinds([("a", H100_RN50, MLPERF), ("b", None, None), ("c", 10.0, None)]) is None  # unknown left out
    text = mixed_kinds([("this plan", H100_RN50, MLPERF), ("the result", 4677.3, "measured")])
    assert text == ("this comparison mixes kinds of per-GPU rate (measured, mlperf-storage): this plan: 1,785.7 "
                    "samples/s per GPU (mlperf-storage); the result: 4,677.3 samples/s per GPU (measured); GPU counts "
                    "taken at one rate do not compare with counts taken at the other (use one --rate-kind for both)")


def test_plan_warns_when_its_kind_differs_from_the_results():
    r = _with_rate(_result([_run(1, 500), _run(16, 6000)]), 4677.3, "measured on one NVIDIA H200", "measured")
    m = plan("h100", 32, "resnet50", kind=MLPERF, result=r).measured
    assert m.kind_warning is not None
    assert "this plan (H100 training resnet50 at 1,785.7 samples/s (mlperf-storage rate)): 1,785.7" in m.kind_warning
    assert "the result (nfs4 at /mnt/x, h200 on resnet50): 4,677.3 samples/s per GPU (measured)" in m.kind_warning
    text = " ".join(format_plan(plan("h100", 32, "resnet50", kind=MLPERF, result=r)).split())
    assert "warning: this comparison mixes kinds" in text
    assert plan("h200", 32, "resnet50", result=r).measured.kind_warning is None  # measured on both sides
    assert plan("h200", 1, "resnet50", rate=4677.3, result=r).measured.kind_warning is None  # its own figure back
    old = _with_rate(r, H100_RN50, "mlperf-storage-emulated: mlcommons/storage ...", None)  # before rate_kind
    assert "(mlperf-storage)" in plan("h200", 32, "resnet50", result=old).measured.kind_warning


def test_plan_cli_kinds(tmp_path):
    """The real CLI: an asked kind or an error naming the kinds a GPU has, the warning with a result."""
    proc = iobench("plan", "--gpu", "a100", "--gpus", "32", "--model", "resnet50", "--rate-kind", "measured")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "no measured rate for resnet50 on a100 (resnet50 on a100 has: published, mlperf-storage)" in proc.stderr
    proc = iobench("plan", "--gpu", "h100", "--gpus", "32", "--model", "resnet50", "--rate", "100",
                   "--rate-kind", "measured")
    assert proc.returncode == 2 and "--rate and --rate-kind do not go together" in proc.stderr
    r = _with_rate(_result([_run(1, 500), _run(16, 6000)]), 4677.3, "measured on one NVIDIA H200", "measured")
    r.save(tmp_path / "result.json")
    out = iobench("plan", "--gpu", "h100", "--gpus", "32", "--model", "resnet50", "--rate-kind", "mlperf-storage",
                  "--result", str(tmp_path), check=True, env={**__import__("os").environ, "COLUMNS": "200"}).stdout
    assert "(mlperf-storage rate)" in out and "warning: this comparison mixes kinds of per-GPU rate" in out
    out = iobench("plan", "--gpu", "h200", "--gpus", "32", "--model", "resnet50", "--result", str(tmp_path),
                  check=True).stdout
    assert "(measured rate)" in out and "this comparison mixes kinds" not in out
    g = iobench("gpus", "--rate-kind", "published", check=True).stdout
    assert "│ published" in g and "│ measured" not in g and "│ mlperf-storage" not in g and "gpu_rates_h200.json" in g


def test_the_in_flight_a_job_needs_is_the_minimum_times_the_latency_the_sentence_names():
    """Little's law in plan's words: "X samples/s x W ms = L reads at once": L is X x W for the W printed (the p50
    of the point the storage figure comes from: here fio's, not the loaders' best run, whose latency differs)."""
    golden = Path(__file__).parent / "data" / "golden" / "local.json"
    proc = iobench("plan", "--gpu", "h200", "--gpus", "8", "--model", "resnet50", "--result", str(golden),
                   env={**os.environ, "COLUMNS": "250"})
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"in flight for the minimum: ([\d,]+) samples/s x ([\d.]+) ms = ([\d,]+) reads at once", proc.stdout)
    assert m, proc.stdout
    x, w_ms, got = (float(g.replace(",", "")) for g in m.groups())
    assert abs(x * w_ms / 1000 - got) <= 0.5 + x * 0.0005 / 1000, (x, w_ms, got)  # the printed figures, rounded
