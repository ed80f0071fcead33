"""The verdict's rules on records built by hand: the arithmetic and the wording are what is tested here (the same
verdict on real file systems with a known limit is tests/test_verdict_limits.py)."""

import re

import pytest

from iobench.answer.client import verdict
from iobench.answer.rules import au_cell, au_fraction, au_pct, floor_to, gpus_for, mark_validity, pct, stats, times
from iobench.answer.words import gpus_short, reader_unit, readers
from iobench.result import Baseline, Cpu, Dataset, Host, Latency, Metadata, Mount, RawPoint, Result, Run, Settings

LAT = Latency(p50=1, p90=2, p99=3, p999=4, max=5, mean=1.5)


def _run(conc: int, rate: float, cache: str = "cold", cores: float = 0.5, measures: str = "storage",
         samples: int = 4000, **extra) -> Run:
    run = Run(source="files", order="shuffled", engine="threads", concurrency=conc, cache=cache, epoch=1,
              complete=True, eviction="drop_caches", resident_before=0.0, measures=measures, samples=samples,
              bytes=samples * 110_000, seconds=samples / rate, samples_per_s=rate, mb_per_s=rate * 0.11,
              latency_ms=LAT, open_ms=LAT, cpu=Cpu(system_busy_pct=50, iowait_pct=10, iobench_cores=cores),
              disk=None, timeline=[]).model_copy(update=extra)
    return mark_validity(run)


def _fio(conc: int, rate: float, cores: float = 0.3) -> RawPoint:
    return RawPoint(concurrency=conc, cache="cold", samples=20_000, bytes=20_000 * 110_000, seconds=20_000 / rate,
                    samples_per_s=rate, mb_per_s=rate * 0.11, latency_ms=LAT, setup_s=0.1, program="",
                       cpu=Cpu(system_busy_pct=50, iowait_pct=10, iobench_cores=cores))


def _result(runs: list[Run], fstype: str = "xfs", metadata: list[Metadata] | None = None, fio: list | None = None,
            usable: float = 2.0, **settings) -> Result:
    return Result(
        created="2026-11-29T00:00:00+0000", command=["iobench", "run"],
        host=Host(hostname="h", kernel="6", cpus=2, cpus_usable=usable, ram_bytes=2**34, ram_available_bytes=2**34,
                  python="3.11", iobench="0", root=True),
        mount=Mount(path="/mnt/x", source="/dev/loop0", fstype=fstype, options="rw", family="local", device="loop0",
                    read_ahead_kb=128, bdi="7:0", details={}, unread=[]),
        dataset=Dataset(path="/mnt/x/d", files=4000, bytes=440_000_000, mean_bytes=110_000, median_bytes=97_000,
                        made_by_iobench=True, params=None, fits_in_ram=True),
        settings=Settings(orders=["shuffled"], concurrency=[1, 4, 16], cache=["cold"], epochs=1, seed=0,
                          **settings),
        remote=fstype.startswith("fuse"), runs=runs, metadata=metadata or [],
        baseline=Baseline(tool="fio", tool_version="fio-3.33", points=fio) if fio else None)


H200 = dict(rate_per_gpu=1000.0, model="resnet50", gpu="h200", rate_kind="measured")


def _training(gpus: int, au: float, delivered: float, cores: float = 0.5) -> Run:
    return _run(4, delivered, cores=cores, engine="dataloader", workers=4, batch_size=16, gpus=gpus, au=au,
                au_min=au, delivered_per_s=delivered)


def test_numbers_never_cross_a_threshold_by_rounding():
    assert au_pct(0.8964) == "89.6%" and au_pct(0.89999) == "89.9%" and au_pct(0.9) == "90.0%"
    assert au_cell(0.8964) == "89.6%" and au_cell(0.89999) == "89.9%" and au_cell(None) == "-"
    assert au_fraction(0.5879) == 0.587 and au_fraction(0.89999) == 0.899
    assert floor_to(0.29, 2) == 0.29 and pct(0.29) == "29%" and pct(0.896) == "89%" and times(0.996) == "0.99x"
    assert gpus_for(4209.57, 4677.3, 0.9) == 1 and gpus_for(4209.5, 4677.3, 0.9) == 0


