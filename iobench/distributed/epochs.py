"""The job's epochs on every rank, and what rank 0 makes of them: the dataset and settings rank 0 hands out, each
epoch read together, every rank's figures gathered and recorded, and what each epoch proves (docs/distributed.md)."""

from __future__ import annotations

import math
import threading
import time
import zlib
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

from iobench import engines, store
from iobench.answer.cluster import host_cpu
from iobench.answer.rules import consumed
from iobench.dataset import describe_damage, scan
from iobench.distributed.job import Job, RankLost, first_line
from iobench.distributed.launch import COMPLETE, RESULT, note
from iobench.engines import Loader
from iobench.errors import EnvironmentRefused, Interrupted
from iobench.gpu.consumer import make_consumer
from iobench.host.mounts import host_info
from iobench.host.stall import StorageStalled
from iobench.phases.epoch import Figures, Lane, Shown, fed, prepare_cache, read_epoch, sizes_read, summarize
from iobench.phases.pipeline import finish
from iobench.phases.runner import RunContext
from iobench.record.order import epoch_order, shard
from iobench.record.recorder import histogram_summary, latency_histogram
from iobench.result import Cpu, Distributed, Latency, RankEpoch, RankRecord, Run, Settings

# -- what each epoch proves -----------------------------------------------------------------------------------
_MIX = np.uint64(0x9E3779B97F4A7C15)


def coverage(indices: np.ndarray) -> tuple[int, int, int]:
    """(count, sum of indices, sum of a 64-bit mix of them mod 2^64): what a rank read, in three numbers that add up
    across ranks. Every sample read exactly once across ranks <=> the sums equal those of 0..n-1 (a duplicate and
    a miss that cancel in both sums at once is not a practical outcome)."""
    idx = indices.astype(np.uint64)
    with np.errstate(over="ignore"):
        mixed = (idx + np.uint64(1)) * _MIX
        mixed ^= mixed >> np.uint64(29)
        h = int(mixed.sum(dtype=np.uint64))
    return int(idx.size), int(indices.sum(dtype=np.int64)), h


def read_once(parts: list[tuple[int, int, int]], n: int) -> bool:
    """The ranks' coverages together are exactly the samples 0..n-1, each once."""
    count, total, mixed = (sum(column) for column in zip(*parts, strict=True))
    return (count, total, mixed % (1 << 64)) == coverage(np.arange(n, dtype=np.int64))


def digest(indices: np.ndarray) -> str:
    """A fingerprint of the samples a rank read (CRC32 of their sorted indices): a fresh global shuffle deals each
    rank a different set every epoch."""
    return f"{zlib.crc32(np.sort(indices).astype('<i8').tobytes()):08x}"


def steps_per_rank(n: int, world_size: int, batch: int) -> int:
    """Steps every rank joins in an epoch: those of the largest share (a smaller share joins the rest empty)."""
    return math.ceil(math.ceil(n / world_size) / batch)


# -- the epochs ------------------------------------------------------------------------------------------------
@dataclass
class _Mine:
    """What one rank measured in one epoch, sent to rank 0 (plain data: it crosses hosts as a pickled object): its
    own figures as the result keeps them (`record`), and what rank 0 merges unrounded."""

    rank: int
    record: RankEpoch  # this rank's epoch in `result.ranks`
    seconds: float
    au: float | None
    consumed: int  # samples its GPU consumed in AU's window (steps 2..n)
    window_s: float | None  # AU's window
    allreduce_s: float
    resident: float | None  # unrounded: rules.measures judges it against thresholds
    latency: bytes  # encoded HdrHistogram of open + read + close, ns
    opens: bytes  # the same of the open alone
    eviction: str | None
    coverage: tuple[int, int, int]
    mismatch: str  # the first sample whose read returned another size than the manifest's, with both ("": none)
    first_batch_s: float | None  # its DataLoader's start-up: from the epoch's start to its first batch


def fits(local_ranks: int, workers: int, cpus_usable: float) -> bool:
    """A host's ranks with their readers (their DataLoader workers, or the rank itself at 0) within the cores they
    may use; past that they are oversubscribed and compete for CPU."""
    return local_ranks * max(workers, 1) <= cpus_usable


