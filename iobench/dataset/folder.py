"""The dataset folder as a run reads it: its marker, its manifest (`Manifest`), and every file checked against the
manifest (`inspect_files`, on threads) before it is reused or read in place; what differs is named."""

from __future__ import annotations

import itertools
import json
import mmap
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from iobench.dataset.paths import INDEX, MANIFEST, PathTable, index_bytes, map_index, parse_tsv
from iobench.errors import EnvironmentRefused, UserError, explain_oserror
from iobench.host.mounts import fs_family, mount_of
from iobench.safefs import (
    _DIR_FLAGS,
    _open_rel,
    read_regular,
    refuse,
    write_atomic,
)

if TYPE_CHECKING:
    from iobench.store import Location  # a folder, or a bucket's prefix

MARKER = "iobench-dataset.json"
DATA_ROOT = "iobench-data"  # folder under --mount that holds iobench's datasets
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
MARKER_LIMIT = 1 << 20  # a marker is a few hundred bytes: anything over 1 MiB is not one
CHUNK = 64  # files a writer reports progress after (and the least it takes at a time; it checks for a stop per file)
STAT_CHUNK = 1024  # files a checker thread stats at a time
# Threads that stat a local disk's files: 1 M files on ext4 (2 cores), cold 5.2 s at 1 thread, 4.5 at 2, 5.1 at 4,
# 6.8 at 8; warm 2.2, 2.3, 3.4 s
LOCAL_STAT_THREADS = 2

_Item = TypeVar("_Item")  # run_bounded's work item


# ---- marker and manifest -------------------------------------------------------------------------

def _inside(rel: str) -> bool:
    """A relative path that stays inside the dataset's folder (no absolute path, no `..`)."""
    return bool(rel) and "\0" not in rel and all(p not in ("", ".", "..") for p in rel.split("/"))


def entry_line(manifest: bytes, index: int) -> int:
    """The line number in manifest.tsv's bytes of its index-th entry (comment lines skipped), for an error."""
    lines = manifest.decode("utf-8").split("\n")
    entries = [n for n, line in enumerate(lines, 1) if not line.startswith("#")]
    return entries[index] if index < len(entries) else len(lines)


def parse_manifest(path: Path, *, dir_fd: int | None = None) -> tuple[list[str], np.ndarray]:
    """Relative paths and sizes of a manifest; a line that is not PATH<TAB>SIZE is a one-line error naming it."""
    blocks, offsets, sizes = parse_tsv(read_regular(path, dir_fd=dir_fd), path)
    table = PathTable(b"", b"".join(blocks), offsets)
    return [table.rel(i) for i in range(len(table))], sizes