def test_storage_is_the_best_of_fio_and_the_loaders_and_saturation_point():
    warm = _run(16, 50_000, "warm", 1.0, "page-cache", samples=40_000)
    r = _result([_run(1, 1000), _run(4, 3000), _run(16, 3100), warm], fio=[_fio(16, 3050)])
    v = verdict(r)
    assert (v.best_samples_per_s, v.best_concurrency, v.saturates_at, v.still_rising) == (3100, 16, 4, False)
    assert v.storage_samples_per_s == 3100 and v.storage_from == "threads, 16 threads"
    assert "saturating at ~4 threads" in v.text and "still rising" not in v.text
    assert "Warm (from the page cache): 50,000 samples/s" in v.text
    v = verdict(_result([_run(1, 1000), _run(4, 3000)], fio=[_fio(4, 9000)]))
    assert v.storage_samples_per_s == 9000 and v.storage_from == "fio, 4 jobs" and not v.storage_is_lower_bound


def test_still_rising_has_no_saturation_point_and_is_not_the_storage():
    v = verdict(_result([_run(1, 1000), _run(4, 3000)], **H200))
    assert v.saturates_at is None and v.still_rising and "still rising at the most threads" in v.text
    assert v.limit == "input-pipeline" and "the storage's own limit was not reached" in v.text


def test_a_dip_in_the_middle_of_the_sweep_is_not_a_rise():
    """sshfs at 8 ms once gave 234, 188 and 213 files/s at 16, 32 and 64 readers: 64 gave > 10% more than 32 but less
    than 16, so more readers bought nothing; a sweep that rises throughout still rises."""
    v = verdict(_result([_run(16, 234), _run(32, 188), _run(64, 213)], **H200))
    assert not v.still_rising and v.saturates_at == 16 and "still rising" not in v.text
    assert verdict(_result([_run(16, 100), _run(32, 104), _run(64, 115)], **H200)).still_rising


def test_storage_limit_needs_the_loaders_at_the_storage_figure_and_no_more_from_more_readers():
    v = verdict(_result([_run(1, 1000), _run(4, 2500), _run(16, 2550)], fio=[_fio(16, 2500)], **H200))
    assert (v.limit, v.storage_gpus_fed, v.client_gpus_fed, v.gpus_fed_confirmed) == ("storage", 2, 2, False)
    assert v.pipeline_samples_per_s == 2550 and v.storage_samples_per_s == 2550
    assert v.answer == ("xfs at /mnt/x: the storage feeds 2 H200 on resnet50 (2,550 samples/s cold, one client); "
                        "this 2-core client feeds 2: the storage is the limit.")


def test_fio_well_above_the_loaders_names_the_input_pipeline_not_the_storage():
    v = verdict(_result([_run(1, 1000), _run(4, 5383), _run(16, 5400)], fio=[_fio(4, 9500)], **H200))
    assert v.limit == "input-pipeline" and v.storage_samples_per_s == 9500 and v.pipeline_samples_per_s == 5400
    assert v.storage_gpus_fed == 10 and v.client_gpus_fed == 6  # floor(9500 / 900); floor(min(9500, 5400) / 900)
    assert v.answer.startswith("xfs at /mnt/x: the storage feeds 10 H200 on resnet50 (9,500 samples/s cold")
    assert "this 2-core client feeds 6: its input pipeline is the limit" in v.answer
    assert "it delivered 56% of what the storage gave" in v.text


def test_a_client_that_feeds_none_never_makes_the_storage_read_as_zero():
    """The buyer's case: a 2-core client whose CPU feeds no GPU, on a storage that gives two GPUs' worth."""
    runs = [_run(1, 900, cores=1.8), _run(4, 1100, cores=1.9), _run(16, 1150, cores=1.95),
            _training(1, 0.62, 620, cores=1.9)]
    v = verdict(_result(runs, fio=[_fio(4, 2400, cores=0.5)], **H200))
    assert (v.storage_gpus_fed, v.client_gpus_fed, v.limit) == (2, 0, "client-cpu")
    assert v.answer.startswith("xfs at /mnt/x: the storage feeds 2 H200 on resnet50 (2,400 samples/s cold")
    assert v.answer.endswith("this 2-core client feeds 0: its CPU is the limit.") and len(v.answer) < 200
    assert any(line.startswith("At the ") and "cores of a client for its input pipeline" in line for line in v.evidence)


def test_client_cpu_is_judged_against_the_cores_iobench_may_use():
    runs = [_run(1, 3000, cores=0.9), _run(4, 6607, cores=0.95), _run(16, 6500, cores=0.97)]
    v = verdict(_result(runs, fio=[_fio(4, 10_870, cores=0.9)], usable=1.0, **H200))
    assert v.limit == "client-cpu" and v.cpu_saturated and v.storage_samples_per_s == 10_870
    assert v.storage_is_lower_bound  # fio too used nearly the one core
    assert "iobench used 0.95 of the 1 cores it may use" in v.text and "feeds at least 12 H200" in v.answer
    assert verdict(_result(runs, fio=[_fio(4, 10_870, cores=0.9)], usable=2.0, **H200)).limit != "client-cpu"


