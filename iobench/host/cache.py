"""Page-cache control: evict a dataset before a cold epoch (root: drop_caches after sync; others: posix_fadvise
DONTNEED per file; neither touches a NAS server's own cache) and check how much of it is resident (mincore on a
sample of files), so that a "cold" figure is never silently warm."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import stat
from collections.abc import Sequence

import numpy as np

from iobench.host.bounded import in_child

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_MAP_FAILED = ctypes.c_void_p(-1).value
PAGE = mmap.PAGESIZE


def evict(paths: Sequence[str], *, drop_caches: bool | None = None, timeout_s: float | None = None) -> str:
    """Drop the files from the page cache; returns the method used. drop_caches defaults to being root.
    `timeout_s`: done in a child process, StorageStalled when it makes no progress that long (see bounded)."""
    return in_child(lambda beat: _evict(paths, drop_caches, beat), timeout_s, "evicting the page cache")


def _evict(paths: Sequence[str], drop_caches: bool | None, beat) -> str:
    os.sync()
    beat[0] += 1
    if drop_caches is None:
        drop_caches = os.geteuid() == 0
    if drop_caches:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            return "drop_caches"
        except OSError:
            pass  # e.g. a container without write access to /proc/sys: fall back to per-file advice
    for p in paths:
        beat[0] += 1
        fd = _open_regular(p)
        if fd is None:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return "fadvise_dontneed"


def _open_regular(path: str, follow: bool = False) -> int | None:
    """An fd for reading `path` when it is a regular file, else None: a FIFO, device or socket is never opened
    (lstat first, or stat when `follow`ing links; O_NONBLOCK (|O_NOFOLLOW) and an fstat check against a swap in
    between)."""
    try:
        if not stat.S_ISREG((os.stat if follow else os.lstat)(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def resident_fraction(path: str) -> float | None:
    """Fraction of a file's pages in the page cache (mincore), None when it cannot be told."""
    fd = _open_regular(path, follow=True)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 1.0
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            return None  # some file systems (FUSE with direct_io) cannot be mapped
        try:
            pages = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                return None
            return sum(b & 1 for b in vec) / pages
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def resident_sample(paths: Sequence[str], sample: int = 256, seed: int = 0,
                    timeout_s: float | None = None) -> float | None:
    """Mean resident fraction over a random sample of files (None when no file could be checked). `timeout_s`:
    checked in a child process, StorageStalled when it makes no progress that long (see bounded)."""
    n = len(paths)
    idx = np.random.default_rng(seed).choice(n, size=min(sample, n), replace=False)
    picked = [paths[i] for i in idx.tolist()]

    def check(beat) -> float | None:
        fractions = []
        for p in picked:
            beat[0] += 1
            if (f := resident_fraction(p)) is not None:
                fractions.append(f)
        return float(np.mean(fractions)) if fractions else None

    return in_child(check, timeout_s, "checking what is cached")
