"""One measured epoch, the primitive every phase uses (docs/architecture.md): the cache state prepared
(`prepare_cache`), the epoch read by engines into EpochRecorders (`read_epoch`), its figures made into a Run
(`summarize`), every sample's bytes checked against the manifest after it (`changed_during`)."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np

from iobench import engines, pipelines, store
from iobench.answer.rules import (
    WARM_MIN,
    consumed,
    mark_validity,
    measures,
    saturated,
)
from iobench.answer.sizing import passes_for
from iobench.answer.words import counted
from iobench.dataset import Manifest
from iobench.engines import Engine, Loader
from iobench.engines.dataloader import POLL_S
from iobench.engines.threads import ThreadEngine
from iobench.errors import UserError, explain_oserror
from iobench.gpu.consumer import SleepConsumer, make_consumer
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
from iobench.pipelines.loader import FEEDS
from iobench.record.order import epoch_order, shard
from iobench.record.recorder import Counters, EpochRecorder, changed_positions, latency_summary
from iobench.result import Cpu, Disk, Latency, Run, Settings
from iobench.safefs import kind_of
from iobench.sources import Source
from iobench.ui import UI

if TYPE_CHECKING:
    from iobench.engines.batches import Batch


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
    io_timeout_s: float = DEFAULT_IO_TIMEOUT_S  # no read finished this long: StorageStalled

    def order_of(self, n: int, passes: int = 1) -> np.ndarray:
        if self.order_array is not None:
            return np.tile(self.order_array, passes)
        return epoch_order(self.order, n, self.seed, self.epoch, passes)


# an epoch cut short, kept: Ctrl-C, a read error, a stall, a GET's one line (a key gone, throttled past patience)
STOPS: tuple[type[BaseException], ...] = (KeyboardInterrupt, OSError, StorageStalled, UserError)


@dataclass
class Lane:
    """One engine's part of an epoch: its share of the order, the recorder it fills, and in a training epoch the GPU
    that consumes its batches (`on_batch`: in its place, e.g. a rank's step that consumes then joins the allreduce)."""

    engine: Engine
    order: np.ndarray
    consumer: SleepConsumer | None = None
    on_batch: Callable[[Batch], None] | None = None
    after: Callable[[], None] | None = None  # once the read is done, as part of it (a rank's last, empty steps)
    rec: EpochRecorder = field(init=False)

    def __post_init__(self) -> None:
        self.rec = EpochRecorder(len(self.order), self.engine.concurrency)

    def read(self, source: Source, on_tick: Callable[[int], None] | None) -> None:
        feed = self.on_batch or (self.consumer.batch if self.consumer is not None else None)
        if feed is None:
            self.engine.epoch(source, self.order, self.rec, on_tick)
        else:  # a consumer takes the batches: the engine is a Loader (engines.make(..., loader=True))
            cast(Loader, self.engine).epoch(source, self.order, self.rec, on_tick, on_batch=feed)
        if self.after is not None:
            self.after()


@dataclass
class Figures:
    """What an epoch measured, as one host reads it (`of` its recorder) or as the ranks' merged (their latency
    histograms): what `summarize` makes a Run of."""

    samples: int
    bytes: int
    seconds: float
    first_batch_s: float | None
    latency: dict[str, float]  # as latency_summary gives it: open + read to EOF + close
    opens: dict[str, float]
    decoded: bool  # the engine decoded the samples
    decodes: dict[str, float] | None  # decode's own latency, where it is known
    decode_share: float | None  # decode / (read + decode) over the samples, where it is known
    cpu: dict  # as Counters.result() gives it, with decode_cpu_s where the decode's CPU time is known
    disk: dict | None
    timeline: list[tuple[float, int]]
    throttled: int = 0  # throttled answers, each retried (objects)

    @classmethod
    def of(cls, rec: EpochRecorder, cpu: dict, disk: dict | None) -> Figures:
        """One recorder's figures, over the samples it read (its `read_mask`)."""
        read = rec.read_mask()
        samples = int(read.sum())
        decode_ns, decode_cpu = rec.decode_ns, rec.decode_cpu_ns
        share = None
        if decode_ns is not None and samples:
            spent = float(decode_ns[read].sum())
            share = spent / max(spent + float(rec.total_ns[read].sum()), 1.0)
        if decode_cpu is not None:
            cpu = {**cpu, "decode_cpu_s": round(float(decode_cpu[read].sum()) / 1e9, 4)}
        return cls(samples=samples, bytes=int(rec.nbytes[read].sum()), seconds=rec.seconds(),
                   first_batch_s=rec.first_batch_s(), latency=latency_summary(rec.total_ns[read]),
                   opens=latency_summary(rec.open_ns[read]), decoded=decode_ns is not None,
                   decodes=None if decode_ns is None else latency_summary(decode_ns[read]), decode_share=share,
                   cpu=cpu, disk=disk, timeline=rec.timeline, throttled=int(rec.throttled[read].sum()))


@dataclass
class Read:
    """What `read_epoch` gives back: its lanes (each with its recorder), the host's counters over the read, and
    what stopped a lane, if anything (the figures up to it are in the recorders)."""

    lanes: list[Lane]
    cpu: dict
    disk: dict | None
    errors: list[BaseException]

    @property
    def error(self) -> BaseException | None:
        return self.errors[0] if self.errors else None

    def figures(self) -> Figures:
        recs = [lane.rec for lane in self.lanes]
        return Figures.of(recs[0] if len(recs) == 1 else merge_recorders(recs), self.cpu, self.disk)


@dataclass(frozen=True)
class Shown:
    """What an epoch's bar counts instead of its lane's samples (a distributed job's rank 0: every rank's): `total`,
    and `done(lane's samples)` -> (samples done, when counted: None for now)."""

    total: int
    done: Callable[[int], tuple[int, float | None]]


def read_epoch(source: Source, lanes: list[Lane], label: str, ui: UI, *, device: str | None = None,
               during: AbstractContextManager | None = None, on_tick: Callable[[int], None] | None = None,
               catch: tuple[type[BaseException], ...] = STOPS, close: bool = False, shown: Shown | None = None) -> Read:
    """Every measured epoch is read here (replay, mitigations, a training run's GPUs, a distributed rank): the host's
    counters, one progress bar, each lane's engine reading its share into its recorder and its batches to its
    consumer. One lane reads in this thread, within `during` (what watches it), `on_tick` with each tick; what
    `catch` names stops it and is kept. Several lanes (a training run's GPUs) each read in a thread of their own, any
    exception kept; Ctrl-C halts them all and is raised once they stop (in bounded time). `close`: each engine is
    closed once its read ends; `shown`: what the bar counts, for one lane (else its samples)."""
    counters = Counters(device)
    errors: list[BaseException] = []
    total = sum(len(lane.order) for lane in lanes)
    if len(lanes) == 1:
        lane = lanes[0]
        try:
            with ui.progress(label, total if shown is None else shown.total) as tick, during or nullcontext():
                def ticked(done: int) -> None:
                    if on_tick is not None:
                        on_tick(done)
                    count, at = (done, None) if shown is None else shown.done(done)
                    tick(count, at=at)

                lane.read(source, ticked)
        except catch as exc:
            errors.append(exc)
        finally:
            if close:
                lane.engine.close()
    else:
        with ui.progress(label, total) as tick:
            _read_in_threads(source, lanes, tick, errors, close)
    figures = counters.result()
    return Read(lanes, figures["cpu"], figures["disk"], errors)


def _read_in_threads(source: Source, lanes: list[Lane], tick: Callable[[int], None], errors: list[BaseException],
                     close: bool) -> None:
    def read(lane: Lane) -> None:
        try:
            lane.read(source, None)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            if close:
                lane.engine.close()

    threads = [threading.Thread(target=read, args=(lane,), daemon=True) for lane in lanes]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
                tick(sum(lane.rec.completed() for lane in lanes))
    except BaseException:  # Ctrl-C: each lane stops at its next batch or poll, its workers in bounded time
        for lane in lanes:
            cast(Loader, lane.engine).halt()
        with stop_signals_deferred(stopping=True):
            deadline = time.perf_counter() + POLL_S + GRACE_S + KILL_WAIT_S + 1.0
            for t in threads:
                t.join(max(0.0, deadline - time.perf_counter()))
        raise


def measure_epoch(engine: Engine, source: Source, manifest: Manifest, spec: EpochSpec,
                  ui: UI, keep: list[Lane] | None = None) -> tuple[Run, BaseException | None]:
    """Prepare the cache state (on the files the source reads), read one epoch with the engine, and summarise it.
    An epoch cut short (Ctrl-C, a read error, StorageStalled: no read finished for `spec.io_timeout_s`) is
    summarised too, with `complete` false, and the exception returned. `keep`: the lane read (its order and
    recorder) is appended to it, for figures a caller makes of its own (a stream's requests)."""
    conc = engine.concurrency
    engine.io_timeout_s = spec.io_timeout_s
    eviction, resident = prepare_cache(spec.cache, source.files(), source, conc, spec.epoch, spec.fits_in_ram, ui,
                                        io_timeout_s=spec.io_timeout_s, where=store.open(manifest.root))
    readers = counted(conc, "thread") if engine.name == "threads" else counted(engine.workers or 0, "worker")
    # the count right-aligned (3 digits), so that the bars' labels line up
    label = f"{spec.mitigation or spec.order} {spec.cache} " + " " * (3 - len(readers.split()[0])) + readers
    passes = 1
    while True:  # a warm epoch too short to count is read again as more passes (answer/sizing.passes_for)
        lane = Lane(engine, spec.order_of(len(manifest), passes))
        got = read_epoch(source, [lane], label, ui, device=spec.device,
                         during=willneed_prefetch(manifest.paths, lane.order, lane.rec) if spec.willneed else None)
        run = summarize(got.figures(), source.name, spec.order, engine, spec.cache, spec.epoch, eviction, resident,
                        got.error is None, mitigation=spec.mitigation, passes=passes)
        # a pass that failed, or read other bytes than the manifest's, is not read again
        changed = None if got.error else changed_during(run, manifest, source, [(lane.order, lane.rec.nbytes)])
        more = passes_for(run, passes) if got.error is None and changed is None else passes
        if more == passes:
            break
        passes = more
    if keep is not None:
        keep.append(lane)
    return run, got.error or changed


def sizes_read(manifest: Manifest, source: Source,
               parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[int, str, str]:
    """How many samples of `parts` (an order, and the bytes read at its positions) read other than their manifest's
    bytes (a file changed during the run, or a FIFO put in its place, which reads nothing), after the epoch; the
    first one's name, and what it read: `read 100 B, its manifest says 8,000 B (and 3 more)`."""
    found = [(order, nbytes, changed_positions(nbytes, order, manifest.sizes)) for order, nbytes in parts]
    count = sum(len(at) for _, _, at in found)
    if not count:
        return 0, "", ""
    order, nbytes, at = next(f for f in found if len(f[2]))
    index = int(order[at[0]])
    name, now = source.sample_name(index), f"read {int(nbytes[at[0]]):,} B"
    if source.name == "files":
        with contextlib.suppress(OSError):
            mode = os.lstat(name).st_mode
            if not stat.S_ISREG(mode):
                now = f"is now {kind_of(mode)}"
    more = f" (and {count - 1:,} more)" if count > 1 else ""
    return count, name, f"{now}, its manifest says {int(manifest.sizes[index]):,} B{more}"


def changed_during(run: Run, manifest: Manifest, source: Source,
                   parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> OSError | None:
    """When a sample read other than its manifest's bytes (`sizes_read`): the run is marked invalid, and the OSError
    naming the first one is returned."""
    count, name, what = sizes_read(manifest, source, parts)
    if not count:
        return None
    why = f"{what}: the dataset changed during the run"
    run.valid, run.invalid_reason = False, f"{name} {why}"
    return OSError(None, why, name)


def prepare_cache(state: str, paths: Sequence[str], source: Source, conc: int, epoch: int, fits_in_ram: bool,
                   ui: UI, io_timeout_s: float | None = DEFAULT_IO_TIMEOUT_S, *, where: store.Store,
                   warm: np.ndarray | None = None) -> tuple[str | None, float | None]:
    """Evict for a cold epoch, warm up for a warm one that would start cold (reading `warm`, or every sample of the
    source); then measure residency in the client's cache of `where`, the store holding the files. No progress for
    `io_timeout_s` raises StorageStalled (a process left behind named in its `left_behind`: the runner warns)."""
    eviction = None
    if state == "cold":
        with ui.status(f"evicting {len(paths):,} files"):
            eviction = where.evict(paths, timeout_s=io_timeout_s)
    resident = where.resident(paths, seed=epoch, timeout_s=io_timeout_s)
    if state == "warm" and fits_in_ram and resident is not None and resident < WARM_MIN:
        warm_up(source, np.arange(len(source)) if warm is None else warm, conc, ui, io_timeout_s=io_timeout_s)
        resident = where.resident(paths, seed=epoch, timeout_s=io_timeout_s)
    return eviction, resident


def summarize(figures: Figures, source: str, order: str, engine: Engine, state: str, epoch: int,
              eviction: str | None, resident: float | None, complete: bool, **extra) -> Run:
    """The one Run of an epoch's figures (one host's, or the ranks' merged): counted samples and bytes, rates,
    latency percentiles, counters; `extra` the fields of its kind (a training run's GPUs, a job's ranks)."""
    cpu = figures.cpu
    samples, nbytes, seconds = figures.samples, figures.bytes, figures.seconds
    spent, decoding = cpu.get("iobench_cpu_s"), cpu.get("decode_cpu_s")
    return mark_validity(Run(
        source=source, order=order, engine=engine.name, concurrency=engine.concurrency,
        depth=engine.depth, throttled=figures.throttled, workers=engine.workers, batch_size=engine.batch_size,
        decode=figures.decoded, cache=state, epoch=epoch, complete=complete, eviction=eviction,
        resident_before=None if resident is None else round(resident, 4),
        measures=measures(resident, figures.decode_share, saturated(cpu["iobench_cores"], cpu["system_busy_pct"],
                                                                    usable_cpus())),
        samples=samples, bytes=nbytes, seconds=round(seconds, 6),
        first_batch_s=None if figures.first_batch_s is None else round(figures.first_batch_s, 6),
        samples_per_s=round(samples / seconds, 2), mb_per_s=round(nbytes / seconds / 1e6, 3),
        latency_ms=Latency(**figures.latency), open_ms=Latency(**figures.opens),
        decode_ms=None if figures.decodes is None else Latency(**figures.decodes),
        cpu=Cpu(**cpu), disk=Disk(**figures.disk) if figures.disk else None,
        cpu_us_per_sample=per_sample_us(spent, samples), decode_cpu_us_per_sample=per_sample_us(decoding, samples),
        timeline=[(round(t, 3), d) for t, d in figures.timeline], **extra,
    ))


def per_sample_us(cpu_s: float | None, samples: int) -> float | None:
    """CPU seconds over samples, in microseconds (None without either)."""
    return round(1e6 * cpu_s / samples, 2) if cpu_s is not None and samples else None


def fed(aus: Sequence[float | None], samples: Sequence[int],
        windows: Sequence[float | None]) -> dict[str, float | None]:
    """A training epoch's GPU figures from each GPU's (or rank's) consumer: AU their mean and lowest; delivered per
    second, the samples all GPUs consumed in AU's windows over the longest window. Not the sum of each GPU's own
    rate: on a saturated client a GPU whose window was short would add a rate the pipeline never gave all GPUs at
    once (each window starts at its GPU's first step, so windows, not clocks, are compared: ranks' clocks differ)."""
    au = [a for a in aus if a is not None]
    spans = [(n, w) for n, w in zip(samples, windows, strict=True) if w]
    longest = max((w for _, w in spans), default=0.0)
    return {"au": round(sum(au) / len(au), 4) if au else None, "au_min": round(min(au), 4) if au else None,
            "delivered_per_s": round(sum(n for n, _ in spans) / longest, 2) if longest else None}


def warm_up(source: Source, order: np.ndarray, conc: int, ui: UI,
             io_timeout_s: float | None = DEFAULT_IO_TIMEOUT_S) -> None:
    """Read the samples once, not measured, so that a warm run starts warm (with the engine's watchdog: a stall
    raises StorageStalled naming the warm-up)."""
    engine = ThreadEngine(max(conc, 4), io_timeout_s=io_timeout_s)
    try:
        with ui.progress("warming the page cache (not measured)", len(order), counts=False) as tick:
            engine.epoch(source, order, EpochRecorder(len(order), max(conc, 4)), tick)
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
                fits_in_ram: bool, ui: UI, state: str = "cold", source_name: str = "files",
                pipeline: str = pipelines.RAW) -> Run:
    """One shuffled epoch (cold unless `state` says warm) read by `gpus` emulated GPUs at once, each with its
    own input pipeline over its shard (raw: iobench's DataLoader over its shard of the permutation, as
    DistributedSampler deals it; another pipeline: that library's own, made once per training run, pipelines.FEEDS)
    and its own consumer. Storage that stops answering (`settings.io_timeout_s`) raises StorageStalled with the
    partial run as its `run`; a user's pipeline that raises, UserCodeError."""
    source = store.source(source_name, manifest, ui)
    order = epoch_order("shuffled", len(manifest), settings.seed, epoch)
    spec = pipelines.parse(pipeline)
    feeds: Sequence[Loader] = ([engines.make(settings, workers, loader=True) for _ in range(gpus)] if spec.raw else
                               FEEDS.loaders(spec, manifest.paths, manifest.sizes, gpus, workers, settings.batch_size,
                                             settings.seed, epoch, real_gpus=settings.consumer == "cuda"))
    lanes = [Lane(feed, shard(order, r, gpus), make_consumer(settings, r)) for r, feed in enumerate(feeds)]
    eviction, resident = prepare_cache(state, source.files(), source, max(workers, 1), epoch, fits_in_ram, ui,
                                        io_timeout_s=settings.io_timeout_s, where=store.open(manifest.root))
    label = (f"training {gpus} GPU{'s' if gpus > 1 else ''} x {workers} workers"
             + ("" if spec.raw else f", {spec.text}"))
    got = read_epoch(source, lanes, label, ui, device=device, catch=(BaseException,), close=True)
    loader, errors = lanes[0].engine, got.errors
    stalls = [e for e in errors if isinstance(e, StorageStalled)]
    if stalls:  # the partial run goes with the error, for the caller to keep
        stuck = tuple(p for e in stalls for p in e.stuck)
        stall = StorageStalled.after(sum(e.pending for e in stalls), stalls[0].timeout_s).with_note(
            f"during a training run at {gpus} GPU{'s' if gpus > 1 else ''}")
        stall.stuck, stall.left_behind = stuck, left_behind_text(stuck)
        stall.run = summarize(got.figures(), source.name, "shuffled", loader, state, epoch, eviction, resident,
                              False, gpus=gpus, consumer_rate=settings.rate_per_gpu, pipeline=spec.text)
        raise stall
    if errors and isinstance(errors[0], OSError):
        raise explain_oserror(errors[0], f"reading the dataset {manifest.root} failed during a training run")
    if errors:
        raise errors[0]
    source.close()
    consumers = [lane.consumer for lane in lanes if lane.consumer is not None]
    waits = np.array([w for c in consumers for w in c.waits], dtype=np.float64) * 1e9
    run = consumed(summarize(got.figures(), source.name, "shuffled", loader, state, epoch, eviction, resident, True,
                             gpus=gpus, consumer_rate=settings.rate_per_gpu, pipeline=spec.text,
                             batch_wait_ms=Latency(**latency_summary(waits)) if len(waits) else None,
                             **fed([c.au for c in consumers], [c.samples for c in consumers],
                                   [c.window_s for c in consumers])))
    if not spec.raw:  # the library read the samples: no read of its was timed (null, not 0)
        return run.model_copy(update={"latency_ms": None, "open_ms": None, "decode": spec.decodes})
    changed_during(run, manifest, source, [(lane.order, lane.rec.nbytes) for lane in lanes])  # marks it invalid, if so
    return run


def merge_recorders(recs: list[EpochRecorder]) -> EpochRecorder:
    """The GPUs' recorders as one: all their samples, from the first start to the last stop."""
    merged = EpochRecorder(0, 1)
    for name in ("total_ns", "open_ns", "nbytes", "throttled", "decode_ns", "decode_cpu_ns"):
        arrays = [getattr(r, name) for r in recs]
        if all(a is not None for a in arrays):  # decode's only where every recorder has them
            setattr(merged, name, np.concatenate(arrays))
    merged.t_start = min(r.t_start for r in recs)
    merged.t_end = max(r.t_end for r in recs)
    merged.t_first = min((r.t_first for r in recs if r.t_first), default=0.0)
    merged.done = [merged.samples()]
    merged.timeline = [(0.0, 0), (merged.t_end - merged.t_start, merged.done[0])]
    return merged