def test_gpus_fed_confirmed_by_training_runs():
    runs = [_run(4, 2500), _run(16, 2550), _training(2, 0.95, 1900), _training(3, 0.80, 2400)]
    v = verdict(_result(runs, fio=[_fio(16, 2600)], **H200))
    assert (v.client_gpus_fed, v.gpus_fed, v.gpus_fed_confirmed) == (2, 2, True)
    assert v.pipeline_samples_per_s == 2400 and "a training run with 3 GPUs x 4 workers, AU 80.0%" in v.text


def test_one_starved_gpu_below_what_the_storage_gives():
    v = verdict(_result([_run(4, 5000), _run(16, 5000), _training(1, 0.70, 700)], **H200))
    assert (v.client_gpus_fed, v.gpus_fed_confirmed, v.limit) == (0, True, "input-pipeline")
    assert v.storage_gpus_fed == 5 and "this 2-core client feeds 0" in v.answer


def test_gpus_asked_get_a_yes_or_no_first_for_the_storage_then_the_client():
    runs = [_run(4, 2500), _run(16, 2550)]
    yes = verdict(_result(runs + [_training(2, 0.95, 1900)], gpus=2, **H200))
    assert (yes.gpus_asked, yes.asked_fed, yes.asked_by, yes.asked_client_fed, yes.asked_confirmed, yes.limit) == \
        (2, True, "storage", True, True, "gpu")
    assert yes.answer == ("Yes: the storage feeds 2 H200 on resnet50 (2 need 1,800 samples/s; it gave 2,550 samples/s "
                          "cold); this client fed them (a training run at 2: AU 95.0%).")
    no = verdict(_result(runs, gpus=64, **H200))
    assert (no.gpus_asked, no.asked_fed, no.asked_confirmed, no.client_gpus_fed) == (64, False, False, 2)
    assert no.demand_samples_per_s == 57_600
    assert no.answer.startswith("No: 64 H200 on resnet50 need 57,600 samples/s; the storage gave 2,550 samples/s cold "
                                "(enough for 2)")
    # the storage has enough, this client starved them: the storage's answer is the one asked (and --check's)
    starved = verdict(_result(runs + [_training(2, 0.40, 800, cores=1.9)], gpus=2, **H200))
    assert (starved.asked_fed, starved.asked_client_fed) == (True, False)
    assert starved.answer.startswith("Yes: the storage feeds 2 H200") and "AU 40.0%" in starved.answer


def test_a_given_rate_is_not_described_as_a_known_gpu():
    s = Settings(orders=[], concurrency=[1], cache=["cold"], epochs=1, seed=0, rate_per_gpu=100.0, rate_kind="given")
    assert gpus_short(s, "3", 3) == "3 GPUs of 100 samples/s"
    v = verdict(_result([_run(4, 2500), _run(16, 2550)], rate_per_gpu=100.0, rate_kind="given"))
    assert "the storage feeds 28 GPUs of 100 samples/s" in v.answer and "H200" not in v.text


def test_too_short_runs_are_marked_and_give_no_gpu_count():
    runs = [_run(4, 3650, samples=300, engine="dataloader", workers=4, batch_size=256)]
    assert not runs[0].valid and "per reader" in (runs[0].invalid_reason or "")
    v = verdict(_result(runs, engine="dataloader", batch_size=256, **H200))
    assert v.client_gpus_fed is None and v.storage_gpus_fed is None and v.limit is None
    assert v.text.startswith("No valid measurement") and "--files" in v.text
    short = _run(16, 40_000, samples=4000)  # 0.1 s
    assert not short.valid and "under 0.5 s" in (short.invalid_reason or "")


def test_the_advised_files_meet_every_rule_at_the_rates_measured():
    """Warm epochs at 13,600 samples/s: 3,000 files last 0.22 s; the advice must give epochs of 0.5 s and more."""
    runs = [_run(4, 13_600, "warm", measures="page-cache", samples=3000, engine="dataloader", workers=4,
                 batch_size=32)]
    assert not runs[0].valid and "under 0.5 s" in (runs[0].invalid_reason or "")
    r = _result(runs, engine="dataloader", batch_size=32, **H200)
    r.dataset = r.dataset.model_copy(update={"files": 3000})
    advised = int(re.search(r"--files ([\d,]+) or more", verdict(r).text).group(1).replace(",", ""))
    assert advised / 13_600 >= 2 * 0.5 and advised >= 10 * 32 * 16  # the seconds rule with room; 10 batches a reader