def workers_per_rank(settings, local_ranks: int, cpus_usable: float) -> int:
    """One worker count for every rank: the one given, else the largest of the workload's sweep that keeps every
    rank of this host with its workers within the cores it may use (at least 1)."""
    fitting = [w for w in settings.concurrency if fits(local_ranks, w, cpus_usable)]
    return max(fitting) if fitting else min(settings.concurrency)


def execute(job: Job, manifest, settings, ui, result=None, result_path: Path | None = None):
    """Every epoch of the job, on every rank: settings.cache states x settings.epochs, shuffled, through a DataLoader
    of `settings.concurrency[0]` workers per rank. Rank 0 (with `result`) gathers and saves after each epoch and
    ends with the verdict; the other ranks return None."""

    if result is not None:
        note(RESULT, str(result_path))  # under `--ranks`: where the launcher says the result is
    # rank 0 keeps its epochs as the phase runner does (phases/runner.py): the same record, saved after each
    ctx = RunContext(manifest, settings, result, result_path, ui) if result is not None and result_path else None
    source = store.source("files", manifest, ui)
    engine = engines.make(settings, settings.concurrency[0], loader=True)
    epoch = 0
    try:
        for epoch, state in enumerate([s for s in settings.cache for _ in range(settings.epochs)], 1):
            mine = _epoch(job, manifest, settings, source, engine, state, epoch, ui)
            parts: list[Any] | None = [None] * job.w.world_size if job.w.rank == 0 else None  # rank 0 gathers
            job.collective(partial(job.dist.gather_object, mine, parts, dst=0), f"gathering epoch {epoch}")
            if ctx is not None:
                assert parts is not None  # the rank with the result is rank 0, which gathers
                # as one host's epochs are: appended and saved at once
                ctx.record(_merged(job, parts, manifest, settings, state, epoch, engine, result, ui))
    except KeyboardInterrupt:
        job.fail("interrupted (Ctrl-C or SIGTERM)")
        if result is None:
            raise
        result.save(result_path)
        raise Interrupted(f"interrupted: kept what was gathered in {result_path}") from None
    except Exception as exc:
        if isinstance(exc, StorageStalled) and exc.left_behind:  # a process stuck in IO preparing the cache
            ui.warn(exc.left_behind)
        job.fail(first_line(exc))
        if not isinstance(exc, (EnvironmentRefused, OSError)):
            # e.g. this rank's DataLoader workers ended by the launcher, which stops every rank once one died: name
            # the rank that went first when the heartbeats tell, else say what happened here, in one line
            lost = job.diagnose(f"reading epoch {epoch}", exc)
            exc = lost if lost.named else RankLost(f"rank {job.w.rank} on {job.w.host}: {first_line(exc)}")
        if result is None:
            raise exc from None
        result.warnings.append(f"the run stopped at epoch {epoch}: {first_line(exc)}")
        result.save(result_path)
        if isinstance(exc, EnvironmentRefused):  # a lost rank, a stalled storage: exit 3, what was gathered kept
            raise RankLost(f"{exc} (kept what was gathered in {result_path})") from None
        raise
    finally:
        engine.close()
        source.close()
    if result is None:
        return None
    assert result_path is not None  # given with the result
    finish(result, result_path)
    note(COMPLETE)
    return result


