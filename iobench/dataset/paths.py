"""The samples of a dataset at any size: `manifest.tsv` (for people and other tools), `manifest.index` (for
iobench), and the table of paths every source reads from. A 10 M-line manifest as a list of str costs ~1 GB and
~15 s to build, and DataLoader workers forked from it copy the pages they touch (reference counts:
pytorch/pytorch#13246): here the paths are one block of bytes and an int64 array of offsets, no object per sample.

`manifest.index` lays those arrays out for mmap (HEADER: magic, counts, and the size, mtime and inode of the
manifest.tsv it was derived from; then the offsets, the sizes, the paths), so forked workers share its pages. It is
derived again when manifest.tsv changes, or when its arrays break a rule of manifest.tsv (`index_problem`), so no
path it holds leaves the dataset. Parsing manifest.tsv is vectorised (numpy, in chunks of lines) and keeps every
rule of the format; what breaks one is a one-line error naming its line."""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import overload

import numpy as np

from iobench.errors import UserError

MANIFEST = "manifest.tsv"
INDEX = "manifest.index"
HEADER = struct.Struct("<8sqqqqQ")  # magic, entries, path bytes, tsv size, tsv mtime_ns, tsv inode (unsigned:
#                                      a network file system may use all 64 bits)
MAGIC = b"IOBIDX01"
HEADER_SIZE = 64  # the header, padded: the arrays after it stay 8-byte aligned
CHUNK_BYTES = 32 << 20  # manifest.tsv is parsed this much at a time
MAX_SIZE = 10**18 - 1  # a size has 1-18 digits in manifest.tsv
TAB, NL, DOT, SLASH, HASH, ZERO = 9, 10, 46, 47, 35, 48


class PathTable(Sequence[str]):
    """The absolute paths of a dataset's samples, as `prefix` + one block of relative path bytes cut at `offsets`
    (int64, n + 1). `raw(i)` is the path as bytes (what os.open takes: one bytes object made per call, nothing
    kept); `[i]` the same as str. The block may be a memory map of manifest.index: workers forked later share it."""

    def __init__(self, prefix: bytes, block: bytes | mmap.mmap, offsets: np.ndarray, base: int = 0):
        self.prefix = prefix
        self._block = block
        self._base = base
        self.offsets = offsets
        self._ends = offsets.data  # its memoryview: indexing one gives a Python int, ~3x faster than numpy's

    @classmethod
    def of(cls, root: Path | str, paths: Sequence[str]) -> PathTable:
        """A table of `paths` (absolute, or relative to `root`); when all are under `root` they are kept relative
        to it."""
        prefix = os.fsencode(os.path.join(str(root), ""))
        enc = [os.fsencode(p) for p in paths]
        if all(r.startswith(prefix) for r in enc):
            return cls._joined(prefix, [r[len(prefix):] for r in enc])
        return cls._joined(b"", enc)

    @classmethod
    def relative(cls, root: Path | str, rel: Sequence[str]) -> PathTable:
        """A table of paths given relative to `root`."""
        return cls._joined(os.fsencode(os.path.join(str(root), "")), [os.fsencode(p) for p in rel])

    @classmethod
    def _joined(cls, prefix: bytes, parts: list[bytes]) -> PathTable:
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(np.fromiter((len(r) for r in parts), dtype=np.int64, count=len(parts)), out=offsets[1:])
        return cls(prefix, b"".join(parts), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def raw(self, i: int) -> bytes:
        """The i-th path, as bytes."""
        b = self._base
        return self.prefix + self._block[b + self._ends[i]:b + self._ends[i + 1]]

    def pieces(self) -> tuple[bytes, bytes | mmap.mmap, int, memoryview]:
        """What `raw(i)` joins, for a reader that builds its paths inline (one call less per sample): prefix, block,
        base and ends, the i-th path being prefix + block[base + ends[i]:base + ends[i + 1]]."""
        return self.prefix, self._block, self._base, self._ends

    def block(self) -> bytes:
        """Every relative path, end to end (cut at `offsets`)."""
        return bytes(self._block[self._base:self._base + int(self.offsets[-1])])

    def rel(self, i: int) -> str:
        """The i-th path relative to the prefix (the dataset's root)."""
        b = self._base
        return os.fsdecode(self._block[b + self._ends[i]:b + self._ends[i + 1]])

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return os.fsdecode(self.raw(i))

    def __iter__(self) -> Iterator[str]:
        for i in range(len(self)):
            yield os.fsdecode(self.raw(i))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PathTable):
            return len(self) == len(other) and all(self.raw(i) == other.raw(i) for i in range(len(self)))
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PathTable({len(self):,} paths under {os.fsdecode(self.prefix)!r})"


