"""Sample sources: where a sample's bytes come from. Every pattern runs on every source.

A source hands each worker thread or process its own `Reader`; `Reader.read(index)` reads sample
`index` whole into the reader's reusable buffer and returns its length. One reader per worker keeps
the hot path free of locks and allocations; sources that need per-process state (an LMDB env after
fork) open it in `reader()`.
"""

from __future__ import annotations

import os
from time import perf_counter_ns as _clock
from typing import Protocol

from iobench.dataset import Manifest


class Reader(Protocol):
    buffer: bytearray  # the last sample's bytes are buffer[:n]
    open_ns: int  # time the last read spent opening (0 where a source has no open)

    def read(self, index: int) -> int: ...


class Source(Protocol):
    name: str  # "files", later "lmdb", "tar": the value of runs[].source

    def __len__(self) -> int: ...

    def reader(self) -> Reader: ...


class FileSource:
    """One file per sample, as torchvision's ImageFolder reads them: open, read to EOF, close."""

    name = "files"

    def __init__(self, manifest: Manifest):
        self.paths = manifest.paths
        self.max_size = int(manifest.sizes.max()) if len(manifest) else 0

    def __len__(self) -> int:
        return len(self.paths)

    def reader(self) -> FileReader:
        return FileReader(self.paths, self.max_size)


class FileReader:
    __slots__ = ("paths", "buffer", "_whole", "_eof", "open_ns")

    def __init__(self, paths: list[str], max_size: int):
        self.paths = paths
        self.buffer = bytearray(max_size + 1)  # +1: a file that grew shows up as a full buffer
        self._whole = [self.buffer]
        self._eof = [bytearray(65536)]  # the read that finds EOF goes here: no allocation per sample
        self.open_ns = 0

    def read(self, index: int) -> int:
        t0 = _clock()
        fd = os.open(self.paths[index], os.O_RDONLY)
        self.open_ns = _clock() - t0
        try:
            n = os.readv(fd, self._whole)
            # Read on to EOF as a loader's f.read() does; a network FS may return short reads.
            while (k := os.readv(fd, self._eof)) > 0:
                n = self._append(n, k)
        finally:
            os.close(fd)
        return n

    def _append(self, n: int, k: int) -> int:
        """Slow path: bytes past the first read (short read, or a file bigger than the buffer)."""
        if n + k > len(self.buffer):
            self.buffer.extend(bytearray(n + k - len(self.buffer) + 1))
            self._whole = [self.buffer]
        self.buffer[n : n + k] = self._eof[0][:k]
        return n + k