def test_cold_run_whose_eviction_failed_is_not_a_storage_figure():
    v = verdict(_result([_run(4, 40_000, measures="page-cache", samples=40_000), _run(1, 900)]))
    assert v.best_samples_per_s == 900 and "1 run(s) were too short, not cold" in v.text


def _meta(projected: float) -> Metadata:
    return Metadata(cache="cold", eviction="drop_caches", dirs=8, files=10_000, list_s=projected * 10_000 / 1_281_167,
                    stat_files=10_000, stat_per_s=1000, stat_ms=LAT, open_close_files=10_000, open_close_per_s=900,
                    open_close_ms=LAT, scale_files=1_281_167, projected_list_s=projected)


def test_start_up_cost_is_mentioned_past_a_minute():
    assert "Start-up" not in verdict(_result([_run(1, 1000)], metadata=[_meta(30)])).text
    v = verdict(_result([_run(1, 1000)], metadata=[_meta(180)]))
    assert "Start-up: listing 1,281,167 files as ImageFolder does would take ~3.0 min" in v.text


def test_an_au_within_the_repeats_spread_of_the_target_is_borderline_with_its_range():
    """Three repeats 10% apart, a training run at 1 GPU at AU 87.9% against 90%: not a flat 0."""
    repeats = [_run(4, 1000, repeat=k, engine="dataloader", workers=4, batch_size=16) for k in range(3)]
    repeats = [r.model_copy(update={"samples_per_s": x}) for r, x in zip(repeats, (950, 1000, 1050), strict=True)]
    r = _result([*repeats, _training(1, 0.879, 879)], engine="dataloader", batch_size=16, **H200)
    r.stats = stats(r)
    v = verdict(r)
    assert v.borderline and v.client_gpus_range == [0, 1] and v.client_gpus_fed == 0
    assert "this 2-core client feeds 0-1" in v.answer
    said = "Borderline (0-1): the training run at 1 (4 workers each) reached AU 87.9% against the 90% target"
    assert any(line.startswith(said) for line in v.evidence)
    one = verdict(_result([repeats[1], _training(1, 0.879, 879)], engine="dataloader", batch_size=16, **H200))
    assert not one.borderline and one.client_gpus_fed == 0  # one run: no range claimed, but the line is said
    said = "Near the line: the training run at 1 (4 workers each) reached AU 87.9%"
    assert any(line.startswith(said) for line in one.evidence)