# ---------------------------------------------------------------- manifest.tsv


def parse_tsv(data: bytes | mmap.mmap, where: Path) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """The relative paths (blocks of bytes that, end to end, its int64 offsets cut) and sizes (int64) of
    manifest.tsv's bytes; a line that is not PATH<TAB>SIZE, not UTF-8, or whose path leaves the dataset is a
    one-line error naming it."""
    blocks: list[bytes] = []
    offsets: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
    sizes: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    start, line_no, total = 0, 0, 0
    while start < len(data):
        end = data.find(b"\n", min(start + CHUNK_BYTES, len(data)) - 1)
        end = len(data) if end < 0 else end + 1
        chunk = data[start:end]  # whole lines: a UTF-8 character is never cut
        if not chunk.isascii():
            try:
                chunk.decode("utf-8")
            except UnicodeDecodeError:
                raise UserError(f"{where}: not an iobench manifest (not UTF-8 text)") from None
        block, ends, size, lines = _parse_chunk(chunk, line_no, where)
        blocks.append(block)
        offsets.append(ends + total)
        sizes.append(size)
        total += len(block)
        line_no += lines
        start = end
    return blocks, np.concatenate(offsets), np.concatenate(sizes)


def _parse_chunk(chunk: bytes, line_no: int, where: Path) -> tuple[bytes, np.ndarray, np.ndarray, int]:
    """One chunk of whole lines: its paths' block, their end offsets within it, the sizes and how many lines it
    held. `line_no`: lines before the chunk (for the errors)."""
    arr = np.frombuffer(chunk, dtype=np.uint8)
    nl = np.flatnonzero(arr == NL)
    if arr[-1] != NL:  # the last line without its newline
        nl = np.append(nl, len(arr))
    starts = np.concatenate(([0], nl[:-1] + 1))
    keep = (starts == nl) | (arr[np.minimum(starts, len(arr) - 1)] != HASH)  # '#': a comment; empty: an error
    entry_of_line = np.cumsum(keep) - 1
    number = np.flatnonzero(keep) + line_no + 1  # each entry's line number
    s, e = starts[keep], nl[keep]
    tabs = np.flatnonzero(arr == TAB)
    k = np.searchsorted(tabs, e) - 1
    tab = np.where(k >= 0, tabs[np.maximum(k, 0)], -1) if len(tabs) else np.full(len(s), -1)
    no_tab = tab < s  # the last tab before the line's end is not in the line
    if no_tab.any():
        i = int(np.argmax(no_tab))
        line = chunk[s[i]:e[i]].decode("utf-8", "replace")
        raise UserError(f"{where} line {number[i]}: no tab between path and size (a manifest line is PATH<TAB>SIZE): "
                        f"{line[:80]!r}")
    digits = e - tab - 1
    value, bad_digit = value_of(arr, tab, digits)
    bad_size = (digits < 1) | (digits > 18) | bad_digit
    if bad_size.any():
        i = int(np.argmax(bad_size))
        size = chunk[tab[i] + 1:e[i]].decode("utf-8", "replace")
        raise UserError(f"{where} line {number[i]}: size {size[:40]!r} is not a whole number of bytes")
    bad_path = (tab == s) | (arr[s] == SLASH) | (arr[np.maximum(tab - 1, 0)] == SLASH)  # empty, absolute, ends in /
    for at in _bad_parts(arr):  # "//", NUL, a "." or ".." component: where they are in a path, not a comment
        row = int(np.searchsorted(starts, at, side="right")) - 1  # the line it is in
        k = int(entry_of_line[row])
        if keep[row] and at < tab[k]:
            bad_path[k] = True
            break
    if bad_path.any():
        i = int(np.argmax(bad_path))
        p = chunk[s[i]:tab[i]].decode("utf-8", "replace")
        raise UserError(f"{where} line {number[i]}: {p[:80]!r} is not a relative path inside the dataset")
    edge = np.zeros(len(arr) + 1, dtype=np.int8)  # +1 where each path starts, -1 at its tab: the running sum marks
    edge[s] = 1                                    # the bytes of the paths
    edge[tab] = -1
    block = arr[np.cumsum(edge[:-1], dtype=np.int8).view(bool)].tobytes()
    return block, np.cumsum(tab - s), value, len(nl)


