"""Object storage's own comparisons (`run --url`, docs/s3.md), each measured in the same run as the plain objects:
the mitigations' variants (`--mitigations`, read as the files' are: the tar shards of `pack --url` by ranged GETs
and streamed, more GETs in flight) and the FUSE view (`--mount` with `--url`: the same bucket read as files,
`fuse_manifest` checks it holds the keys)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import numpy as np

from iobench import engines, store
from iobench.dataset import Manifest
from iobench.dataset.paths import PathTable
from iobench.engines import Engine
from iobench.errors import UserError
from iobench.phases.epoch import EpochSpec, Lane
from iobench.phases.mitigations import STREAM_NOTE, Variant, baseline_readers
from iobench.phases.runner import RunContext, step
from iobench.phases.runner import epoch as epoch_of
from iobench.progress import Step
from iobench.record.order import epoch_order
from iobench.result import FuseView, Run
from iobench.sources import Source

STATS = 32  # stats in flight checking a FUSE view against the dataset's keys
STAT_CHUNK = 256  # files a stat thread checks per task


DEEPER = 8  # GETs in flight per reader of the "more in flight" row, where the sweep went no deeper


def object_variants(in_flight: list[int], readers: int = 1) -> list[Variant]:
    """What `--mitigations` measures on object storage, the baseline first (one GET at a time per reader), the
    last more requests in flight from the same readers (the sweep's deepest --in-flight, at least DEEPER)."""
    deeper = max([DEEPER, *in_flight])
    return [Variant("baseline"), Variant("tar-range", source="tar"),
            Variant("tar-stream", source="tar", stream=True, note=STREAM_NOTE + " (one GET per shard)"),
            Variant(f"in-flight-{deeper}", source="files", depth=deeper,
                    note=f"{deeper} GETs in flight per reader, {readers * deeper} in all (the others: 1 per reader)")]


def stream_order(source: Source, engine: Engine, seed: int, epoch: int) -> np.ndarray:
    """WebDataset's read order for this engine's readers: its threads, or its workers a batch at a time."""
    order_of = cast(Any, source).stream_order  # a tar pack's in a bucket (sources/s3_tar.py StreamSource)
    if engine.workers is None:
        return order_of(seed, epoch, readers=engine.concurrency)
    return order_of(seed, epoch, readers=max(1, engine.workers), batch=engine.batch_size or 1)


def requests(source: Source, run: Run, lane: Lane) -> tuple[int, dict, dict]:
    """A mitigation's GETs: count, time to first byte and whole (a tar stream's, one per shard: its source's)."""
    own = getattr(source, "requests", None)
    return own(lane.order, lane.rec) if own is not None else (run.samples, run.opened.model_dump(),
                                                              run.timed.model_dump())


def _epoch(ctx: RunContext, engine: Engine, source: Source, label: str, order: np.ndarray) -> Run:
    """One cold shuffled epoch of the FUSE view's comparison, through the runner (kept at once; a failure ends the
    run)."""
    settings, result = ctx.settings, ctx.result
    spec = EpochSpec("shuffled", "cold", len(result.runs) + 1, settings.seed, None, result.dataset.fits_in_ram,
                     order_array=order, mitigation=label, io_timeout_s=settings.io_timeout_s)
    try:
        return epoch_of(ctx, None, engine, source, spec)
    finally:
        engine.close()
        source.close()


def fuse_manifest(manifest: Manifest, mount: str) -> Manifest:
    """The dataset's files on the FUSE view at `mount`: the bucket mounted at its top (MOUNT/PREFIX/NAME), the
    bucket as a folder (MOUNT/BUCKET/PREFIX/NAME) or the --url prefix mounted (MOUNT/NAME); refused in one line where
    none holds every key with its size."""
    loc = manifest.root
    top = Path(mount)
    if not top.is_dir():
        raise UserError(f"--mount {mount}: not a folder (with --url it is a FUSE view of the same bucket)")
    rel = [manifest.paths.rel(i) for i in range(len(manifest))]
    tried = []
    for folder in store.open(loc).fuse_folders(loc, top):
        tried.append(str(folder))
        if not folder.is_dir():
            continue
        wrong = _first_mismatch(folder, rel, manifest.sizes)
        if wrong is None:
            return Manifest(folder, PathTable.relative(folder, rel), manifest.sizes)
        raise UserError(f"--mount {mount} is not a view of {loc}: {wrong} (give the FUSE mount of the same bucket)")
    raise UserError(f"--mount {mount} holds no copy of {loc} (looked for {', '.join(tried)}): give the FUSE mount of "
                    "the same bucket")


def _first_mismatch(folder: Path, rel: list[str], sizes: np.ndarray) -> str | None:
    """What differs first between the folder and the dataset's keys and sizes, or None. The stats go STATS at once:
    one after another, a FUSE view's round trip per file would take ImageNet's 1.28 M files minutes."""
    want = sizes.tolist()

    def check(lo: int) -> str | None:
        for i in range(lo, min(lo + STAT_CHUNK, len(rel))):
            try:
                got = os.stat(folder / rel[i]).st_size
            except OSError:
                return f"{folder / rel[i]} is missing"
            if got != want[i]:
                return f"{folder / rel[i]} has {got:,} bytes, the object {want[i]:,}"
        return None

    ex = ThreadPoolExecutor(max_workers=STATS, thread_name_prefix="iobench-fuse-check")
    try:
        return next((w for w in ex.map(check, range(0, len(rel), STAT_CHUNK)) if w is not None), None)
    finally:
        ex.shutdown(wait=True, cancel_futures=True)  # the first mismatch is enough


def fuse_phase(ctx: RunContext, fuse: Manifest) -> None:
    """The same shuffled epoch, cold, at the same readers: the objects by GETs, then the files through the FUSE view;
    then which is faster and by how much (`result.fuse_view`)."""
    manifest, settings, result, ui = ctx.manifest, ctx.settings, ctx.result, ctx.ui
    readers = baseline_readers(result)
    order = epoch_order("shuffled", len(manifest), settings.seed, len(result.runs) + 1)
    runs = []
    for label, m in (("objects", manifest), ("fuse-view", fuse)):
        with step(ctx, Step("fuse view", label, len(manifest), "fuse view")):
            source = store.source("files", m, ui)
            runs.append(_epoch(ctx, engines.make(settings, readers), source, label, order))
    rates = [run.samples_per_s for run in runs]
    objects, files = rates
    faster = "files" if files > objects else "objects"
    result.fuse_view = FuseView(
        mount=str(settings.fuse_view), fstype=store.open(fuse.root).place(fuse.root)[0], dataset=str(fuse.root),
        readers=readers,
        cache="cold", objects_samples_per_s=objects, files_samples_per_s=files, faster=faster,
        ratio=round(max(rates) / min(rates), 3) if min(rates) > 0 else 0.0, valid=all(r.valid for r in runs))
    ctx.save()
