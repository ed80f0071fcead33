"""The files source: one file per sample, as torchvision's ImageFolder reads them."""

from __future__ import annotations

import os
import stat
from time import perf_counter_ns as _clock

from iobench.dataset import Manifest
from iobench.dataset.paths import PathTable
from iobench.safefs import kind_of
from iobench.sources.buffers import grown, page_aligned


class FileSource:
    """Per sample: open, read to EOF into a reused buffer, close; the open is timed apart."""

    name = "files"

    def __init__(self, manifest: Manifest, advice: str | None = None):
        self.paths = manifest.paths
        self.max_size = int(manifest.sizes.max()) if len(manifest) else 0
        self.advice = advice  # "random" | "sequential": posix_fadvise on each file after its open

    def __len__(self) -> int:
        return len(self.paths)

    def reader(self) -> FileReader:
        return FileReader(self.paths, self.max_size, ADVICE[self.advice] if self.advice else None)

    def sample_name(self, index: int) -> str:
        return self.paths[index]

    def files(self) -> PathTable:
        return self.paths

    def costs(self) -> tuple[None, None]:
        return None, None

    def close(self) -> None:
        """Nothing is held open between reads."""


ADVICE = {"random": os.POSIX_FADV_RANDOM, "sequential": os.POSIX_FADV_SEQUENTIAL}


def _not_regular(fd: int, path: bytes) -> OSError | None:
    """An OSError naming `path` when the open `fd` is not a regular file (off the hot path: after a failed or an
    unexpectedly long read)."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return None
    return OSError(None, f"is {kind_of(mode)}, not a regular file: iobench does not read it", os.fsdecode(path))


class FileReader:
    """Reads a sample whole and times it: `open_ns` the open, `total_ns` open + read to EOF + close (three clock
    reads, two stores: the per-sample contract, see iobench/sources/__init__.py). `read` reads into the reader's
    buffer, `read_into` straight into the caller's memory (a DataLoader batch: one copy, the kernel's)."""

    __slots__ = ("_prefix", "_block", "_base", "_ends", "buffer", "_whole", "_into", "_eof", "open_ns",
                 "total_ns", "_advice")
    throttled = 0  # answers throttled before a read: none here (Reader)

    def __init__(self, paths: PathTable, max_size: int, advice: int | None = None):
        # the i-th path is prefix + block[base + ends[i]:base + ends[i + 1]]: PathTable.raw, inlined (one call less
        # per sample), as bytes: no str kept or made per sample
        self._prefix, self._block, self._base, self._ends = paths.pieces()
        self._advice = advice
        # +1: a file that grew shows up as a full buffer. On a page: sources/buffers.py says why
        self.buffer = page_aligned(max_size + 1)
        self._whole: list[bytearray | memoryview] = [self.buffer]
        # read_into's target, set per call: readv's list is not made per sample
        self._into: list[bytearray | memoryview] = [self.buffer]
        self._eof = [bytearray(65536)]  # the read that finds EOF goes here: no allocation per sample
        self.open_ns = 0
        self.total_ns = 0

    def read(self, index: int) -> int:
        return self._read(index, self._whole)

    def read_into(self, index: int, out: memoryview) -> int:
        """Read sample `index` straight into `out` and return its length n: its bytes are out[:n] when n <=
        len(out); a sample longer than `out` is in `buffer[:n]` instead (the caller makes room and copies)."""
        self._into[0] = out
        return self._read(index, self._into)

    def _read(self, index: int, into: list[bytearray | memoryview]) -> int:
        t0 = _clock()
        b = self._base
        path = self._prefix + self._block[b + self._ends[index]:b + self._ends[index + 1]]
        try:
            # O_NONBLOCK: a FIFO put where a file was opens at once (and reads nothing: the epoch's size check names
            # it) instead of waiting for a writer; on a regular file it changes nothing
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:  # named by a str, as a loader's open() names it (the path here is bytes)
            raise OSError(exc.errno, exc.strerror, os.fsdecode(exc.filename)) from None
        t1 = _clock()
        try:
            if self._advice is not None:
                os.posix_fadvise(fd, 0, 0, self._advice)
            n = os.readv(fd, into)
            # Read on to EOF as a loader's f.read() does; a network FS may return short reads.
            while (k := os.readv(fd, self._eof)) > 0:
                n = self._append(fd, path, into, n, k)
        except OSError as exc:
            raise _not_regular(fd, path) or exc from None
        finally:
            os.close(fd)
        self.open_ns = t1 - t0
        self.total_ns = _clock() - t0
        return n

    def _append(self, fd: int, path: bytes, into: list[bytearray | memoryview], n: int, k: int) -> int:
        """Slow path: bytes past the first read (short read, or a file bigger than its target). A special file (a
        device reads forever) is refused here, where its bytes would go on. Into a caller's `out` while they fit,
        else (`read_into`'s rule) the whole sample moves to `buffer`, which grows."""
        if (why := _not_regular(fd, path)) is not None:
            raise why
        out = into[0]
        if out is not self.buffer and n + k <= len(out):
            out[n : n + k] = self._eof[0][:k]
            return n + k
        if out is not self.buffer and n <= len(out):  # the first bytes past `out`: the sample moves to buffer
            if n > len(self.buffer):
                self._grow(n)
            self.buffer[:n] = out[:n]
        if n + k > len(self.buffer):
            self._grow(n + k)
        self.buffer[n : n + k] = self._eof[0][:k]
        return n + k

    def _grow(self, need: int) -> None:
        self.buffer = grown(self.buffer, need + 1)
        self._whole[0] = self.buffer