def _epoch(job: Job, manifest, settings, source, engine: Loader, state: str, epoch: int,
           ui) -> _Mine:
    """One epoch on this rank: the cache prepared on every host, all ranks start together, this rank reads its
    share (phases/epoch.read_epoch) and joins every step's allreduce. An epoch cut short raises what stopped it: the
    job ends before the gather, so every epoch gathered is complete."""
    w = job.w
    fits = manifest.total_bytes < host_info()["ram_bytes"]  # this host's RAM: its page cache
    where = store.open(manifest.root)
    eviction = resident = None
    if job.evictor:  # one rank per host evicts (or warms) that host's page cache for all its ranks
        eviction, resident = prepare_cache(state, source.files(), source, engine.concurrency, epoch, fits, ui,
                                            io_timeout_s=settings.io_timeout_s, where=where)
    job.wait_all(f"cache/{epoch}", f"preparing the page cache for epoch {epoch}")
    if not job.evictor:
        resident = where.resident(source.files(), seed=epoch, timeout_s=settings.io_timeout_s)
    mine = shard(epoch_order("shuffled", len(manifest), settings.seed, epoch), w.rank, w.world_size)
    consumer = make_consumer(settings, w.local_rank)
    total_steps = job.steps + steps_per_rank(len(manifest), w.world_size, settings.batch_size)
    waits = [0.0, 0.0]  # data wait, allreduce
    last = [0.0]

    def step(batch) -> None:  # per batch, in the training loop: the GPU's step, then the gradient's allreduce
        job.in_loader(False)
        waits[0] += time.perf_counter() - last[0]
        consumer.batch(batch)
        waits[1] += job.step()
        last[0] = time.perf_counter()
        job.in_loader()

    def last_steps() -> None:  # a share one sample short: join the last step with nothing to consume
        while job.steps < total_steps:
            waits[1] += job.step()

    job.collective(job.dist.barrier, f"starting epoch {epoch}")
    lane = Lane(engine, mine, consumer, on_batch=step, after=last_steps)
    label = f"epoch {epoch} {state}, rank {w.rank} of {w.world_size}"
    shown = None
    if w.rank == 0 and w.world_size > 1:  # rank 0 shows the job's progress: every rank's samples, of the epoch's
        job.watch([len(range(r, len(manifest), w.world_size)) for r in range(w.world_size)], settings.batch_size)
        label = f"epoch {epoch} {state}, {w.world_size} ranks"
        shown = Shown(len(manifest), lambda done: job.cluster or (0, None))
    last[0] = time.perf_counter()
    # watched where the loader has its own watchdog (workers: at 0 the main thread reads, and is not watched)
    watched = settings.io_timeout_s if engine.workers else None
    try:
        got = read_epoch(source, [lane], label, ui, during=job.reading(watched),
                         on_tick=lambda done: job.in_loader(),  # the loader's tick: its main thread is alive in it
                         catch=(), shown=shown)  # nothing kept: what stops this rank's epoch ends the job
    finally:
        job.watch(None)
    rec = lane.rec
    read = rec.read_mask()
    mismatched, name, what = sizes_read(manifest, source, [(mine, rec.nbytes)])
    lat = latency_histogram(rec.total_ns[read])
    samples, seconds = rec.samples(), rec.seconds()
    record = RankEpoch(
        epoch=epoch, cache=state, complete=True, samples=samples, bytes=int(rec.nbytes[read].sum()),
        seconds=round(seconds, 6), samples_per_s=round(samples / seconds, 2),
        au=None if consumer.au is None else round(consumer.au, 4), data_wait_s=round(waits[0], 4),
        allreduce_s=round(waits[1], 4), steps=consumer.steps, latency_ms=Latency(**histogram_summary(lat)),
        cpu=Cpu(**got.cpu), resident_before=None if resident is None else round(resident, 4),
        shard_digest=digest(mine[read]))
    return _Mine(
        rank=w.rank, record=record, seconds=seconds, au=consumer.au, consumed=consumer.samples,
        window_s=consumer.window_s, allreduce_s=waits[1], resident=resident, latency=lat.encode(),
        opens=latency_histogram(rec.open_ns[read]).encode(), eviction=eviction,
        coverage=coverage(mine[read]), mismatch=f"{name} {what}" if mismatched else "",
        first_batch_s=rec.first_batch_s())


