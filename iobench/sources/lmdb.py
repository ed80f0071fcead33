"""The lmdb source: samples as values of one LMDB (made by `iobench.sources.pack_lmdb`), key = the sample index as
8-byte big-endian.

One read-only env per process (`readonly=True, lock=False`), opened by its first reader and shared by its threads,
kept per `os.getpid()`: LMDB forbids using an env across fork, and py-lmdb (3.x) refuses to open files already open
in the process, bookkeeping a forked child inherits, so the child first closes the env it inherited (its own copy
of the mapping), then opens its own. For the same reason a process holds one env per LMDB: the other `readahead`
setting closes the first (its readers stop working; sources run one after another). Each reader keeps one read
transaction for its life (nothing writes while a benchmark reads) and copies values out of the map
(`buffers=True`).

Timing: py-lmdb's `get` touches every page of the value before it returns (its "preload", GIL released), so the
lookup and all the IO happen inside `txn.get` and cannot be timed apart: `open_ns` is 0; the copy after is from
memory (~10 us for 110 KiB). `readahead=False` makes LMDB madvise(MADV_RANDOM) the map: each 4 KiB page of a value
is then its own read (5-10x slower on the beds of docs/performance.md)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from time import perf_counter_ns as _clock
from typing import TYPE_CHECKING

import numpy as np

from iobench.errors import UserError
from iobench.sources.buffers import grown, page_aligned
from iobench.sources.pack_folder import read_pack_marker
from iobench.sources.pack_lmdb import LMDB_DATA, LMDB_SIZES, import_lmdb

if TYPE_CHECKING:
    import lmdb

MAX_READERS = 1024  # unused with lock=False (no reader table) but set high in case a build wants it

_envs: dict[str, tuple[int, bool, lmdb.Environment]] = {}  # LMDB folder -> (pid, readahead, env)
_envs_lock = threading.Lock()


def _reset_after_fork() -> None:
    global _envs_lock
    _envs_lock = threading.Lock()  # a lock another thread held at fork would stay locked in the child


os.register_at_fork(after_in_child=_reset_after_fork)


def open_env(path: Path, readahead: bool):
    """This process's read-only env of the LMDB at `path` (opened, or reopened after a fork)."""
    key = str(path)
    pid = os.getpid()
    with _envs_lock:
        entry = _envs.get(key)
        if entry is not None:
            owner, ra, env = entry
            if owner == pid and ra == readahead:
                return env
            # Inherited across fork (LMDB forbids using it in the child), or the other readahead
            # setting: py-lmdb would refuse to open the same files again while this one is open.
            del _envs[key]
            env.close()
        lmdb = import_lmdb()
        try:
            env = lmdb.open(key, subdir=True, readonly=True, lock=False, readahead=readahead,
                            max_readers=MAX_READERS, max_spare_txns=0)
        except lmdb.Error as exc:
            raise UserError(f"cannot open the LMDB in {key}: {exc}") from exc
        _envs[key] = (pid, readahead, env)
        return env


class LmdbSource:
    """Samples from an LMDB pack: per sample one B-tree lookup and one copy out of the map."""

    name = "lmdb"

    def __init__(self, path: Path | str, n: int, readahead: bool = True):
        self.path = Path(path).resolve()
        if not (self.path / LMDB_DATA).is_file():
            raise UserError(f"{self.path} holds no LMDB ({LMDB_DATA} is missing): run iobench pack first")
        self.readahead = readahead
        self.marker = read_pack_marker(self.path) or {}
        sizes_file = self.path / LMDB_SIZES
        self.sizes: np.ndarray | None = np.load(sizes_file) if sizes_file.is_file() else None
        self.n = int(n)
        if self.sizes is not None and len(self.sizes) != self.n:
            raise UserError(f"{self.path}: {len(self.sizes)} samples in {LMDB_SIZES}, {self.n} expected")
        self.max_size = int(self.sizes.max()) if self.sizes is not None and self.n else 0

    def __len__(self) -> int:
        return self.n

    def reader(self) -> LmdbReader:
        """A reader for the calling thread; opens this process's env on first use."""
        return LmdbReader(open_env(self.path, self.readahead), self.max_size)

    def sample_name(self, index: int) -> str:
        return f"{self.name} sample {index}"

    def files(self) -> list[str]:
        return [str(self.path / LMDB_DATA)]

    def close(self) -> None:
        """Close this process's env of the LMDB, if it has one (readers made from it stop working)."""
        with _envs_lock:
            entry = _envs.pop(str(self.path), None)
        if entry is not None and entry[0] == os.getpid():
            entry[2].close()

    def costs(self) -> tuple[int | None, float | None]:
        return self.marker.get("bytes"), self.marker.get("seconds")


class LmdbReader:
    __slots__ = ("_env", "_txn", "_get", "buffer", "open_ns", "total_ns")
    throttled = 0  # answers throttled before a read: none here (Reader)

    def __init__(self, env, max_size: int):
        self._env = env  # keeps the env alive as long as the reader
        self._txn = env.begin(buffers=True)  # one snapshot for the reader's life: nothing writes
        self._get = self._txn.get
        self.buffer = page_aligned(max_size)  # on a page: sources/buffers.py
        self.open_ns = 0  # LMDB has no per-sample open (see the module's docstring)
        self.total_ns = 0  # the last read's lookup, IO and copy

    def read(self, index: int) -> int:
        t0 = _clock()
        value = self._get(index.to_bytes(8, "big"))  # lookup + all the value's IO (py-lmdb preloads it)
        if value is None:
            raise IndexError(f"sample {index} is not in the LMDB")
        n = len(value)
        if n > len(self.buffer):  # slow path: a value longer than the manifest said
            self.buffer = grown(self.buffer, n)
        self.buffer[:n] = value  # from memory
        self.total_ns = _clock() - t0
        return n