@dataclass
class Manifest:
    """The samples of a dataset: absolute paths and sizes, in sequential (listing) order. The paths are a
    PathTable (one block of bytes, no Python object per path; see iobench/dataset/paths.py); a list of str given here
    is turned into one."""

    root: Location  # the dataset's folder, or its bucket's prefix (paths are then its objects' keys)
    paths: PathTable
    sizes: np.ndarray  # int64 bytes, from the manifest or from stat when scanned
    links_skipped: int = 0  # a scanned tree: links out of it not followed (iobench/dataset/imagefolder.py)
    links_followed: int = 0  # ... and those followed (--follow-links)

    def __post_init__(self) -> None:
        if not isinstance(self.paths, PathTable):
            self.paths = PathTable.of(self.root, self.paths)
        self.sizes = np.asarray(self.sizes, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def total_bytes(self) -> int:
        return int(self.sizes.sum())

    @property
    def folder(self) -> Path:
        """The dataset's folder (a dataset on a mount: packing and scanning work on folders)."""
        if not isinstance(self.root, Path):
            raise UserError(f"{self.root} is in object storage: this works on a dataset in a folder")
        return self.root

    @classmethod
    def load(cls, root: Path) -> Manifest:
        """The manifest of the dataset at `root`, mapped from its manifest.index; when that is missing or stale, from
        manifest.tsv, writing the index beside it where the folder is writable (else kept in memory)."""
        root = Path(root)
        fd = os.open(root, _DIR_FLAGS)
        try:
            return cls.read(fd, root, root)
        finally:
            os.close(fd)

    @classmethod
    def read(cls, dir_fd: int, root: Path, where: Path,
             expect: tuple[Sequence[str], np.ndarray] | None = None) -> Manifest:
        """The manifest in the folder open as `dir_fd` (named `where`; see `load`) of files under `root`. With
        `expect` (relative paths and sizes manifest.tsv was just checked to hold), an index that holds anything else
        is derived again."""
        tsv = os.stat(MANIFEST, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(tsv.st_mode):
            refuse(where / MANIFEST, tsv.st_mode)
        mapped = _map_index(dir_fd, tsv, root)
        if mapped is not None and expect is not None and not _holds(*mapped, *expect):
            mapped = None
        if mapped is None:
            with _mapped_regular(where / MANIFEST, dir_fd) as text:
                blocks, offsets, sizes = parse_tsv(text, where / MANIFEST)
            with suppress(OSError):  # a read-only folder: the index stays in memory
                write_atomic(dir_fd, INDEX, index_bytes(blocks, offsets, sizes, tsv), where / INDEX)
                mapped = _map_index(dir_fd, tsv, root)
            if mapped is None:
                prefix = os.fsencode(os.path.join(str(root), ""))
                return cls(root, PathTable(prefix, b"".join(blocks), offsets), sizes)
        return cls(root, *mapped)


@contextmanager
def _mapped_regular(where: Path, dir_fd: int) -> Iterator[mmap.mmap | bytes]:
    """A regular file's bytes, memory-mapped (a 10 M-line manifest is ~450 MB: not read into memory); a link or
    special file is refused as `read_regular` refuses it."""
    fd = os.open(where.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            refuse(where, st.st_mode)
        if st.st_size == 0:
            yield b""
            return
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
            yield mm
    finally:
        os.close(fd)


def _holds(paths: PathTable, sizes: np.ndarray, rel: Sequence[str], want: np.ndarray) -> bool:
    """Whether a table holds exactly these relative paths and sizes (compared as blocks, not path by path)."""
    if len(paths) != len(rel) or not np.array_equal(sizes, want):
        return False
    expected = PathTable.relative("", rel)
    return np.array_equal(paths.offsets, expected.offsets) and paths.block() == expected.block()


def _map_index(dir_fd: int, tsv: os.stat_result, root: Path) -> tuple[PathTable, np.ndarray] | None:
    """The dataset's manifest.index mapped, if it is a regular file derived from the manifest.tsv of stat `tsv`."""
    try:
        fd = os.open(INDEX, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return map_index(fd, tsv, root)
    finally:
        os.close(fd)


def _whole(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


_JSON_KIND = {list: "a JSON array", str: "a JSON string", int: "a number", float: "a number", bool: "a boolean",
              type(None): "null"}


def check_marker(marker: object, path: Path) -> dict:
    """A dataset marker with the fields iobench relies on, or a one-line error saying what is wrong with it."""
    why = _marker_problem(marker)
    if why:
        raise UserError(f"{path}: not a valid iobench dataset marker ({why}): fix it, or move its folder away")
    assert isinstance(marker, dict)
    return marker


def _marker_problem(marker: object) -> str | None:
    if not isinstance(marker, dict):
        return f"{_JSON_KIND.get(type(marker), type(marker).__name__)}, not an object"
    p = marker.get("params")
    if not isinstance(p, dict):
        return "no params" if p is None else "params is not an object"
    for key, least in (("files", 1), ("classes", 1), ("seed", 0)):
        if not _whole(p.get(key)) or p[key] < least:
            return f"params.{key} is {p.get(key)!r}, not a whole number >= {least}"
    if not isinstance(p.get("size_dist"), str):
        return f"params.size_dist is {p.get('size_dist')!r}"
    if not _whole(marker.get("files")):
        return f"files is {marker.get('files')!r}, not a whole number"
    if marker["files"] != p["files"]:
        return f"files is {marker['files']:,}, its params say {p['files']:,}"
    if marker.get("status") not in ("complete", "incomplete"):
        return f"status is {marker.get('status')!r}"
    return None


def read_marker(folder: Path, name: str = MARKER, *, dir_fd: int | None = None) -> dict | None:
    """An iobench marker (dataset or pack) in `folder`, or None where there is none. A link or special file in its
    place, a marker that is not JSON, or (for a dataset marker) one without the fields iobench needs is a one-line
    error. With `dir_fd` (the folder, open), the marker is read relative to it."""
    path = Path(folder) / name
    try:
        data = read_regular(path, dir_fd=dir_fd, limit=MARKER_LIMIT)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise explain_oserror(exc, "cannot read the iobench marker") from exc
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise UserError(f"{path}: unreadable iobench marker ({exc})") from exc
    return check_marker(obj, path) if name == MARKER else obj


def check_mount(mount: Path, *, writable: bool, what: str = "mount") -> Path:
    """A one-line error for a mount (or another folder: `what` names it) that is missing, not a folder, unreadable,
    or (for writing) read-only or not writable: an EnvironmentRefused (exit code 3)."""
    if not mount.exists():
        raise EnvironmentRefused(f"{what} {mount} does not exist")
    if not mount.is_dir():
        raise EnvironmentRefused(f"{what} {mount} is not a directory")
    if not os.access(mount, os.R_OK | os.X_OK):
        raise EnvironmentRefused(f"{what} {mount} is not readable (permission denied)")
    if writable and os.statvfs(mount).f_flag & os.ST_RDONLY:
        raise EnvironmentRefused(f"mount {mount} is read-only: iobench needs to write there")
    if writable and not os.access(mount, os.W_OK):
        raise EnvironmentRefused(f"mount {mount} is not writable (permission denied)")
    return mount.resolve()


# ---- checking a dataset's files ------------------------------------------------------------------

def inspect_files(root_fd: int, root: Path, rel: list[str], threads: int = 8,
                  stop: threading.Event | None = None) -> np.ndarray:
    """The size on disk of every file (-1: missing), stat-ed without following links on threads; a link, FIFO,
    socket, device or folder in a file's place (or above one) is a one-line error naming it. A thread stats a
    folder's files relative to it (1 M files, ext4, warm: 2.1 s against 2.5 s by absolute path). Off a local disk
    each folder is listed first, so that a network file system answers the stats from the listing (sshfs's
    attribute cache, NFS READDIRPLUS, Lustre statahead; sshfs +1 ms, 20,000 files: 0.4 s against 4.8 s; on ext4 it
    only adds work, ~25%)."""
    found = np.full(len(rel), -1, dtype=np.int64)
    stop = stop or threading.Event()
    if not rel:
        return found
    local = _local(root)
    listing = not local
    if local:
        threads = min(threads, LOCAL_STAT_THREADS)

    def check(item: tuple[str, int, int]) -> None:
        d, lo, hi = item
        dfd = _open_rel(root_fd, d, root, create=False)
        if dfd is None:
            return
        cut = len(d) + 1 if d else 0
        got = []  # into `found` in one step: a numpy store per file costs more than the rest of the loop
        try:
            listed: dict[str, os.DirEntry] | None = None
            if listing:  # a name not listed is missing, without a stat
                with os.scandir(dfd) as it:
                    listed = {e.name: e for e in it}
            for k in range(lo, hi):
                if not (k - lo) & 255 and stop.is_set():
                    return
                name = rel[k][cut:]
                try:
                    if listed is None:
                        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    elif (e := listed.get(name)) is not None:
                        st = e.stat(follow_symlinks=False)
                    else:
                        got.append(-1)
                        continue
                except FileNotFoundError:
                    got.append(-1)
                    continue
                if not stat.S_ISREG(st.st_mode):
                    refuse(root / rel[k], st.st_mode, "a file of the dataset")
                got.append(st.st_size)
        finally:
            os.close(dfd)
        found[lo:hi] = got

    # listing: whole folders only, each listed once
    items = _runs(rel, range(len(rel)), max(1, threads), len(rel) if listing else STAT_CHUNK)
    try:
        run_bounded(check, items, max(1, threads), stop)
    except OSError as exc:
        raise explain_oserror(exc, f"cannot check the files of {root}") from exc
    return found


def describe_damage(root: Location, rel: list[str], sizes: np.ndarray, found: np.ndarray, bad: np.ndarray,
                    source: str = "its manifest says") -> str:
    """`a/b.JPEG has 100 B, its manifest says 8,000 B; c.JPEG is missing (and 3 more)`."""
    said = [f"{root / rel[i]} is missing" if found[i] < 0 else f"{root / rel[i]} has {found[i]:,} B, {source} "
            f"{int(sizes[i]):,} B" for i in bad[:3].tolist()]
    more = f" (and {len(bad) - 3:,} more)" if len(bad) > 3 else ""
    return "; ".join(said) + more


def _local(path: Path) -> bool:
    """Whether `path` is on a local file system (not network, not FUSE); False when that cannot be told."""
    try:
        return fs_family(mount_of(path).fstype) == "local"
    except (OSError, RuntimeError):
        return False


def run_bounded(fn: Callable[[_Item], None], items: Iterable[_Item], threads: int, stop: threading.Event,
                patience_s: float | None = None) -> None:
    """fn(item) for every item on `threads` threads, at most 2 x threads queued at a time: an exception (Ctrl-C,
    SIGTERM, fn's own) sets `stop`, drops what is queued and waits only for the items running (fn checks `stop`
    often), at most `patience_s` (None: as long as they take). The threads are daemons: one still in a request to
    a server that stopped answering is left to end on its own, and nothing waits for it at exit."""
    todo: queue.Queue = queue.Queue(maxsize=2 * threads)
    errors: list[BaseException] = []

    def work() -> None:
        while (item := todo.get()) is not _END:
            if stop.is_set():
                continue
            try:
                fn(item)
            except BaseException as exc:  # raised by the caller's thread
                errors.append(exc)
                stop.set()

    workers = [threading.Thread(target=work, name="iobench-gen", daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    try:
        for item in items:
            while not stop.is_set():
                try:
                    todo.put(item, timeout=0.1)
                    break
                except queue.Full:
                    pass
            if stop.is_set():
                break
        for _ in workers:
            todo.put(_END)
        for w in workers:
            w.join()
    except BaseException:
        stop.set()
        with suppress(queue.Empty):
            while True:
                todo.get_nowait()
        for _ in workers:
            with suppress(queue.Full):
                todo.put_nowait(_END)
        deadline = None if patience_s is None else time.monotonic() + patience_s
        for w in workers:
            w.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        raise
    if errors:
        raise errors[0]


_END = object()  # run_bounded's word to a thread: no more items


def _runs(rel: list[str], ids: Sequence[int], threads: int, least: int = CHUNK) -> list[tuple[str, int, int]]:
    """The work items of gen's writers and of the reuse check: (folder, lo, hi), files ids[lo:hi], all in that
    folder (a folder met again later in `ids` gets items of its own). A whole folder per item: threads creating
    files in one folder queue on its lock, held for a round trip on a network file system (sshfs +1 ms, 8 threads,
    20,000 files in 16 folders: 155 files/s in chunks of 64, 740 with a folder each; ext4: ~15% more). Folders are
    cut in pieces of at least `least` files only to give every thread work (~4 items each), dealt a piece of every
    folder at a time, so that the threads still work in different folders."""
    folders: list[tuple[str, int, int]] = []
    lo = 0
    for d, group in itertools.groupby(ids, key=lambda i: rel[i].rpartition("/")[0]):
        hi = lo + sum(1 for _ in group)
        folders.append((d, lo, hi))
        lo = hi
    piece = max(least, -(-len(ids) // (4 * threads)))
    items = []
    for r in range(max(-(-(hi - lo) // piece) for _, lo, hi in folders)):
        for d, lo, hi in folders:
            if lo + r * piece < hi:
                items.append((d, lo + r * piece, min(hi, lo + (r + 1) * piece)))
    return items
