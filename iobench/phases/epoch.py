"""One measured epoch, the primitive every phase uses: the cache state prepared (evicted or warmed, then its
residency checked), the epoch read by an engine into an EpochRecorder, and its figures made into a Run
(`summarize`): `measure_epoch` for one engine, `train_epoch` for emulated GPUs each with its own DataLoader and
consumer (`steady_training` makes one training run of several epochs). Every sample's bytes are checked against
the manifest after the epoch (`changed_during`)."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from iobench import sources, store
from iobench.answer.rules import (
    WARM_MIN,
    consumed,
    mark_validity,
    measures,
    saturated,
)
from iobench.dataset import Manifest
from iobench.engines import Engine
from iobench.engines.threads import ThreadEngine
from iobench.errors import explain_oserror
from iobench.host.mounts import usable_cpus
from iobench.host.stall import (
    DEFAULT_IO_TIMEOUT_S,
    GRACE_S,
    KILL_WAIT_S,
    StorageStalled,
    left_behind_text,
    stop_signals_deferred,
)
from iobench.phases.mitigations import willneed_prefetch
from iobench.record.order import epoch_order, shard
from iobench.record.recorder import Counters, EpochRecorder, changed_positions, latency_summary
from iobench.result import Cpu, Disk, Latency, Run, Settings
from iobench.safefs import kind_of
from iobench.sources import Source
from iobench.ui import UI


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
                                        io_timeout_s=spec.io_timeout_s, where=store.open(manifest.root))
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
    run = summarize(rec, counters, source.name, spec.order, engine, spec.cache, spec.epoch, eviction, resident,
                     error is None, mitigation=spec.mitigation)
    return run, error or changed_during(run, manifest, source, [(order, rec)])


def changed_during(run: Run, manifest: Manifest, source: Source,
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
                   ui: UI, io_timeout_s: float | None = DEFAULT_IO_TIMEOUT_S, *,
                   where: store.Store) -> tuple[str | None, float | None]:
    """Evict for a cold epoch, warm up for a warm one that would start cold; then measure residency (in the
    client's cache of `where`, the store holding the files). Each part
    runs where a storage that stops answering cannot hold this process: no progress for `io_timeout_s` raises
    StorageStalled (with the process left behind, if any, named in its `left_behind`, also warned here)."""
    try:
        eviction = where.evict(paths, timeout_s=io_timeout_s) if state == "cold" else None
        resident = where.resident(paths, seed=epoch, timeout_s=io_timeout_s)
        if state == "warm" and fits_in_ram and resident is not None and resident < WARM_MIN:
            warm_up(source, np.arange(len(source)), conc, ui, io_timeout_s=io_timeout_s)  # warm right after nothing
            resident = where.resident(paths, seed=epoch, timeout_s=io_timeout_s)
    except StorageStalled as exc:
        if exc.left_behind:
            ui.warn(exc.left_behind)
        raise
    return eviction, resident


def summarize(rec: EpochRecorder, counters: Counters, source: str, order: str, engine: Engine, state: str,
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
        cpu=Cpu(**cpu),
        disk=Disk(**sys_counters["disk"]) if sys_counters["disk"] else None,
        timeline=[(round(t, 3), d) for t, d in rec.timeline], **extra,
    ))


def warm_up(source: Source, order: np.ndarray, conc: int, ui: UI,
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
    from iobench.engines.dataloader import POLL_S, DataLoaderEngine
    from iobench.gpu.consumer import CudaConsumer, SleepConsumer

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
                                        io_timeout_s=settings.io_timeout_s, where=store.open(manifest.root))
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
        stall.run = summarize(merge_recorders(recs), counters, source.name, "shuffled", loaders[0], state, epoch,
                              eviction, resident, False, gpus=gpus, consumer_rate=settings.rate_per_gpu)
        raise stall
    if errors and isinstance(errors[0], OSError):
        raise explain_oserror(errors[0], f"reading the dataset {manifest.root} failed during a training run")
    if errors:
        raise errors[0]
    source.close()
    merged = merge_recorders(recs)
    aus = [c.au for c in consumers if c.au is not None]
    delivered = [c.delivered_per_s for c in consumers if c.delivered_per_s is not None]
    run = consumed(summarize(merged, counters, source.name, "shuffled", loaders[0], state, epoch, eviction, resident,
                              True, gpus=gpus, consumer_rate=settings.rate_per_gpu,
                              au=round(sum(aus) / len(aus), 4) if aus else None,
                              au_min=round(min(aus), 4) if aus else None,
                              delivered_per_s=round(sum(delivered), 2) if delivered else None))
    changed_during(run, manifest, source, list(zip(shards, recs, strict=True)))  # marks it invalid, if so: left out
    return run


def merge_recorders(recs: list[EpochRecorder]) -> EpochRecorder:
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
