"""Reader buffers, each starting on a page boundary.

Why: where a copy into memory lands relative to its source's page matters on some CPUs. Measured on an AMD EPYC
VM (docs/performance.md, "The copy's alignment"): the kernel's copy of a warm 110 KB file into memory 1 to 31 bytes
past a page boundary costs ~3x what it costs anywhere else (81-91 vs 26-31 us per file). A bytearray as big as a
sample comes from malloc's mmap at 16 bytes past a page, so a reader's buffer fell there or not by the allocator's
state, and its CPU per sample with it. An anonymous mmap starts on a page: page cache to buffer is then page to page,
the fast case on every CPU.
"""

from __future__ import annotations

import mmap


def page_aligned(size: int) -> memoryview:
    """A writable, zero-filled buffer of `size` bytes (at least 1) that starts on a page boundary."""
    return memoryview(mmap.mmap(-1, max(size, 1)))


def grown(buffer: memoryview, size: int) -> memoryview:
    """A page-aligned buffer of `size` bytes holding `buffer`'s bytes at its head (slow path: a sample bigger than
    the manifest said)."""
    bigger = page_aligned(size)
    keep = min(len(buffer), size)
    bigger[:keep] = buffer[:keep]
    return bigger