def _merged(job: Job, parts: list[_Mine], manifest, settings, state: str, epoch: int, engine: Loader,
            result, ui) -> Run:
    """Rank 0: one aggregate run for the epoch (the ranks' figures merged, their latencies as histograms, made a Run
    by phases/epoch.summarize as one host's are), each rank's own figures kept in `result.ranks`; an epoch whose
    samples were not all of the manifest's sizes is left out, with a warning."""
    for p in parts:
        result.ranks[p.rank].epochs.append(p.record)
    lat, opens = HdrHistogram.decode(parts[0].latency), HdrHistogram.decode(parts[0].opens)
    for p in parts[1:]:  # the job's histograms: every rank's added to rank 0's
        lat.add(HdrHistogram.decode(p.latency))
        opens.add(HdrHistogram.decode(p.opens))
    pace = [p.record.samples / max(p.seconds - p.allreduce_s, 1e-9) for p in parts]  # each rank's own pace
    samples = sum(p.record.samples for p in parts)
    seconds = max(p.seconds for p in parts)  # they started together at the barrier: the job's epoch ends with its last
    resident = max((p.resident for p in parts if p.resident is not None), default=None)
    busiest = max(host_cpu(result, epoch), key=lambda x: x.cores)  # the aggregate's CPU: the busiest host's
    figures = Figures(
        samples=samples, bytes=sum(p.record.bytes for p in parts), seconds=seconds, latency=histogram_summary(lat),
        first_batch_s=min((p.first_batch_s for p in parts if p.first_batch_s is not None), default=None),
        opens=histogram_summary(opens), decoded=settings.decode, decodes=None, decode_share=None,
        cpu={"system_busy_pct": busiest.busy_pct, "iowait_pct": busiest.iowait_pct, "iobench_cores": busiest.cores},
        disk=None, timeline=[(0.0, 0), (seconds, samples)])
    run = consumed(summarize(
        figures, "files", "shuffled", engine, state, epoch, parts[0].eviction, resident,
        True, gpus=job.w.world_size, consumer_rate=settings.rate_per_gpu,
        **fed([p.au for p in parts], [p.consumed for p in parts], [p.window_s for p in parts]), ranks=job.w.world_size,
        slowest_rank=int(np.argmin(pace)), straggler_spread=round((max(pace) - min(pace)) / max(pace), 4),
        read_once=read_once([p.coverage for p in parts], len(manifest))))
    odd = [p for p in parts if p.mismatch]
    if odd:  # every sample was read once, but not all of it was the dataset the manifest describes
        said = "; ".join(f"rank {p.rank} on {result.ranks[p.rank].host}: {p.mismatch}" for p in odd)
        run.valid, run.invalid_reason = False, (f"samples read another size than the manifest says ({said}): the "
                                                "dataset changed during the run, or a host's mount shows other files")
        result.warnings.append(f"epoch {epoch} is left out: {run.invalid_reason}")
        ui.warn(result.warnings[-1])
    return run


# -- the start of a job: the dataset, the settings, the mounts -------------------------------------------------
def lead(job: Job, manifest, settings, result, ui) -> None:
    """Rank 0, once the dataset is made or checked: tell the other ranks what to read and how (its settings are the
    job's), meet their mounts, and record the job's shape in the result."""

    job.publish("dataset", {"root": store.published(manifest.root), "files": len(manifest),
                            "bytes": manifest.total_bytes, "made": result.dataset.made_by_iobench,
                            "settings": settings.model_dump_json()})
    if not result.dataset.made_by_iobench:  # rank 0 listed it already: the others list on their hosts (follow)
        job.wait_all("scanned", "listing the dataset on every host")
    mounts = _mounts(job, manifest.root)
    per_host = dict(Counter(p.host for p in job.peers))  # in the order of their first rank: node 0 holds rank 0
    workers = settings.concurrency[0]
    result.distributed = Distributed(
        world_size=job.w.world_size, nodes=len(per_host), ranks_per_node=per_host, backend="gloo",
        rendezvous=job.w.rendezvous, launcher=job.w.launcher, timeout_s=job.timeout_s, workers=workers, mounts=mounts,
        # without a client cache (objects) ranks on one host share nothing of what they read
        shared_page_cache=any(n > 1 for n in per_host.values()) and store.open(manifest.root).client_cache)
    result.ranks = [RankRecord(rank=p.rank, local_rank=p.local_rank, host=p.host, pid=p.pid,
                               cpus_usable=p.cpus_usable) for p in job.peers]
    notes = []
    for h, n in per_host.items():
        usable = min(p.cpus_usable for p in job.peers if p.host == h)
        if not fits(n, workers, usable):
            readers = (f"{n} rank{'s' if n > 1 else ''} x {workers} DataLoader worker{'s' if workers > 1 else ''}"
                       if workers else f"{n} ranks, each reading itself (--workers 0),")
            notes.append(f"{h} is oversubscribed: {readers} read on the {usable:g} cores they may use, so they "
                         "compete for CPU and the node's CPU may set the pace (fewer ranks or --workers per rank)")
    if result.distributed.shared_page_cache:
        shared = ", ".join(f"{h} ({n} ranks)" for h, n in per_host.items() if n > 1)
        notes.append(f"ranks share a host and its page cache: {shared}; a sample one rank reads may reach another "
                     "from RAM within an epoch, and one eviction per host empties it for all of them")
    ours = mounts[job.peers[0].host]
    for host, line in mounts.items():
        if line != ours:
            notes.append(f"{host} mounts the dataset differently from rank 0's host ({host}: {line}; "
                         f"{job.peers[0].host}: {ours}): its ranks' figures may not stand for the others'")
    for warning in notes:
        result.warnings.append(warning)
        ui.warn(warning)
    ui.info(f"distributed: {job.w.world_size} ranks on {len(per_host)} host{'s' if len(per_host) > 1 else ''} "
            f"({', '.join(f'{h}: {n}' for h, n in per_host.items())}), {workers} DataLoader workers per rank, "
            f"rendezvous {job.w.rendezvous}")


