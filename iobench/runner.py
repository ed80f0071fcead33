"""`iobench run`: a run as phases over one dataset: metadata (list, stat, open), replay (the loader's
epochs over the concurrency sweep), the raw fio baseline, training (emulated GPUs: how many are fed) and
mitigations. Each phase appends records of its own kind to the result, which is saved after every record,
so an interruption loses nothing that was measured. Every measured epoch goes through `measure_epoch`
(or `train_epoch` for several GPUs at once) and `_summarize`. (~580 lines: the phases share the measured epoch,
the cache preparation and the saving rules; each phase is one function.)"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import threading
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iobench import cache, engines, sources
from iobench.answer import verdict
from iobench.dataset import Manifest
from iobench.engines import Engine
from iobench.engines.threads import ThreadEngine
from iobench.errors import explain_oserror
from iobench.fio import FioError, fio_can_read, fio_version, run_fio
from iobench.measure import Counters, EpochRecorder, changed_positions, latency_summary
from iobench.metadata import metadata_phase
from iobench.mitigations import willneed_prefetch
from iobench.mounts import usable_cpus
from iobench.order import epoch_order, shard
from iobench.result import Baseline, Cpu, Disk, FioBaseline, Latency, Mitigation, Result, Run, Settings
from iobench.safefs import kind_of
from iobench.sources import Source
from iobench.stall import (
    DEFAULT_IO_TIMEOUT_S,
    GRACE_S,
    KILL_WAIT_S,
    StorageStalled,
    left_behind_text,
    stop_signals_deferred,
)
from iobench.ui import UI
from iobench.verdict import (
    MIN_TRAIN_STEPS,
    REACHES,
    WARM_MIN,
    consumed,
    fio_validity,
    gpus_for,
    mark_validity,
    measures,
    saturated,
    saturation,
    shaped_runs,
    stats,
    supply_run,
)

FIO_SAMPLE = 20_000  # fio's set-up grows with the square of its files per job: it reads a random sample
FIO_COLD_REPEATS = 2  # cold fio runs per point; the fastest is kept
FIO_WARM_S = 1.0  # warm fio loops over its files for about this long


class Interrupted(Exception):
    """Ctrl-C during a run; the result file holds what was measured."""


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def execute(manifest: Manifest, settings: Settings, result: Result, result_path: Path, ui: UI) -> Result:
    """Run the phases the settings ask for; save after each record; finish with the verdict."""
    try:
        if settings.metadata:
            _metadata(manifest, settings, result, result_path, ui)
        if settings.replay:
            _replay(manifest, settings, result, result_path, ui)
        if settings.fio:
            _fio(manifest, settings, result, result_path, ui)
        if settings.replay and settings.rate_per_gpu is not None:
            _train(manifest, settings, result, result_path, ui, epoch=len(result.runs))
        if settings.mitigations:
            _mitigations(manifest, settings, result, result_path, ui, epoch=len(result.runs))
    except KeyboardInterrupt:  # between epochs (eviction, residency check): keep what was measured
        result.save(result_path)
        raise Interrupted(f"interrupted: kept what was measured in {result_path}") from None
    return finish(result, result_path)


def finish(result: Result, result_path: Path) -> Result:
    """Every phase measured: the stats, the verdict, complete, saved."""
    result.stats = stats(result)
    result.verdict = verdict(result)
    result.complete = True
    result.finished = now_iso()
    result.save(result_path)
    return result


def _metadata(manifest: Manifest, settings: Settings, result: Result, result_path: Path, ui: UI) -> None:
    for state in settings.cache:
        try:
            with ui.status(f"metadata, {state}: listing {len(manifest):,} files, stat, open+close"):
                result.metadata.append(metadata_phase(manifest, state, settings.scale_files, settings.seed,
                                                      timeout_s=settings.io_timeout_s))
        except StorageStalled as exc:
            _stalled(exc, result, result_path, ui)
        result.save(result_path)


def _stalled(exc: StorageStalled, result: Result, result_path: Path, ui: UI) -> None:
    """A phase outside the epochs stalled: keep the result (and the process left behind, if any) and stop as the
    replay does."""
    if exc.left_behind:
        result.warnings.append(exc.left_behind)
        ui.warn(exc.left_behind)
    result.save(result_path)
    raise exc.with_note(f"kept what was measured in {result_path}") from None


def _replay(manifest: Manifest, settings: Settings, result: Result, result_path: Path, ui: UI) -> None:
    """The sweep, `settings.repeat` times: per source, order, concurrency, cache state and epoch, one measured epoch."""
    epoch = 0
    for repeat in range(settings.repeat):
        if settings.repeat > 1:
            ui.info(f"repeat {repeat + 1} of {settings.repeat}")
        epoch = _sweep(manifest, settings, result, result_path, ui, epoch, repeat)


def _sweep(manifest: Manifest, settings: Settings, result: Result, result_path: Path, ui: UI, epoch: int,
           repeat: int) -> int:
    """One pass of the sweep; returns the last epoch number used."""
    for source_name in settings.sources:
        source = sources.open(source_name, manifest, ui)
        try:
            for order in settings.orders:
                for conc in settings.concurrency:
                    engine = engines.make(settings, conc)
                    try:
                        for state in settings.cache:
                            for _ in range(settings.epochs):
                                epoch += 1
                                spec = EpochSpec(order, state, epoch, settings.seed, result.mount.device,
                                                 result.dataset.fits_in_ram, io_timeout_s=settings.io_timeout_s)
                                _one_epoch(engine, source, manifest, spec, result, result_path, ui, repeat=repeat)
                    finally:
                        engine.close()
        finally:
            source.close()
    return epoch


def _one_epoch(engine: Engine, source: Source, manifest: Manifest, spec: EpochSpec, result: Result, result_path: Path,
               ui: UI, repeat: int = 0) -> None:
    run, error = measure_epoch(engine, source, manifest, spec, ui)
    run.repeat = repeat
    result.runs.append(run)
    left_behind = engine.left_behind
    if left_behind:  # readers stuck in IO that were left behind (a stall, or Ctrl-C on a hung storage)
        result.warnings.append(left_behind)
        ui.warn(left_behind)
    result.save(result_path)
    kept = f"kept {len(result.runs)} measured epochs in {result_path}"
    if isinstance(error, StorageStalled):
        raise error.with_note(f"kept what was measured in {result_path}") from None
    if isinstance(error, OSError):
        raise explain_oserror(error, f"reading the dataset {manifest.root} failed ({kept})")
    if error is not None:
        raise Interrupted(f"interrupted: {kept}")
    _warn_on(run, result, ui)


def _fio(manifest: Manifest, settings: Settings, result: Result, result_path: Path, ui: UI) -> None:
    """fio on (a sample of) the same files, per concurrency and cache state; then each loader run's
    efficiency against it."""
    baseline = result.baseline = Baseline(fio_version=fio_version())
    if baseline.fio_version is None:
        baseline.note = "fio is not installed: no raw baseline (install it with apt-get install -y fio)"
        ui.warn(baseline.note)
        return
    # fio's iolog cannot name a path with white space or over 256 bytes: it reads a sample of the others
    usable = np.array([i for i, p in enumerate(manifest.paths) if fio_can_read(p)], dtype=np.int64)
    if len(usable) < len(manifest):
        baseline.note = (f"fio cannot replay {len(manifest) - len(usable):,} of the {len(manifest):,} paths (white "
                         "space, or over 256 bytes): its baseline reads a sample of the others")
        ui.warn(baseline.note)
    if len(usable) == 0:
        result.save(result_path)
        return
    n = min(FIO_SAMPLE, len(usable))
    pick = np.sort(np.random.default_rng([settings.seed, 0xF10]).choice(usable, size=n, replace=False))
    paths = [manifest.paths[i] for i in pick.tolist()]
    sizes = manifest.sizes[pick].tolist()
    root = os.geteuid() == 0
    timeout = settings.io_timeout_s
    for conc in settings.fio_jobs(n):
        for state in settings.cache:
            cold = state == "cold"
            try:
                if cold:
                    cache.evict(paths, timeout_s=timeout)
                elif (cache.resident_sample(paths, timeout_s=timeout) or 0.0) < WARM_MIN:
                    _warm_up(sources.open("files", manifest), pick, conc, ui, io_timeout_s=timeout)
            except StorageStalled as exc:
                _stalled(exc, result, result_path, ui)
            # Cold: the best of FIO_COLD_REPEATS runs, each from an evicted cache (one cold run on a shared machine
            # can be 2x off). Warm: enough loops over the files for ~1 s of reads (a loop would not be cold).
            loops = 1 if cold else _fio_loops(result, conc, n)
            # fio's own JSON, its job file and (small) iologs go beside the result: <result folder>/fio/<name>.*
            name = f"fio-{conc}jobs-{state}"
            try:
                counters = Counters(None)  # fio's processes are iobench's children: their CPU is counted
                with ui.status(f"fio, {state}: {n:,} files, {conc} jobs"):
                    res = run_fio(paths, conc, sizes=sizes, seed=settings.seed, drop_caches=cold and root, loops=loops,
                                  repeats=FIO_COLD_REPEATS if cold else 1,
                                  prepare=(lambda: cache.evict(paths, timeout_s=timeout)) if cold else None,
                                  name=name, save_to=result_path.parent / "fio", io_timeout_s=timeout)
            except StorageStalled as exc:
                _stalled(exc, result, result_path, ui)
            except FioError as exc:
                baseline.note = f"fio failed at {conc} jobs, {state}: {exc}"
                ui.warn(baseline.note)
                result.save(result_path)
                return
            baseline.fio.append(FioBaseline(
                concurrency=conc, cache=state, files=res.ios, bytes=res.bytes, seconds=res.seconds,
                files_per_s=round(res.files_per_s, 2), mb_per_s=round(res.mb_per_s, 3),
                latency_ms=Latency(**{k: res.latency_ms[k] for k in Latency.model_fields}),
                setup_s=round(res.setup_s, 3), job=res.job, cpu=Cpu(**counters.result()["cpu"]),
                repeats=res.repeats, runs_files_per_s=[round(x, 2) for x in res.runs_files_per_s],
                at_best=res.at_best, caveats=list(res.caveats), json_file=f"fio/{name}.json"))
            point = baseline.fio[-1]
            point.invalid_reason = fio_validity(point)
            point.valid = point.invalid_reason is None
            result.save(result_path)
    ref = {(b.concurrency, b.cache): b.files_per_s for b in baseline.fio}
    for run in result.runs:
        fio_rate = ref.get((run.concurrency, run.cache))
        if fio_rate and run.complete:
            run.efficiency = round(run.samples_per_s / fio_rate, 3)
    result.save(result_path)


def _fio_loops(result: Result, conc: int, files: int) -> int:
    """Warm fio loops that last ~FIO_WARM_S at the rate the loaders read warm at this concurrency."""
    warm = [r.samples_per_s for r in result.runs
            if r.cache == "warm" and r.concurrency == conc and r.kind != "training"]
    return min(20, max(1, math.ceil(FIO_WARM_S * max(warm, default=0.0) / files)))


@dataclass(frozen=True)
class EpochSpec:
    """What one measured epoch is: its order and cache state, where it runs, and what a mitigation changes."""

    order: str  # runs[].order: "sequential" | "shuffled" | "shard-stream"
    cache: str  # "cold": evicted first | "warm": warmed first where the dataset fits in RAM
    epoch: int  # runs[].epoch; with `seed`, seeds the shuffle
    seed: int
    device: str | None  # the mount's block device, for its counters (None: network/FUSE)
    fits_in_ram: bool  # a warm epoch is warmed up first only where the dataset fits
    order_array: np.ndarray | None = None  # replaces the seeded `order` (e.g. a tar stream's)
    willneed: bool = False  # run the WILLNEED prefetcher ahead of the readers
    mitigation: str | None = None  # runs[].mitigation
    io_timeout_s: float | None = DEFAULT_IO_TIMEOUT_S  # no read finished this long: StorageStalled

    def order_of(self, n: int) -> np.ndarray:
        return self.order_array if self.order_array is not None else epoch_order(self.order, n, self.seed, self.epoch)


def measure_epoch(engine: Engine, source: Source, manifest: Manifest, spec: EpochSpec,
                  ui: UI) -> tuple[Run, BaseException | None]:
    """Prepare the cache state (on the files the source reads), read one epoch with the engine, and summarise it.
    An epoch cut short (Ctrl-C, a read error, StorageStalled: no read finished for `spec.io_timeout_s`) is
    summarised too, with `complete` false, and the exception returned."""
    conc = engine.concurrency
    if spec.io_timeout_s is not None:
        engine.io_timeout_s = spec.io_timeout_s
    eviction, resident = prepare_cache(spec.cache, source.files(), source, conc, spec.epoch, spec.fits_in_ram, ui,
                                        io_timeout_s=spec.io_timeout_s)
    rec = EpochRecorder(len(manifest), conc)
    counters = Counters(spec.device)
    error: BaseException | None = None
    label = (f"{spec.mitigation or spec.order} {spec.cache} "
             + (f"{conc:>3} threads" if engine.name == "threads" else f"{engine.workers:>3} workers"))
    order = spec.order_of(len(manifest))
    try:
        with ui.epoch_progress(label, len(manifest)) as tick, \
                (willneed_prefetch(manifest.paths, order, rec) if spec.willneed else nullcontext()):
            engine.epoch(source, order, rec, tick)
    except (KeyboardInterrupt, OSError, StorageStalled) as exc:
        error = exc
    run = _summarize(rec, counters, source.name, spec.order, engine, spec.cache, spec.epoch, eviction, resident,
                     error is None, mitigation=spec.mitigation)
    return run, error or _changed_during(run, manifest, source, [(order, rec)])


def _changed_during(run: Run, manifest: Manifest, source: Source,
                    parts: Sequence[tuple[np.ndarray, EpochRecorder]]) -> OSError | None:
    """When a sample read other than its manifest's bytes (a file changed during the run, or a FIFO put in its
    place, which reads nothing): the run is marked invalid, and the OSError naming the first one is returned."""
    found = [(order, rec, changed_positions(rec.nbytes, order, manifest.sizes)) for order, rec in parts]
    count = sum(len(at) for _, _, at in found)
    if not count:
        return None
    order, rec, at = next(f for f in found if len(f[2]))
    index, got = int(order[at[0]]), int(rec.nbytes[at[0]])
    name = source.sample_name(index)
    now = f"read {got:,} B"
    if source.name == "files":
        with contextlib.suppress(OSError):
            mode = os.lstat(name).st_mode
            if not stat.S_ISREG(mode):
                now = f"is now {kind_of(mode)}"
    more = f" (and {count - 1:,} more)" if count > 1 else ""
    why = f"{now}, its manifest says {int(manifest.sizes[index]):,} B: the dataset changed during the run{more}"
    run.valid, run.invalid_reason = False, f"{name} {why}"
    return OSError(None, why, name)


def prepare_cache(state: str, paths: Sequence[str], source: Source, conc: int, epoch: int, fits_in_ram: bool,
                   ui: UI, io_timeout_s: float | None = DEFAULT_IO_TIMEOUT_S) -> tuple[str | None, float | None]:
    """Evict for a cold epoch, warm up for a warm one that would start cold; then measure residency. Each part
    runs where a storage that stops answering cannot hold this process: no progress for `io_timeout_s` raises
    StorageStalled (with the process left behind, if any, named in its `left_behind`, also warned here)."""
    try:
        eviction = cache.evict(paths, timeout_s=io_timeout_s) if state == "cold" else None
        resident = cache.resident_sample(paths, seed=epoch, timeout_s=io_timeout_s)
        if state == "warm" and fits_in_ram and resident is not None and resident < WARM_MIN:
            _warm_up(source, np.arange(len(source)), conc, ui, io_timeout_s=io_timeout_s)  # warm right after nothing
            resident = cache.resident_sample(paths, seed=epoch, timeout_s=io_timeout_s)
    except StorageStalled as exc:
        if exc.left_behind:
            ui.warn(exc.left_behind)
        raise
    return eviction, resident


def _summarize(rec: EpochRecorder, counters: Counters, source: str, order: str, engine: Engine, state: str,
               epoch: int, eviction: str | None, resident: float | None, complete: bool, **extra) -> Run:
    """One Run from what an epoch recorded: counted samples and bytes, rates, latency percentiles, counters."""
    sys_counters = counters.result()
    cpu = sys_counters["cpu"]
    read = rec.nbytes >= 0
    samples = int(read.sum())
    nbytes = int(rec.nbytes[read].sum())
    seconds = max(rec.t_end - rec.t_start, 1e-9)
    decode_ns = rec.decode_ns
    decode_share = None
    if decode_ns is not None and samples:
        spent = float(decode_ns[read].sum())
        decode_share = spent / max(spent + float(rec.total_ns[read].sum()), 1.0)
    return mark_validity(Run(
        source=source, order=order, engine=engine.name, concurrency=engine.concurrency,
        workers=engine.workers, batch_size=engine.batch_size,
        decode=decode_ns is not None, cache=state, epoch=epoch, complete=complete, eviction=eviction,
        resident_before=None if resident is None else round(resident, 4),
        measures=measures(resident, decode_share, saturated(cpu["iobench_cores"], cpu["system_busy_pct"],
                                                            usable_cpus(), os.cpu_count())),
        samples=samples, bytes=nbytes, seconds=round(seconds, 6),
        first_batch_s=round(max(rec.t_first - rec.t_start, 0.0), 6) if rec.t_first else None,
        samples_per_s=round(samples / seconds, 2), mb_per_s=round(nbytes / seconds / 1e6, 3),
        latency_ms=Latency(**latency_summary(rec.total_ns[read])),
        open_ms=Latency(**latency_summary(rec.open_ns[read])),
        decode_ms=None if decode_ns is None else Latency(**latency_summary(decode_ns[read])),
        cpu=Cpu(**sys_counters["cpu"]),
        disk=Disk(**sys_counters["disk"]) if sys_counters["disk"] else None,
        timeline=[(round(t, 3), d) for t, d in rec.timeline], **extra,
    ))


def _warm_up(source: Source, order: np.ndarray, conc: int, ui: UI,
             io_timeout_s: float | None = DEFAULT_IO_TIMEOUT_S) -> None:
    """Read the samples once, not measured, so that a warm run starts warm (with the engine's watchdog: a stall
    raises StorageStalled naming the warm-up)."""
    ui.info("warming the page cache: reading the dataset once (not measured)")
    engine = ThreadEngine(max(conc, 4), io_timeout_s=io_timeout_s)
    try:
        engine.epoch(source, order, EpochRecorder(len(order), max(conc, 4)))
    except StorageStalled as exc:
        out = StorageStalled(f"{exc} while warming the page cache", pending=exc.pending, timeout_s=exc.timeout_s,
                             stuck=exc.stuck, left_behind=exc.left_behind or engine.left_behind)
        raise out from None


def _warn_on(run: Run, result: Result, ui: UI) -> None:
    if run.cache == "cold" and run.measures in ("page-cache", "mixed"):
        msg = (f"eviction did not take before epoch {run.epoch}: {100 * (run.resident_before or 0):.0f}% of "
               "sampled pages were cached, so that cold figure partly measures RAM")
        result.warnings.append(msg)
        ui.warn(msg)


MAX_LOADER_PROCESSES = 32  # a training run needs gpus x workers processes on this client
MAX_TRAIN_RUNS = 4  # training runs in the search for the boundary (besides the one at --gpus)


def _train(manifest: Manifest, settings: Settings, result: Result, result_path: Path, ui: UI, epoch: int) -> None:
    """GPUs fed, by training runs (each GPU its own DataLoader and consumer): one at exactly the count asked
    (--gpus), whatever the replay's validity (the run is judged valid or not on its own steps and seconds), then
    the boundary: predict from the pipeline's rate how many GPUs stay at the AU target and run at that count and
    one above (or below), until a count that is fed sits next to one that is not. Without a valid replay run there
    is no rate to predict from: only the run at --gpus is made, at the workload's workers per GPU."""
    if settings.rate_per_gpu is None:
        return
    if settings.engine != "dataloader":
        result.warnings.append("GPUs fed is predicted, not confirmed: training runs need --engine dataloader")
        return
    supply = supply_run(result)
    if supply is None and settings.gpus is None:
        result.warnings.append("no valid replay run, so no training run was made and no GPU count is given")
        return
    gpus_here = None
    if settings.consumer == "cuda":
        import torch

        gpus_here = torch.cuda.device_count()  # one real GPU per emulated one
    # The fewest workers per GPU that together reach the supply rate: the sweep's saturation point, shared out
    # (a job of 11 GPUs is confirmed without 88 loader processes); more only when that starves (see attempt).
    # Without a valid sweep: the workload's most workers per GPU, as its training would run.
    if supply is not None:
        sat, _ = saturation([r for r in shaped_runs(result) if r.cache == supply.cache])
        total_workers = max(sat or supply.concurrency, 1)
    passed: dict[int, bool] = {}  # GPUs -> reached the AU target (valid runs only)

    # One worker count given (--workers N, or a workload's one): the workers of each GPU, in every training run.
    given = max(settings.concurrency[0], 1) if len(settings.concurrency) == 1 else None

    def attempt(n: int) -> bool | None:
        nonlocal epoch
        if given is not None:
            workers = given
            if n * given > MAX_LOADER_PROCESSES and MAX_LOADER_PROCESSES // n >= 1:
                workers = MAX_LOADER_PROCESSES // n
                result.warnings.append(
                    f"the training run at {n} GPUs ran {workers} workers per GPU, not the {given} asked: {n} x {given} "
                    f"would need {n * given} loader processes, over the {MAX_LOADER_PROCESSES} this client hosts")
        elif supply is not None:
            workers = max(1, -(-total_workers // n))
        else:
            workers = max(max(settings.concurrency), 1)
        steps = len(manifest) // (n * settings.batch_size)
        why = None
        if steps < MIN_TRAIN_STEPS + 1:
            why = (f"each GPU would take {steps} batches of {settings.batch_size}, fewer than the "
                   f"{MIN_TRAIN_STEPS + 1} that make AU mean anything: use more --files or a smaller --batch-size")
        elif n * workers > MAX_LOADER_PROCESSES:
            why = (f"{n} GPUs x {workers} workers would need more than {MAX_LOADER_PROCESSES} loader processes on "
                   "this client")
        elif gpus_here is not None and n > gpus_here:
            why = f"--consumer cuda needs one GPU per emulated GPU and this host has {gpus_here}"
        if why is not None:
            result.warnings.append(f"no training run at {n} GPUs: {why}; the answer for {n} is predicted from "
                                   "the measured rates")
            return None
        most = max(workers, min(max(settings.concurrency), MAX_LOADER_PROCESSES // n))
        while True:
            done: list[Run] = []  # this run's epochs (--epochs N: N of them)
            try:
                for _ in range(settings.epochs):
                    epoch += 1
                    done.append(train_epoch(manifest, settings, n, workers, epoch, result.mount.device,
                                            result.dataset.fits_in_ram, ui,
                                            state="cold" if "cold" in settings.cache else "warm",
                                            source_name=supply.source if supply is not None else "files"))
                    if not done[-1].valid:
                        break
            except StorageStalled as exc:  # keep the partial training run, then stop as the replay does
                result.runs.extend([*done, exc.run] if exc.run is not None else done)
                result.save(result_path)
                raise exc.with_note(f"kept what was measured in {result_path}") from None
            except BaseException:  # Ctrl-C: the epochs it finished are kept, each as its own run
                result.runs.extend(done)
                result.save(result_path)
                raise
            run = steady_training(done)
            result.runs.append(run)
            result.save(result_path)
            if not run.valid:
                result.warnings.append(f"the training run at {n} GPUs is invalid ({run.invalid_reason}) and was left "
                                       "out")
                return None
            fed = run.au is not None and run.au >= settings.au_target
            # Starved below what one loader gave in the replay: the per-GPU split of the workers, not the storage,
            # may be short. Once, with as many workers per GPU as the sweep's most (within the process budget).
            if (fed or workers >= most or supply is None
                    or (run.delivered_per_s or 0) >= REACHES * supply.samples_per_s):
                break
            workers = most
        passed[n] = fed
        return fed

    if settings.gpus is not None:
        attempt(settings.gpus)
    if supply is None:
        result.warnings.append("no valid replay run: only the training run at --gpus was made, and no GPU count past "
                               "it is predicted")
        return
    n = max(1, gpus_for(supply.samples_per_s, settings.rate_per_gpu, settings.au_target))
    for _ in range(MAX_TRAIN_RUNS):
        ok = passed[n] if n in passed else attempt(n)
        if ok is None:
            break
        if ok and n + 1 in passed or not ok and (n - 1 in passed or n == 1):
            break  # the boundary is found: n fed and n + 1 not, or n not fed and n - 1 known
        n = n + 1 if ok else n - 1


def steady_training(epochs: list[Run]) -> Run:
    """One training run from its epochs (--epochs N), as replay's steady state: samples/s, MB/s and AU the means
    over epochs 2..N, the lowest GPU's AU the lowest there; the rest (latency, CPU, counts) from the last epoch.
    An invalid epoch makes the run invalid, with its reason."""
    last = epochs[-1]
    bad = next((r for r in epochs if not r.valid), None)
    steady = epochs[1:] or epochs
    update: dict[str, object] = {"epochs": len(epochs)}
    if bad is not None:
        update.update(valid=False, invalid_reason=f"epoch {epochs.index(bad) + 1} of {len(epochs)}: "
                                                  f"{bad.invalid_reason}")
    elif len(epochs) > 1:
        aus = [r.au for r in steady if r.au is not None]
        update.update(samples_per_s=round(sum(r.samples_per_s for r in steady) / len(steady), 2),
                      mb_per_s=round(sum(r.mb_per_s for r in steady) / len(steady), 3),
                      au=round(sum(aus) / len(aus), 4) if aus else None,
                      au_min=min((r.au_min for r in steady if r.au_min is not None), default=None))
        update["delivered_per_s"] = update["samples_per_s"] if last.delivered_per_s is not None else None
    return last.model_copy(update=update)


def train_epoch(manifest: Manifest, settings: Settings, gpus: int, workers: int, epoch: int, device: str | None,
                fits_in_ram: bool, ui: UI, state: str = "cold", source_name: str = "files") -> Run:
    """One shuffled epoch (cold unless `state` says warm) read by `gpus` emulated GPUs at once, each with its
    own DataLoader over its shard of the permutation (as DistributedSampler deals it) and its own consumer.
    Storage that stops answering (`settings.io_timeout_s`) raises StorageStalled with the partial run as its `run`."""
    from iobench.consumer import CudaConsumer, SleepConsumer
    from iobench.engines.dataloader import POLL_S, DataLoaderEngine

    source = sources.open(source_name, manifest, ui)
    order = epoch_order("shuffled", len(manifest), settings.seed, epoch)
    shards = [shard(order, r, gpus) for r in range(gpus)]
    # DataLoaderEngine itself, not engines.make: each GPU's loop needs its on_batch and halt
    loaders = [DataLoaderEngine(workers, settings.batch_size, settings.prefetch_factor, decode=settings.decode,
                                io_timeout_s=settings.io_timeout_s) for _ in range(gpus)]
    assert settings.rate_per_gpu is not None
    consumers = ([CudaConsumer(settings.model or "resnet50", settings.batch_size, device=f"cuda:{r}")
                  for r in range(gpus)]
                 if settings.consumer == "cuda" else [SleepConsumer(settings.rate_per_gpu) for _ in range(gpus)])
    recs = [EpochRecorder(len(part), max(workers, 1)) for part in shards]
    errors: list[BaseException] = []
    eviction, resident = prepare_cache(state, source.files(), source, max(workers, 1), epoch, fits_in_ram, ui,
                                        io_timeout_s=settings.io_timeout_s)
    counters = Counters(device)

    def gpu(r: int) -> None:
        try:
            consume = consumers[r]
            loaders[r].epoch(source, shards[r], recs[r], on_batch=lambda b: consume(
                len(b.positions), b.data if settings.decode else None))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            loaders[r].close()

    threads = [threading.Thread(target=gpu, args=(r,), daemon=True) for r in range(gpus)]
    label = f"training {gpus} GPU{'s' if gpus > 1 else ''} x {workers} workers"
    with ui.epoch_progress(label, len(manifest)) as tick:
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
                    tick(sum(rec.completed() for rec in recs))
        except BaseException:  # Ctrl-C: each GPU's loop stops at its next batch or poll, its workers in bounded time
            for loader in loaders:
                loader.halt()
            with stop_signals_deferred(stopping=True):
                deadline = time.perf_counter() + POLL_S + GRACE_S + KILL_WAIT_S + 1.0
                for t in threads:
                    t.join(max(0.0, deadline - time.perf_counter()))
            raise
    stalls = [e for e in errors if isinstance(e, StorageStalled)]
    if stalls:  # the partial run goes with the error, for the caller to keep
        stuck = tuple(p for e in stalls for p in e.stuck)
        stall = StorageStalled.after(sum(e.pending for e in stalls), stalls[0].timeout_s).with_note(
            f"during a training run at {gpus} GPU{'s' if gpus > 1 else ''}")
        stall.stuck, stall.left_behind = stuck, left_behind_text(stuck)
        stall.run = _summarize(_merge(recs), counters, source.name, "shuffled", loaders[0], state, epoch, eviction,
                               resident, False, gpus=gpus, consumer_rate=settings.rate_per_gpu)
        raise stall
    if errors and isinstance(errors[0], OSError):
        raise explain_oserror(errors[0], f"reading the dataset {manifest.root} failed during a training run")
    if errors:
        raise errors[0]
    source.close()
    merged = _merge(recs)
    aus = [c.au for c in consumers if c.au is not None]
    delivered = [c.delivered_per_s for c in consumers if c.delivered_per_s is not None]
    run = consumed(_summarize(merged, counters, source.name, "shuffled", loaders[0], state, epoch, eviction, resident,
                              True, gpus=gpus, consumer_rate=settings.rate_per_gpu,
                              au=round(sum(aus) / len(aus), 4) if aus else None,
                              au_min=round(min(aus), 4) if aus else None,
                              delivered_per_s=round(sum(delivered), 2) if delivered else None))
    _changed_during(run, manifest, source, list(zip(shards, recs, strict=True)))  # marks it invalid, if so: left out
    return run


def _merge(recs: list[EpochRecorder]) -> EpochRecorder:
    """The GPUs' recorders as one: all their samples, from the first start to the last stop."""
    merged = EpochRecorder(0, 1)
    merged.total_ns = np.concatenate([r.total_ns for r in recs])
    merged.open_ns = np.concatenate([r.open_ns for r in recs])
    merged.nbytes = np.concatenate([r.nbytes for r in recs])
    decodes = [r.decode_ns for r in recs if r.decode_ns is not None]
    if len(decodes) == len(recs):  # every recorder has them
        merged.decode_ns = np.concatenate(decodes)
    merged.t_start = min(r.t_start for r in recs)
    merged.t_end = max(r.t_end for r in recs)
    merged.t_first = min((r.t_first for r in recs if r.t_first), default=0.0)
    merged.done = [int((merged.nbytes >= 0).sum())]
    merged.timeline = [(0.0, 0), (merged.t_end - merged.t_start, merged.done[0])]
    return merged


def _mitigations(manifest: Manifest, settings: Settings, result: Result, result_path: Path, ui: UI, epoch: int) -> None:
    """The baseline and each mitigation, cold, on the same pattern and reader count; then the table."""
    from iobench.mitigations import Variant, epoch_order_for, read_ahead_kb, variants

    supply = supply_run(result)
    readers = settings.concurrency[0] if supply is None else (
        (supply.workers or 0) if supply.reader == "workers" else supply.concurrency)
    can_set = os.geteuid() == 0 and readahead_writable(result.mount.bdi)
    base_rate = None
    for v in [Variant("baseline"), *variants(max(readers, 1), can_set)]:
        epoch += 1
        source = v.open(manifest, ui)
        pack = source.describe()  # a pack's extra_bytes and pack_seconds (none for files)
        engine = engines.make(settings, v.readers or readers)
        try:
            spec = EpochSpec("shard-stream" if v.stream else "shuffled", "cold", epoch, settings.seed,
                             result.mount.device, result.dataset.fits_in_ram,
                             order_array=epoch_order_for(v, source, len(manifest), settings.seed, epoch),
                             willneed=v.willneed, mitigation=v.name, io_timeout_s=settings.io_timeout_s)
            with read_ahead_kb(result.mount.bdi, v.read_ahead_kb) if v.read_ahead_kb is not None else nullcontext():
                run, error = measure_epoch(engine, source, manifest, spec, ui)
        finally:
            engine.close()
            source.close()
        result.runs.append(run)
        result.save(result_path)
        if isinstance(error, StorageStalled):
            raise error.with_note(f"kept what was measured in {result_path}") from None
        if error is not None:
            raise error if not isinstance(error, OSError) else explain_oserror(
                error, f"mitigation {v.name} failed reading the dataset {manifest.root}")
        base_rate = base_rate or run.samples_per_s
        result.mitigations.append(Mitigation(
            name=v.name, source=run.source, samples_per_s=run.samples_per_s,
            speedup=round(run.samples_per_s / base_rate, 3), extra_bytes=int(pack.get("extra_bytes") or 0),
            pack_s=pack.get("pack_seconds"),
            gpus_fed=gpus_for(run.samples_per_s, settings.rate_per_gpu, settings.au_target)
            if settings.rate_per_gpu else None,
            note="WebDataset order: shards shuffled, files in order within a shard; with its shuffle buffer the "
                 "sample order is weaker than a full permutation" if v.stream else None,
            valid=run.valid, invalid_reason=run.invalid_reason))
        result.save(result_path)


def readahead_writable(bdi: str) -> bool:
    from iobench.mitigations import readahead_file

    return os.access(readahead_file(bdi), os.W_OK)
