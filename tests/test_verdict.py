"""The one-line verdict from measured records (built here by hand: the arithmetic is what is tested)."""

from iobench.result import Cpu, Dataset, Host, Latency, Metadata, Mount, Result, Run, Settings
from iobench.verdict import verdict

LAT = Latency(p50=1, p90=2, p99=3, p999=4, max=5, mean=1.5)


def _run(conc: int, rate: float, cache: str = "cold", cores: float = 0.5, measures: str = "storage") -> Run:
    return Run(source="files", order="shuffled", engine="threads", concurrency=conc, cache=cache, epoch=1,
               complete=True, eviction="drop_caches", resident_before=0.0, measures=measures, samples=1000,
               bytes=110_000_000, seconds=1000 / rate, samples_per_s=rate, mb_per_s=rate * 0.11, latency_ms=LAT,
               open_ms=LAT, cpu=Cpu(system_busy_pct=50, iowait_pct=10, iobench_cores=cores), disk=None, timeline=[])


def _result(runs: list[Run], fstype: str = "xfs", metadata: list[Metadata] | None = None) -> Result:
    return Result(
        created="2026-11-29T00:00:00+0000", command=["iobench", "run"],
        host=Host(hostname="h", kernel="6", cpus=2, ram_bytes=2**34, ram_available_bytes=2**34, python="3.11",
                  iobench="0", root=True),
        mount=Mount(path="/mnt/x", source="/dev/loop0", fstype=fstype, options="rw", family="local", device="loop0",
                    read_ahead_kb=128, bdi="7:0", details={}, unread=[]),
        dataset=Dataset(path="/mnt/x/d", files=1000, bytes=110_000_000, mean_bytes=110_000, median_bytes=97_000,
                        made_by_iobench=True, params=None, fits_in_ram=True),
        settings=Settings(orders=["shuffled"], concurrency=[1, 4, 16], cache=["cold"], epochs=1, seed=0),
        remote=fstype.startswith("fuse"), runs=runs, metadata=metadata or [])


def test_best_cold_run_and_saturation_point():
    v = verdict(_result([_run(1, 1000), _run(4, 3000), _run(16, 3100), _run(16, 50_000, "warm", 1.0, "page-cache")]))
    assert (v.best_samples_per_s, v.best_concurrency, v.saturates_at) == (3100, 16, 4)
    assert "3,100 files/s" in v.text and "saturates at ~4 threads" in v.text
    assert "Warm (from the page cache): 50,000 files/s" in v.text


def test_still_rising_says_try_more_threads():
    v = verdict(_result([_run(1, 1000), _run(4, 3000)]))
    assert v.saturates_at == 4 and "still rising at 4 threads" in v.text


def test_client_cpu_limit_and_remote_caveat():
    v = verdict(_result([_run(4, 3000, cores=1.9)], fstype="fuse.sshfs"))
    assert "client CPU was the limit" in v.text and "server's cache was not evicted" in v.text
    assert v.saturates_at is None


def test_no_cold_run_gives_no_storage_figure():
    v = verdict(_result([_run(4, 50_000, "warm", measures="page-cache")]))
    assert v.best_samples_per_s is None and "no storage figure" in v.text


def test_cold_run_whose_eviction_failed_is_not_a_storage_figure():
    v = verdict(_result([_run(4, 40_000, measures="page-cache"), _run(1, 900)]))
    assert v.best_samples_per_s == 900


def _meta(projected: float) -> Metadata:
    return Metadata(cache="cold", eviction="drop_caches", dirs=8, files=10_000, list_s=projected * 10_000 / 1_281_167,
                    stat_files=10_000, stat_per_s=1000, stat_ms=LAT, open_close_files=10_000, open_close_per_s=900,
                    open_close_ms=LAT, scale_files=1_281_167, projected_list_s=projected)


def test_start_up_cost_is_mentioned_past_a_minute():
    assert "Start-up" not in verdict(_result([_run(1, 1000)], metadata=[_meta(30)])).text
    v = verdict(_result([_run(1, 1000)], metadata=[_meta(180)]))
    assert "Start-up: listing 1,281,167 files as ImageFolder does would take ~3.0 min" in v.text


def _training(gpus: int, au: float) -> Run:
    return _run(4, 4000).model_copy(update={"gpus": gpus, "au": au, "au_min": au, "engine": "dataloader",
                                            "workers": 4})


def _with_consumer(runs: list[Run], rate: float = 1000.0) -> Result:
    r = _result(runs)
    r.settings = r.settings.model_copy(update={"rate_per_gpu": rate, "model": "resnet50", "gpu": "h200"})
    return r


def test_gpus_fed_confirmed_by_training_runs_and_storage_named():
    v = verdict(_with_consumer([_run(4, 2500), _training(2, 0.95), _training(3, 0.80)]))
    assert (v.gpus_fed, v.gpus_fed_confirmed, v.limit) == (2, True, "storage")
    assert v.text.startswith("This storage keeps 2 H200 GPUs training resnet50") and "limit is the storage" in v.text


def test_gpus_fed_below_what_the_storage_sustains_names_the_client_cpu():
    v = verdict(_with_consumer([_run(4, 5000), _training(1, 0.70)]))  # 5000/s would feed 5, one GPU starved
    assert (v.gpus_fed, v.gpus_fed_confirmed, v.limit) == (0, True, "cpu") and "CPU of this client" in v.text


def test_gpus_fed_predicted_without_training_runs():
    v = verdict(_with_consumer([_run(4, 2000)]))
    assert (v.gpus_fed, v.gpus_fed_confirmed) == (2, False) and "predicted from the sustained rate" in v.text
