"""The tar source: samples as members of WebDataset-style tar shards (made by `iobench.sources.pack_tar`), read at
random by the offset index: one `os.preadv` of exactly a sample's bytes.

Shard files are opened once per process (`os.getpid()`: a forked DataLoader worker opens its own), by whichever
reader needs one first (which times that open in `open_ns`), and shared by its threads: pread has no file position to
share, and a descriptor per shard per thread would run into the descriptor limit (~550 shards of 256 MiB for
ImageNet, times the threads). `shard_read_order` gives WebDataset's streaming read order for the engines to replay.
"""

from __future__ import annotations

import contextlib
import os
import threading
from array import array
from pathlib import Path
from time import perf_counter_ns as _clock

import numpy as np

from iobench.errors import UserError, explain_oserror
from iobench.sources.buffers import page_aligned
from iobench.sources.pack_folder import read_pack_marker
from iobench.sources.pack_tar import TAR_INDEX, shard_name

_open_lock = threading.Lock()  # serialises first opens of shards (module-level: reset in a forked child)


def _reset_after_fork() -> None:
    global _open_lock
    _open_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


class TarIndex:
    """A tar pack's offset index and marker, as both tar sources read them: this module's, and a bucket's
    (sources/s3_tar.py). The shard, offset and size columns are array('q'): the hot path indexes them as Python ints
    at 8 bytes a sample (a list would take ~36, times ImageNet's 1.28 M samples times forked workers)."""

    name = "tar"

    def __init__(self, index: np.ndarray, marker: dict, shards: int | None, where: object):
        """`shards`: how many the marker lists, checked against the index's (None: it lists none)."""
        self.index = index.astype(np.int64, copy=False)
        self.marker = marker
        self.shards = int(self.index[:, 0].max()) + 1 if len(index) else 0
        if shards is not None and shards < self.shards:
            raise UserError(f"{where}: the index names {self.shards} shards, the marker {shards}")
        self._shard, self._offset, self._size = (array("q", self.index[:, c].tobytes()) for c in range(3))
        self.max_size = int(self.index[:, 2].max()) if len(index) else 0

    def __len__(self) -> int:
        return len(self._size)

    def costs(self) -> tuple[int | None, float | None]:
        return self.marker.get("bytes"), self.marker.get("seconds")


class TarSource(TarIndex):
    """Samples from a tar pack, read at random by offset."""

    def __init__(self, pack_dir: Path | str):
        self.path = Path(pack_dir).resolve()
        try:
            index = np.load(self.path / TAR_INDEX)
        except FileNotFoundError as exc:
            raise UserError(f"{self.path} holds no tar pack ({TAR_INDEX} is missing): run iobench pack first") \
                from exc
        except (OSError, ValueError) as exc:
            raise UserError(f"{self.path / TAR_INDEX}: unreadable tar index ({exc})") from exc
        if index.ndim != 2 or index.shape[1] != 3:
            raise UserError(f"{self.path / TAR_INDEX}: expected (samples, 3) rows, found shape {index.shape}")
        marker = read_pack_marker(self.path) or {}
        names = marker.get("shards", [])
        super().__init__(index, marker, len(names) or None, self.path)
        self.shard_files = [str(self.path / name) for name in names or map(shard_name, range(self.shards))]
        self.sizes = self.index[:, 2]
        self._fds: dict[int, list[int]] = {}  # pid -> one descriptor per shard (-1: not open yet)

    def reader(self) -> TarReader:
        return TarReader(self)

    def _process_fds(self) -> list[int]:
        pid = os.getpid()
        fds = self._fds.get(pid)
        if fds is None:
            fds = self._fds.setdefault(pid, [-1] * len(self.shard_files))
        return fds

    def _open(self, fds: list[int], s: int) -> int:
        with _open_lock:
            if fds[s] < 0:
                try:
                    fds[s] = os.open(self.shard_files[s], os.O_RDONLY | os.O_CLOEXEC)
                except OSError as exc:
                    raise explain_oserror(exc, "cannot open a tar shard") from exc
            return fds[s]

    def sample_name(self, index: int) -> str:
        return f"{self.name} sample {index}"

    def files(self) -> list[str]:
        return self.shard_files

    def close(self) -> None:
        """Close this process's shard descriptors (readers made before reopen them as needed)."""
        fds = self._fds.get(os.getpid())
        if fds is None:
            return
        with _open_lock:
            for s, fd in enumerate(fds):
                if fd >= 0:
                    fds[s] = -1
                    os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown os may be gone
            self.close()

    def __getstate__(self) -> dict:  # picklable for spawn-started workers: no descriptors
        state = dict(self.__dict__)
        state["_fds"] = {}
        return state