SCENARIOS = {
    "storage": ([_run(1, 1000), _run(4, 2500), _run(16, 2550)], [_fio(16, 2500)], {}, 2.0),
    "pipeline": ([_run(1, 1000), _run(4, 5383), _run(16, 5400)], [_fio(4, 9500)], {}, 2.0),
    "cpu": ([_run(4, 6607, cores=0.95), _run(16, 6500, cores=0.97)], [_fio(4, 10_870)], {}, 1.0),
    "rising": ([_run(1, 1000), _run(4, 3000)], [], {}, 2.0),
    "asked-yes": ([_run(4, 2500), _run(16, 2550), _training(2, 0.95, 1900)], [], {"gpus": 2}, 2.0),
    "asked-no": ([_run(4, 2500), _run(16, 2550)], [], {"gpus": 64}, 2.0),
    "confirmed": ([_run(4, 2500), _run(16, 2550), _training(2, 0.95, 1900), _training(3, 0.80, 2400)], [], {}, 2.0),
    "invalid": ([_run(4, 3650, samples=300, engine="dataloader", workers=4, batch_size=256)], [], {}, 2.0),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_text_and_fields_say_the_same(name):
    runs, fio, asked, usable = SCENARIOS[name]
    v = verdict(_result(runs, fio=fio or None, usable=usable, **H200, **asked))
    lines = v.text.splitlines()
    assert lines[0] == v.answer and len(v.answer) < 200
    assert all(line in lines for line in v.evidence) and len(set(lines)) == len(lines)  # no line said twice
    if v.client_gpus_fed is None:
        assert v.limit is None and v.storage_gpus_fed is None and not re.search(r"feeds \d+ ", v.text)
        return
    assert v.gpus_fed == v.client_gpus_fed
    if v.gpus_asked is None:
        least = "at least " if v.storage_is_lower_bound else ""
        assert f"the storage feeds {least}{v.storage_gpus_fed} H200" in v.answer
        assert f"client feeds {v.client_gpus_fed}" in v.answer
    else:
        assert v.answer.startswith("Yes:" if v.asked_fed else "No:")
        assert (f"the storage feeds {v.gpus_asked} H200" in v.answer) == bool(v.asked_fed)
    words = {"storage": "the storage is the limit", "client-cpu": "its CPU is the limit",
             "input-pipeline": "its input pipeline is the limit"}
    if v.limit in words:
        assert words[v.limit] in v.answer
    else:
        assert v.limit == "gpu" and v.answer.startswith("Yes:")
    assert ("still rising" in v.text) == v.still_rising
    assert (f"saturating at ~{v.saturates_at} " in v.text) == (v.saturates_at is not None)
    assert f"Storage: {v.storage_samples_per_s:,.0f} samples/s cold ({v.storage_from}" in v.text
    assert ("at least" in v.text) == v.storage_is_lower_bound
    assert f"delivered {v.pipeline_samples_per_s:,.0f} samples/s" in v.text


def test_several_epochs_give_the_steady_state_mean_not_the_best():
    runs = [_run(4, 6000, epoch=1), _run(4, 4000, epoch=2), _run(4, 4200, epoch=3)]  # the first epoch is warm-up
    v = verdict(_result(runs))
    assert v.storage_samples_per_s == 4100 and v.best_samples_per_s == 4100


def test_repeats_report_mean_spread_and_flag_over_five_percent():
    stable = [_run(4, 4000, repeat=0), _run(4, 4100, repeat=1), _run(4, 4050, repeat=2)]
    r = _result(stable)
    r.stats = stats(r)
    (st,) = r.stats
    assert (st.repeats, st.mean_samples_per_s, st.unstable) == (3, 4050, False)
    assert st.spread == pytest.approx(0.0247, abs=1e-3)
    v = verdict(r)
    assert not v.unstable and "spread 2.4% over 3 repeats." in v.text
    shaky = [_run(4, 4000, repeat=0), _run(4, 4300, repeat=1)]
    r = _result(shaky)
    r.stats = stats(r)
    v = verdict(r)
    assert v.unstable and r.stats[0].unstable and "spread 7.3% over 2 repeats: unstable" in v.text


def test_fio_alone_with_runs_too_short_says_how_many_files_would_count():
    short = _fio(4, 12_000).model_copy(update={"files": 3000, "seconds": 0.25})
    r = _result([], fio=[short])
    r.settings = r.settings.model_copy(update={"replay": False})
    v = verdict(r)
    assert v.storage_samples_per_s is None and v.text.startswith("fio baseline only, and no storage figure")
    assert "--files 12,000 or more" in v.answer


def test_one_reader_count_needs_fio_to_show_the_plateau_before_the_storage_is_named():
    one = [_run(8, 2500)]
    assert verdict(_result(one, **H200)).limit == "input-pipeline"  # more readers were never tried
    v = verdict(_result(one, fio=[_fio(4, 2550), _fio(8, 2600)], **H200))
    assert v.limit == "storage" and "fio saturates at ~4 jobs" in v.text


def test_the_reader_kind_is_carried_and_read_back_from_the_engine():
    threads, loader = _run(16, 3000), _run(4, 3000, engine="dataloader", workers=0, batch_size=16, concurrency=1)
    assert (threads.reader, loader.reader) == ("threads", "workers")
    assert (readers(threads), readers(loader), readers(_training(2, 0.9, 1800))) == \
        ("16 threads", "0 DataLoader workers", "2 GPUs x 4 workers")
    assert (reader_unit(threads), reader_unit(loader)) == ("threads", "DataLoader workers")
    r = _result([threads, loader])
    r.settings = Settings(orders=["shuffled"], concurrency=[0, 2, 8], engine="dataloader", cache=["cold"], epochs=1,
                          seed=0)
    assert r.settings.reader == "workers" and r.settings.fio_jobs(4) == [1, 2]  # workers=0 reads like one job
    stored = r.model_dump(mode="json", by_alias=True)
    assert stored["settings"]["reader"] == "workers" and stored["runs"][1]["reader"] == "workers"
    stored["runs"][1]["reader"] = "threads"  # a stale copy is derived again, not kept
    del stored["settings"]["reader"], stored["runs"][0]["reader"]  # files written before the field still load
    back = Result.model_validate(stored)
    assert [x.reader for x in back.runs] == ["threads", "workers"] and back.settings.reader == "workers"