def _bad_parts(arr: np.ndarray) -> np.ndarray:
    """Positions in a chunk of "//", a NUL, or a "." or ".." component (a dot after a slash or a line's start,
    followed by a slash or tab, or by a dot and then one): rare, so only they are looked at line by line."""
    d = np.flatnonzero(arr == DOT)  # ~1 per line (".JPEG"): the candidates, checked by their neighbours
    pad = np.full(2, NL, dtype=np.uint8)
    ext = np.concatenate((pad[:1], arr, pad))  # ext[i + 1] = arr[i]; a chunk starts a line
    starts_part = (ext[d] == SLASH) | (ext[d] == NL)
    nxt, nxt2 = ext[d + 2], ext[d + 3]
    ends = (nxt == SLASH) | (nxt == TAB) | (nxt == DOT) & ((nxt2 == SLASH) | (nxt2 == TAB))
    sl = np.flatnonzero(arr == SLASH)
    double = sl[:-1][np.diff(sl) == 1]
    return np.concatenate((d[starts_part & ends], double, np.flatnonzero(arr == 0)))


def value_of(arr: np.ndarray, tab: np.ndarray, digits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sizes (the `digits` bytes after each tab, as int64) and where one of those bytes is not a digit."""
    value = np.zeros(len(tab), dtype=np.int64)
    bad = np.zeros(len(tab), dtype=bool)
    for d in range(min(int(digits.max()), 19) if len(digits) else 0):
        m = digits > d
        digit = arr[tab[m] + 1 + d] - np.uint8(ZERO)  # a byte below '0' wraps around: > 9 too
        bad[m] |= digit > 9
        value[m] = value[m] * 10 + digit
    return value, bad


def tsv_bytes(rel: Sequence[str], sizes: np.ndarray) -> Iterator[bytes]:
    """manifest.tsv's text for relative paths and sizes, in chunks."""
    yield b"# iobench manifest v1: relative path <TAB> size in bytes\n"
    batch: list[str] = []
    for p, s in zip(rel, sizes.tolist(), strict=True):
        batch.append(f"{p}\t{s}\n")
        if len(batch) == 65536:
            yield "".join(batch).encode()
            batch = []
    yield "".join(batch).encode()


# ---------------------------------------------------------------- manifest.index


def index_bytes(blocks: list[bytes], offsets: np.ndarray, sizes: np.ndarray, tsv: os.stat_result) -> Iterator[bytes]:
    """manifest.index's bytes for a table derived from the manifest.tsv whose stat is `tsv`."""
    head = HEADER.pack(MAGIC, len(sizes), int(offsets[-1]), tsv.st_size, tsv.st_mtime_ns, tsv.st_ino)
    yield head.ljust(HEADER_SIZE, b"\0")
    yield np.ascontiguousarray(offsets, dtype="<i8").tobytes()
    yield np.ascontiguousarray(sizes, dtype="<i8").tobytes()
    yield from blocks


def map_index(fd: int, tsv: os.stat_result, root: Path) -> tuple[PathTable, np.ndarray] | None:
    """The paths and sizes in the manifest.index open as `fd`, memory-mapped; None when it is not one, or is stale
    (derived from another manifest.tsv than the one whose stat is `tsv`)."""
    size = os.fstat(fd).st_size
    if size < HEADER_SIZE:
        return None
    mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    magic, n, nbytes, tsv_size, tsv_mtime, tsv_ino = HEADER.unpack_from(mm, 0)
    if (magic != MAGIC or n < 0 or size != HEADER_SIZE + 8 * (2 * n + 1) + nbytes
            or (tsv_size, tsv_mtime, tsv_ino) != (tsv.st_size, tsv.st_mtime_ns, tsv.st_ino)):
        mm.close()
        return None
    offsets = np.frombuffer(mm, dtype="<i8", count=n + 1, offset=HEADER_SIZE)
    sizes = np.frombuffer(mm, dtype="<i8", count=n, offset=HEADER_SIZE + 8 * (n + 1))
    base = HEADER_SIZE + 8 * (2 * n + 1)
    if index_problem(mm, base, offsets, sizes) is not None:
        return None
    table = PathTable(os.fsencode(os.path.join(str(root), "")), mm, offsets, base=base)
    return table, sizes


def index_problem(block: bytes | mmap.mmap, base: int, offsets: np.ndarray, sizes: np.ndarray) -> str | None:
    """What in an index's arrays breaks a rule that manifest.tsv's parser enforces (`parse_tsv`), or None: offsets
    from 0 rising to the end of the paths, sizes of 0 to MAX_SIZE, and paths (block[base + offsets[i]:base +
    offsets[i + 1]]) that are UTF-8, relative, inside the dataset (no "." or ".." part, no "//", no NUL), and could
    be a manifest line (no newline, no leading '#'). Checked in chunks of paths, so memory stays bounded."""
    n = len(sizes)
    if len(offsets) != n + 1 or offsets[0] != 0 or len(block) != base + int(offsets[-1]):
        return "offsets do not span the paths"
    if n == 0:
        return None
    if int(np.diff(offsets).min()) < 1:
        return "offsets do not rise (an empty or overlapping path)"
    if int(sizes.min()) < 0 or int(sizes.max()) > MAX_SIZE:
        return f"a size outside 0-{MAX_SIZE:,} bytes"
    lo = 0
    while lo < n:
        hi = min(n, int(np.searchsorted(offsets, offsets[lo] + CHUNK_BYTES, side="right")))
        hi = max(hi, lo + 1)
        why = _paths_problem(block, base, offsets[lo:hi + 1])
        if why is not None:
            return f"{why} (entry {lo + 1:,} to {hi:,})"
        lo = hi
    return None


def _paths_problem(block: bytes | mmap.mmap, base: int, offsets: np.ndarray) -> str | None:
    """`index_problem` for the paths cut by `offsets` (a rising run of an index's offsets). The bytes are searched
    in place (memchr-like finds, numpy views): a 10 M-path index is ~400 MB of paths."""
    start, end = base + int(offsets[0]), base + int(offsets[-1])
    arr = np.frombuffer(block, dtype=np.uint8, count=end - start, offset=start)
    if int(arr.max()) >= 0x80:
        try:
            bytes(arr).decode("utf-8")  # whole paths: a character is never cut
        except UnicodeDecodeError:
            return "a path that is not UTF-8"
    if block.find(b"\0", start, end) >= 0 or block.find(b"\n", start, end) >= 0:  # a tab may be in a path
        return "a NUL or newline in a path"
    if len(_pairs(block, start, end, b"//")):
        return 'a "//" in a path'
    starts = offsets[:-1] - offsets[0]
    ends = offsets[1:] - offsets[0]  # one past each path's last byte
    first, last = arr[starts], arr[ends - 1]
    if (first == SLASH).any() or (first == HASH).any() or (last == SLASH).any():
        return "a path that starts with / or #, or ends with /"
    # a "." or ".." part: a dot that begins a part (at a path's start, or after a slash) and ends it (at the path's
    # end, a slash, or a tab as parse_tsv reads one), or a second dot that does
    dots = np.concatenate((starts[first == DOT], _pairs(block, start, end, b"/.") + 1))
    if len(dots):
        def ends_part(at: np.ndarray) -> np.ndarray:
            k = np.minimum(np.searchsorted(ends, at), len(ends) - 1)
            inside = np.minimum(at, len(arr) - 1)
            return (ends[k] == at) | (arr[inside] == SLASH) | (arr[inside] == TAB)

        one = ends_part(dots + 1)
        second = np.minimum(dots + 1, len(arr) - 1)
        two = ~one & (arr[second] == DOT) & ends_part(dots + 2)
        if (one | two).any():
            return 'a "." or ".." part in a path'
    return None


def _pairs(block: bytes | mmap.mmap, start: int, end: int, pair: bytes) -> np.ndarray:
    """Where (from `start`) the two bytes `pair` occur in block[start:end], in order: the bytes seen as 16-bit
    numbers at even and at odd positions, two vectorised compares (str.find of two bytes is ~10x slower)."""
    want = np.frombuffer(pair, dtype="<u2")[0]
    found = [np.flatnonzero(np.frombuffer(block, dtype="<u2", count=(end - start - shift) // 2,
                                          offset=start + shift) == want) * 2 + shift for shift in (0, 1)]
    return np.sort(np.concatenate(found))