class DatasetDiffers(EnvironmentRefused):
    """This rank sees another dataset at rank 0's path; the message names the rank and its host (rank 0 says it as
    it is)."""


def follow(job: Job, ui) -> None:
    """Ranks 1..W-1: wait for rank 0's dataset and settings (as long as rank 0 is alive), check this host sees the
    same dataset (its file count and bytes; its files against the manifest where `job.checks_files`), then read the
    epochs with the others. A refusal is one line naming this rank, its host and what differs: rank 0 says it."""

    info = job.receive("dataset", "waiting for rank 0 to make or check the dataset")
    settings = Settings.model_validate_json(info["settings"])
    root = store.location(info["root"])
    try:
        manifest = _same_dataset(job, info, root, settings.follow_links)
    except DatasetDiffers as exc:
        job.fail(str(exc), says_who=True)
        raise
    _mounts(job, manifest.root)
    execute(job, manifest, settings, ui)


def _same_dataset(job: Job, info: dict, root: store.Location, follow_links: bool = False):
    """The manifest of the dataset rank 0 published, as this host sees it; DatasetDiffers when it is not the same
    (another file count or size, or files that differ from the manifest where `job.checks_files`)."""

    here = job.where(job.w.rank)
    try:
        if info["made"]:
            with closing(store.home_of(root)) as home:
                manifest = home.manifest()
        else:  # one rank per host lists the tree and caches the listing; the others of that host read the cache
            assert isinstance(root, Path)  # a tree read in place (--dataset) is a folder
            if job.evictor:
                manifest = scan(root, cache=True, follow_links=follow_links)
            job.wait_all("scanned", "listing the dataset on every host")
            if not job.evictor:
                manifest = scan(root, cache=True, follow_links=follow_links)
    except OSError as exc:
        raise DatasetDiffers(f"{here} cannot read the dataset at {root} that rank 0 reads: {exc.strerror or exc} "
                             "(every node must mount the same storage at the same path)") from None
    except EnvironmentRefused as exc:  # a bucket this host cannot reach, or its credentials cannot read
        raise DatasetDiffers(f"{here}: {exc}") from None
    if (len(manifest), manifest.total_bytes) != (info["files"], info["bytes"]):
        raise DatasetDiffers(f"{here} sees {len(manifest):,} files ({manifest.total_bytes:,} B) at {root}; rank 0 "
                             f"sees {info['files']:,} ({info['bytes']:,} B): every node must mount the same dataset "
                             "at the same path")
    damage = _differing_files(manifest) if job.checks_files else ""
    if damage:
        raise DatasetDiffers(f"{here} sees other files at {root} than the dataset's manifest says: {damage}: every "
                             "node must mount the same dataset at the same path")
    return manifest


def _differing_files(manifest) -> str:
    """The files of `manifest` that this host sees missing or of another size, in words ("" when none): each file
    stat-ed as rank 0's are when it reuses a dataset."""
    root = manifest.root
    rel = [manifest.paths.rel(i) for i in range(len(manifest))]
    with closing(store.home_of(root)) as home:
        found = home.sizes(rel, store.open(root).writers(), threading.Event())
    bad = np.flatnonzero(found != manifest.sizes)
    return describe_damage(root, rel, manifest.sizes, found, bad) if len(bad) else ""


def _mounts(job: Job, root: store.Location) -> dict[str, str]:
    """Once every rank has checked the dataset (no time limit while all are alive): every host's mount of it
    (fstype, source, options; a bucket: s3, its endpoint), met by all ranks; by host name."""
    job.wait_all("checked", "checking the dataset's files on every host")
    d = store.open(root).describe(root)
    line = f"{d['fstype']} {d['source']} {d['options']}"
    gathered: list[Any] = [None] * job.w.world_size
    job.collective(lambda: job.dist.all_gather_object(gathered, (job.w.host, line)), "meeting the mounts")
    return dict(gathered)
