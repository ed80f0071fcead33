"""Mitigations, measured: the same read pattern on the same storage with one thing changed, so each one's
speed-up (and cost: extra space, pack time) is a like-for-like ratio against the baseline.

A mitigation is a data layout (LMDB, tar shards read at random or streamed as WebDataset does), a hint to
the page cache (posix_fadvise RANDOM per file, WILLNEED for the next files of the order), a readahead
setting of the backing device (root only, restored afterwards, Ctrl-C included), or more readers."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iobench.dataset import Manifest
from iobench.errors import UserError
from iobench.measure import EpochRecorder
from iobench.order import epoch_order
from iobench.sources import Source
from iobench.sources.files import FileSource

WILLNEED_DEPTH = 64  # files hinted ahead of the readers
BIG_READAHEAD_KB = 1024


@dataclass(frozen=True)
class Variant:
    """One mitigation: what changes against the baseline."""

    name: str  # runs[].mitigation and mitigations[].name
    source: str = "files"  # files | lmdb | tar
    readahead: bool = True  # lmdb: the env's readahead
    stream: bool = False  # tar: read shards in order (WebDataset), not at random
    advice: str | None = None  # files: posix_fadvise per file
    willneed: bool = False  # files: WILLNEED prefetch of the next files
    read_ahead_kb: int | None = None  # device readahead while this variant runs
    readers: int | None = None  # threads or workers, instead of the baseline's


def variants(baseline_readers: int, can_set_readahead: bool) -> list[Variant]:
    """The mitigations `run --mitigations` measures, after the baseline."""
    out = [
        Variant("fadvise-random", advice="random"),
        Variant("fadvise-willneed", willneed=True),
        Variant("lmdb", source="lmdb"),
        Variant("lmdb-noreadahead", source="lmdb", readahead=False),
        Variant("tar", source="tar"),
        Variant("tar-stream", source="tar", stream=True),
        Variant(f"readers={baseline_readers * 4}", readers=baseline_readers * 4),
    ]
    if can_set_readahead:
        out.insert(2, Variant(f"read_ahead_kb={BIG_READAHEAD_KB}", read_ahead_kb=BIG_READAHEAD_KB))
    return out


def open_source(variant: Variant, manifest: Manifest, ui) -> tuple[Source, dict | None]:
    """The variant's source, packing the dataset first when its pack is missing; and the pack's costs."""
    if variant.source == "files":
        return FileSource(manifest, advice=variant.advice), None
    from iobench import pack

    found = pack.find_pack(manifest, variant.source)
    if found is None:
        with ui.gen_progress(len(manifest)) as progress:
            rep = (pack.pack_lmdb if variant.source == "lmdb" else pack.pack_tar)(manifest, progress=progress)
        ui.info(f"packed {rep.samples:,} samples as {variant.source} in {rep.seconds:.1f} s ({rep.bytes / 1e9:.2f} GB)")
        found = rep.path
    if variant.source == "lmdb":
        from iobench.sources.lmdb import LmdbSource

        src: Source = LmdbSource(found, len(manifest), readahead=variant.readahead)
    else:
        from iobench.sources.tar import TarSource

        src = TarSource(found)
    info = src.describe()  # type: ignore[attr-defined]
    return src, {"extra_bytes": info.get("extra_bytes") or 0, "pack_s": info.get("pack_seconds")}


def epoch_order_for(variant: Variant, source: Source, n: int, seed: int, epoch: int) -> np.ndarray:
    """The order storage sees: a full shuffle, or for tar-stream the shards' own order (the shuffle buffer
    reorders in memory, after the reads)."""
    if variant.stream:
        from iobench.sources.tar import shard_read_order

        return shard_read_order(source, seed, epoch)
    return epoch_order("shuffled", n, seed, epoch)


@contextmanager
def willneed_prefetch(paths: list[str], order: np.ndarray, rec: EpochRecorder,
                      depth: int = WILLNEED_DEPTH) -> Iterator[None]:
    """A thread that keeps POSIX_FADV_WILLNEED hints `depth` files ahead of the readers in `order`, so the
    kernel starts reading the next files while the current ones are consumed."""
    stop = threading.Event()

    def run() -> None:
        q, n = 0, len(order)
        while q < n and not stop.is_set():
            if q >= rec.completed() + depth:
                time.sleep(0.0002)
                continue
            try:
                fd = os.open(paths[order[q]], os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                os.close(fd)
            except OSError:
                pass  # the reader will meet the same error and report it
            q += 1

    t = threading.Thread(target=run, name="iobench-willneed", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def readahead_file(bdi: str) -> Path:
    return Path("/sys/class/bdi") / bdi / "read_ahead_kb"


@contextmanager
def read_ahead_kb(bdi: str, kb: int) -> Iterator[int]:
    """Set the backing device's readahead for the duration, and put the old value back afterwards, also
    when the run is interrupted (Ctrl-C, SIGTERM: iobench turns both into KeyboardInterrupt)."""
    f = readahead_file(bdi)
    try:
        old = int(f.read_text())
        f.write_text(str(kb))
    except OSError as exc:
        raise UserError(f"cannot set read_ahead_kb on {f}: {exc.strerror} (needs root)") from exc
    try:
        yield old
    finally:
        f.write_text(str(old))


def source_files(source: Source, manifest: Manifest) -> list[str]:
    """The files a source reads: what a cold run must evict and what the residency check looks at."""
    if source.name == "lmdb":
        return [str(source.path / "data.mdb")]  # type: ignore[attr-defined]
    if source.name == "tar":
        return sorted(str(p) for p in source.path.glob("shard-*.tar"))  # type: ignore[attr-defined]
    return manifest.paths