class TarReader:
    __slots__ = ("_src", "_fds", "_shard", "_offset", "_size", "buffer", "_view", "open_ns", "total_ns")
    throttled = 0  # answers throttled before a read: none here (Reader)

    def __init__(self, src: TarSource):
        self._src = src
        self._fds = src._process_fds()
        self._shard, self._offset, self._size = src._shard, src._offset, src._size
        self.buffer = self._view = page_aligned(src.max_size)  # on a page: sources/buffers.py
        self.open_ns = 0
        self.total_ns = 0  # the last read's (shard open, if any, and) pread

    def read(self, index: int) -> int:
        t0 = _clock()
        s = self._shard[index]
        fd = self._fds[s]
        if fd < 0:
            fd = self._src._open(self._fds, s)
            self.open_ns = _clock() - t0
        else:
            self.open_ns = 0
        size = self._size[index]
        off = self._offset[index]
        n = os.preadv(fd, [self._view[:size]], off)
        while n < size:  # short read (network file systems): read on
            k = os.preadv(fd, [self._view[n:size]], off + n)
            if k <= 0:
                raise UserError(f"{self._src.shard_files[s]}: ends inside sample {index} (truncated shard?)")
            n += k
        self.total_ns = _clock() - t0
        return n


# ---- WebDataset-style streaming order ------------------------------------------------------------

def _worker_streams(shard_of: np.ndarray, seed: int, epoch: int, workers: int) -> list[np.ndarray]:
    """Each worker's read stream: its shards (dealt round-robin from a per-epoch shuffle of all shards,
    as WebDataset's split_by_worker does), each read from first member to last."""
    order = np.argsort(shard_of, kind="stable")  # members of a shard in index (= offset) order
    ids, starts = np.unique(shard_of[order], return_index=True)
    ends = np.append(starts[1:], len(order))
    perm = np.random.default_rng([seed, epoch, 0x7A5]).permutation(len(ids))
    streams = []
    for w in range(workers):
        mine = perm[w::workers]
        streams.append(np.concatenate([order[starts[j]:ends[j]] for j in mine]) if len(mine)
                       else np.empty(0, dtype=np.int64))
    return streams


def _interleave(streams: list[np.ndarray], batch: int) -> np.ndarray:
    """Round-robin over workers, one batch each, as a DataLoader hands out workers' batches."""
    if len(streams) == 1:
        return streams[0].astype(np.int64)
    longest = max(map(len, streams))
    chunks = [st[at:at + batch] for at in range(0, longest, batch) for st in streams]
    return np.concatenate(chunks).astype(np.int64) if chunks else np.empty(0, dtype=np.int64)


def shard_read_order(index, seed: int, epoch: int, *, workers: int = 1, batch: int = 1) -> np.ndarray:
    """The order in which a WebDataset pipeline reads samples from storage in an epoch, `workers` streams interleaved
    a `batch` at a time (docs/s3.md, "The stream's order"); `index` is a tar pack's (samples, 3) index or a
    TarSource."""
    shard_of = (index.index if isinstance(index, TarSource) else np.asarray(index))[:, 0]
    streams = _worker_streams(shard_of, seed, epoch, max(1, workers))
    return _interleave(streams, max(1, batch))
