"""The files source: one file per sample, as torchvision's ImageFolder reads them."""

from __future__ import annotations

import os
import stat
from time import perf_counter_ns as _clock

from iobench.dataset import Manifest
from iobench.dataset.paths import PathTable
from iobench.safefs import kind_of


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

    def describe(self) -> dict:
        """What a result records about this source."""
        return {"source": self.name, "samples": len(self), "advice": self.advice}

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
    reads, two stores: the per-sample contract, see iobench/sources/__init__.py)."""

    __slots__ = ("_path", "buffer", "_whole", "_eof", "open_ns", "total_ns", "_advice")
    throttled = 0  # answers throttled before a read: none here (Reader)

    def __init__(self, paths: PathTable, max_size: int, advice: int | None = None):
        self._path = paths.raw  # the i-th path as bytes: no str kept per sample
        self._advice = advice
        self.buffer = bytearray(max_size + 1)  # +1: a file that grew shows up as a full buffer
        self._whole = [self.buffer]
        self._eof = [bytearray(65536)]  # the read that finds EOF goes here: no allocation per sample
        self.open_ns = 0
        self.total_ns = 0

    def read(self, index: int) -> int:
        t0 = _clock()
        try:
            # O_NONBLOCK: a FIFO put where a file was opens at once (and reads nothing: the epoch's size check names
            # it) instead of waiting for a writer; on a regular file it changes nothing
            fd = os.open(self._path(index), os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:  # named by a str, as a loader's open() names it (the path here is bytes)
            raise OSError(exc.errno, exc.strerror, os.fsdecode(exc.filename)) from None
        t1 = _clock()
        try:
            if self._advice is not None:
                os.posix_fadvise(fd, 0, 0, self._advice)
            n = os.readv(fd, self._whole)
            # Read on to EOF as a loader's f.read() does; a network FS may return short reads.
            while (k := os.readv(fd, self._eof)) > 0:
                n = self._append(fd, index, n, k)
        except OSError as exc:
            raise _not_regular(fd, self._path(index)) or exc from None
        finally:
            os.close(fd)
        self.open_ns = t1 - t0
        self.total_ns = _clock() - t0
        return n

    def _append(self, fd: int, index: int, n: int, k: int) -> int:
        """Slow path: bytes past the first read (short read, or a file bigger than the buffer). A special file (a
        device reads forever) is refused here, where its bytes would go on."""
        if (why := _not_regular(fd, self._path(index))) is not None:
            raise why
        if n + k > len(self.buffer):
            self.buffer.extend(bytearray(n + k - len(self.buffer) + 1))
            self._whole = [self.buffer]
        self.buffer[n : n + k] = self._eof[0][:k]
        return n + k

