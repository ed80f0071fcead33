"""Datasets: what files a run reads (the manifest), making one (`gen`), or scanning an existing tree.
(~960 lines: making, resuming and checking a dataset folder all rest on the same safety rules below, the marker
and the writer lock; the path table is in manifest.py, an existing tree's listing in scan.py.)

An iobench dataset folder holds `train/<class>/<file>.JPEG` (the ImageNet layout), `manifest.tsv`
(relative path and size of every file, in the order `sequential` reads them) and the marker
`iobench-dataset.json`. The marker says iobench made the folder (nothing without it is ever deleted or
overwritten) and whether generation finished: a half-written dataset is completed, never trusted.

What iobench writes it writes safely: every folder below MOUNT/iobench-data is opened relative to its parent
with O_NOFOLLOW, every file is created with O_EXCL|O_NOFOLLOW (or, to rewrite a file of the wrong size, opened
with O_NOFOLLOW and checked to be a regular file with one link), markers and manifests are written to a file of a
unique name and renamed into place. A symbolic link, FIFO, socket or device where a file or folder of the dataset
should be is reported in one line and left as it is: never followed, opened or removed. One writer at a time: a
`gen` (or `pack`) holds an flock on `iobench-writer.lock` in the folder it writes.

Before a dataset is reused every file is stat-ed (in a thread pool) against the manifest, and the manifest is
checked against the marker and the dataset's parameters; what differs is named.
"""

from __future__ import annotations

import errno
import fcntl
import json
import mmap
import os
import platform
import re
import secrets
import shutil
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import numpy as np

from iobench import __version__
from iobench.errors import EnvironmentRefused, UserError, explain_oserror
from iobench.jpeg import JpegPool, write_all
from iobench.manifest import INDEX, MANIFEST, PathTable, index_bytes, map_index, parse_tsv, tsv_bytes
from iobench.sizes import SizeDist, parse_dist

MARKER = "iobench-dataset.json"
DATA_ROOT = "iobench-data"  # folder under --mount that holds iobench's datasets
WRITER_LOCK = "iobench-writer.lock"  # flock-ed by the one process writing a dataset or pack folder
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
FILES_PER_CLASS = 1281  # ImageNet-1k: 1,281,167 training images in 1,000 class folders
MARKER_LIMIT = 1 << 20  # a marker is a few hundred bytes: anything over 1 MiB is not one
CHUNK = 64  # files a writer reports progress after (and the least it takes at a time; it checks for a stop per file)
STAT_CHUNK = 1024  # files a checker thread stats at a time
# Threads that stat a local disk's files: 1 M files on ext4 (2 cores), cold 5.2 s at 1 thread, 4.5 at 2, 5.1 at 4,
# 6.8 at 8; warm 2.2, 2.3, 3.4 s
LOCAL_STAT_THREADS = 2

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_LEFTOVER = re.compile(r"^(" + re.escape(WRITER_LOCK) + r"|.+\.\d+-[0-9a-f]+\.tmp)$")  # our lock and temp files


# ---- safe file-system access ---------------------------------------------------------------------

def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "not a regular file"


def refuse(path: Path | str, mode: int, expected: str = "a regular file") -> NoReturn:
    """Stop with one line: a link or special file where iobench expects one of its files or folders."""
    raise UserError(f"{path} is {kind_of(mode)}, where iobench expects {expected}: iobench does not follow, open "
                    "or remove it; move it away")


def fmt_bytes(n: float) -> str:
    """A size with a unit that shows it: 512 B, 10.00 kB, 3.42 MB, 1.20 GB (powers of 10)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{int(n):,} B"


def open_dir(name: str | Path, *, dir_fd: int | None = None, where: Path | None = None, create: bool = False,
             expected: str = "a folder") -> int:
    """A file descriptor of the folder `name` (relative to `dir_fd`), never following a link at its last
    component; made first when `create`. A link or a file there is a one-line UserError (`where` names it)."""
    if create:
        with suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=dir_fd)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            raise exc from None
        refuse(where or name, st.st_mode, expected)


def _descend(fd: int, parts: Sequence[str], path: Path, *, create: bool, expected: str) -> int | None:
    """Open parts[0]/parts[1]/... below the folder open as `fd` (which this takes over and closes), never following
    a link; None when a part is missing (and not `create`)."""
    for part in parts:
        path = path / part
        try:
            sub = open_dir(part, dir_fd=fd, where=path, create=create, expected=expected)
        except FileNotFoundError:
            os.close(fd)
            if create:
                raise
            return None
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        fd = sub
    return fd


def open_tree(base: Path, parts: Sequence[str], *, create: bool) -> int | None:
    """A descriptor of base/parts[0]/parts[1]/...: `base` is opened as given (the user's path, links and all),
    every part below it without following links (made when `create`). None when a part is missing."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return _descend(fd, parts, Path(base), create=create, expected="a folder")


def _open_rel(root_fd: int, reldir: str, root: Path, *, create: bool) -> int | None:
    """A descriptor of the folder `reldir` (a/b/c) under the folder open as `root_fd`; None when missing."""
    return _descend(os.dup(root_fd), reldir.split("/") if reldir else [], root, create=create,
                    expected="a folder of the dataset")


def read_regular(where: Path, *, dir_fd: int | None = None, limit: int | None = None) -> bytes:
    """The bytes of a regular file, refusing (one line) a link or a special file without opening it (a FIFO
    would block, a device may act on open). With `dir_fd`, `where.name` is read relative to it."""
    name: str | Path = where.name if dir_fd is not None else where
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        refuse(where, st.st_mode)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            refuse(where, st.st_mode)
        if limit is not None and st.st_size > limit:
            raise UserError(f"{where} holds {fmt_bytes(st.st_size)}: too big to be iobench's")
        parts = []
        while chunk := os.read(fd, 1 << 22):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def write_atomic(dir_fd: int, name: str, data: Iterable[bytes], where: Path) -> None:
    """Write `name` in the folder open as `dir_fd` so that a reader never sees half of it: a new file of a unique
    name (O_EXCL|O_NOFOLLOW: no link is followed, two writers never share it), fsync, rename over `name`. A link
    or special file at `name` is reported, not replaced."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            refuse(where, st.st_mode)
    except FileNotFoundError:
        pass
    tmp = f"{name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, _NEW_FILE, 0o644, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as f:
            for chunk in data:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def write_json_atomic(dir_fd: int, name: str, obj: dict, where: Path) -> None:
    """Write a marker so that a reader never sees half of it (see `write_atomic`)."""
    write_atomic(dir_fd, name, [json.dumps(obj, indent=1).encode()], where)


@contextmanager
def writer_lock(dir_fd: int, where: Path) -> Iterator[None]:
    """Hold the exclusive flock of the folder open as `dir_fd` while writing it: a second writer gets one line
    (EnvironmentRefused, exit code 3) naming the holder, at once. The lock file is removed on release (a writer
    that locked a file removed meanwhile locks the new one). Where the file system has no flock, writing goes on
    (temporary files have unique names, so two writers still cannot trip on each other's)."""
    while True:
        fd = _open_lock(dir_fd, where)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            for _ in range(10):  # the holder writes its pid right after it locks
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                if holder:
                    break
                time.sleep(0.02)
            os.close(fd)
            raise EnvironmentRefused(f"another iobench ({holder or 'pid unknown'}) is writing {where}: wait for it "
                                     "to finish, or stop it, then run this again") from None
        except OSError:
            pass  # no flock here (some FUSE file systems)
        try:
            same = os.stat(WRITER_LOCK, dir_fd=dir_fd, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # its holder removed it as we opened it: lock the one there now
    try:
        with suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {platform.node()}\n".encode(), 0)
        yield
    finally:
        with suppress(OSError):
            os.unlink(WRITER_LOCK, dir_fd=dir_fd)  # still held: whoever opened it retries on a new one
        os.close(fd)


def _open_lock(dir_fd: int, where: Path) -> int:
    try:
        fd = os.open(WRITER_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644,
                     dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EOPNOTSUPP):
            raise
        st = os.stat(WRITER_LOCK, dir_fd=dir_fd, follow_symlinks=False)
        refuse(where / WRITER_LOCK, st.st_mode)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        refuse(where / WRITER_LOCK, st.st_mode)
    return fd


def only_leftovers(dir_fd: int, marker: str) -> bool:
    """Whether the folder holds nothing but what an iobench writer interrupted before its first marker leaves:
    its lock and temporary files (of the marker)."""
    with os.scandir(dir_fd) as it:
        return all(_LEFTOVER.match(e.name) and e.name.startswith((WRITER_LOCK, marker)) for e in it)


def run_bounded(fn: Callable[[object], None], items: Iterable[object], threads: int, stop: threading.Event) -> None:
    """fn(item) for every item on `threads` threads, at most 2 x threads queued at a time: an exception (Ctrl-C,
    SIGTERM) sets `stop`, cancels what is queued and waits only for the items running (fn checks `stop` often)."""
    ex = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="iobench-gen")
    pending: deque[Future] = deque()
    try:
        for item in items:
            pending.append(ex.submit(fn, item))
            while len(pending) >= 2 * threads:
                pending.popleft().result()
        while pending:
            pending.popleft().result()
    except BaseException:
        stop.set()
        for f in pending:
            f.cancel()
        raise
    finally:
        ex.shutdown(wait=True, cancel_futures=True)


# ---- manifest, spec, marker -----------------------------------------------------------------------

def _inside(rel: str) -> bool:
    """A relative path that stays inside the dataset's folder (no absolute path, no `..`)."""
    return bool(rel) and "\0" not in rel and all(p not in ("", ".", "..") for p in rel.split("/"))


def parse_manifest(path: Path, *, dir_fd: int | None = None) -> tuple[list[str], np.ndarray]:
    """Relative paths and sizes of a manifest; a line that is not PATH<TAB>SIZE is a one-line error naming it."""
    blocks, offsets, sizes = parse_tsv(read_regular(path, dir_fd=dir_fd), path)
    table = PathTable(b"", b"".join(blocks), offsets)
    return [table.rel(i) for i in range(len(table))], sizes


@dataclass
class Manifest:
    """The samples of a dataset: absolute paths and sizes, in sequential (listing) order. The paths are a
    PathTable (one block of bytes, no Python object per path; see iobench/manifest.py); a list of str given here
    is turned into one."""

    root: Path
    paths: PathTable
    sizes: np.ndarray  # int64 bytes, from the manifest or from stat when scanned

    def __post_init__(self) -> None:
        if not isinstance(self.paths, PathTable):
            self.paths = PathTable.of(self.root, self.paths)
        self.sizes = np.asarray(self.sizes, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def total_bytes(self) -> int:
        return int(self.sizes.sum())

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
    def read(cls, dir_fd: int, root: Path, where: Path) -> Manifest:
        """The manifest in the folder open as `dir_fd` (named `where`; see `load`) of files under `root`."""
        tsv = os.stat(MANIFEST, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(tsv.st_mode):
            refuse(where / MANIFEST, tsv.st_mode)
        mapped = _map_index(dir_fd, tsv, root)
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

    @classmethod
    def of(cls, root: Path, rel: list[str], sizes: np.ndarray) -> Manifest:
        return cls(root, PathTable.relative(root, rel), np.array(sizes, dtype=np.int64))


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


@dataclass(frozen=True)
class GenSpec:
    """What `gen` makes; equal specs name the same dataset folder."""

    files: int
    dist: SizeDist
    classes: int
    seed: int

    def __post_init__(self) -> None:
        for option, value, least in (("--files", self.files, 1), ("--classes", self.classes, 1),
                                     ("--seed", self.seed, 0)):
            if not _whole(value):
                raise UserError(f"{option} must be a whole number (got {value!r})")
            if value < least:
                raise UserError(f"{option} must be >= {least} (got {value})")

    @property
    def name(self) -> str:
        slug = self.dist.spec.replace(":", "").replace("-", "to")
        return f"{slug}-{self.files}f-{self.classes}c-s{self.seed}"

    def as_dict(self) -> dict:
        return {"files": self.files, "size_dist": self.dist.spec, "classes": self.classes, "seed": self.seed}


def default_classes(files: int) -> int:
    """ImageNet-like folder sizes: ~1,281 files per class folder at any dataset size (no cap on the folder count:
    10 M files make 7,806 folders, not 1,000 of 10,000 files, whose size would slow every create and lookup)."""
    return max(1, round(files / FILES_PER_CLASS))


def plan(spec: GenSpec) -> tuple[list[str], np.ndarray]:
    """Relative paths and exact sizes of every file of a spec (deterministic from its seed)."""
    sizes = spec.dist.sample(spec.files, np.random.default_rng([spec.seed, 0xDA7A]))
    per_class = -(-spec.files // spec.classes)
    rel = []
    for i in range(spec.files):
        c = f"n{i // per_class:08d}"
        rel.append(f"train/{c}/{c}_{i:08d}.JPEG")
    return rel, sizes


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


def check_mount(mount: Path, *, writable: bool) -> Path:
    """A one-line error for a mount that is missing, not a folder, unreadable, or (for writing) read-only or not
    writable: an EnvironmentRefused (exit code 3)."""
    if not mount.exists():
        raise EnvironmentRefused(f"mount {mount} does not exist")
    if not mount.is_dir():
        raise EnvironmentRefused(f"mount {mount} is not a directory")
    if not os.access(mount, os.R_OK | os.X_OK):
        raise EnvironmentRefused(f"mount {mount} is not readable (permission denied)")
    if writable and os.statvfs(mount).f_flag & os.ST_RDONLY:
        raise EnvironmentRefused(f"mount {mount} is read-only: iobench needs to write there")
    if writable and not os.access(mount, os.W_OK):
        raise EnvironmentRefused(f"mount {mount} is not writable (permission denied)")
    return mount.resolve()


# ---- checking a dataset's files --------------------------------------------------------------------

def inspect_files(root_fd: int, root: Path, rel: list[str], threads: int = 8,
                  stop: threading.Event | None = None, *, listing: bool | None = None) -> np.ndarray:
    """The size on disk of every file (-1: missing), stat-ed without following links in a thread pool. A link,
    FIFO, socket, device or folder where a file (or a folder above one) should be is a one-line error naming it.

    Each thread takes a whole folder (a piece of one where there are few), opens it once and stats its files by
    name relative to it: fewer path lookups than absolute paths (1 M files, ext4, warm: 2.1 s against 2.5 s).
    With `listing` (default: on a network or FUSE file system) it lists the folder before the stats: a network file
    system then answers them from what the listing brought (sshfs's attribute cache, NFS READDIRPLUS, Lustre
    statahead) instead of a round trip each (sshfs +1 ms, 20,000 files: 0.4 s against 4.8 s); on a local disk the
    listing only adds work (1 M files on ext4: ~25% slower). On a local disk at most LOCAL_STAT_THREADS threads: a
    stat there is microseconds of kernel work and more threads mostly queue for the interpreter lock."""
    found = np.full(len(rel), -1, dtype=np.int64)
    stop = stop or threading.Event()
    if not rel:
        return found
    local = _local(root)
    if listing is None:
        listing = not local
    if local:
        threads = min(threads, LOCAL_STAT_THREADS)

    def check(item: object) -> None:
        d, lo, hi = item  # type: ignore[misc]
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


def describe_damage(root: Path, rel: list[str], sizes: np.ndarray, found: np.ndarray, bad: np.ndarray,
                    source: str = "its manifest says") -> str:
    """`a/b.JPEG has 100 B, its manifest says 8,000 B; c.JPEG is missing (and 3 more)`."""
    said = []
    for i in bad[:3].tolist():
        if found[i] < 0:
            said.append(f"{root / rel[i]} is missing")
        else:
            said.append(f"{root / rel[i]} has {found[i]:,} B, {source} {int(sizes[i]):,} B")
    more = f" (and {len(bad) - 3:,} more)" if len(bad) > 3 else ""
    return "; ".join(said) + more


def _check_manifest(dir_fd: int, folder: Path, marker: dict, rel: list[str], sizes: np.ndarray) -> bool:
    """Whether the dataset's manifest is there (False: missing, to be written); one that does not parse, whose
    line count is not the marker's file count, or that differs from the dataset's parameters, is a one-line
    error: iobench never replaces it behind the user's back."""
    path = folder / MANIFEST
    try:
        mrel, msizes = parse_manifest(path, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    fix = ("the manifest was changed since iobench wrote it: move the dataset away (or `iobench clean` it), or "
           f"remove {MANIFEST} to have iobench write it again")
    if len(mrel) != marker["files"]:
        raise UserError(f"{path} lists {len(mrel):,} files, its marker {marker['files']:,}: {fix}")
    if mrel != rel or not np.array_equal(msizes, sizes):
        i = next(k for k in range(len(rel)) if mrel[k] != rel[k] or msizes[k] != sizes[k])
        line = text_line(path, dir_fd, i)
        raise UserError(f"{path} line {line}: {mrel[i]} {int(msizes[i]):,} B, expected {rel[i]} {int(sizes[i]):,} B "
                        f"(from the dataset's parameters): {fix}")
    return True


def text_line(path: Path, dir_fd: int, index: int) -> int:
    """The line number of the index-th entry of a manifest (comment lines skipped)."""
    lines = read_regular(path, dir_fd=dir_fd).decode("utf-8").split("\n")
    k = -1
    for n, line in enumerate(lines, 1):
        if not line.startswith("#"):
            k += 1
            if k == index:
                return n
    return len(lines)


# ---- gen ----------------------------------------------------------------------------------------------

@dataclass
class GenReport:
    manifest: Manifest
    written: int  # files written in this call (0 when an existing complete dataset was reused)
    written_bytes: int
    seconds: float
    reused: bool
    notes: list[str] = field(default_factory=list)  # what was found changed and repaired


Progress = Callable[[int, int], None]  # (files done in this call, bytes done in this call)


@dataclass
class _State:
    """What is in a dataset's folder: its marker, whether its manifest is there (and right), each file's size."""

    marker: dict | None
    manifest_ok: bool
    found: np.ndarray | None  # bytes per file (-1: missing); None: nothing there
    todo: np.ndarray  # indices of files to (re)write


def _look(mount: Path, folder: Path, spec: GenSpec, rel: list[str], sizes: np.ndarray, threads: int,
          stop: threading.Event) -> _State:
    everything = np.arange(len(rel), dtype=np.int64)
    try:
        fd = open_tree(mount, (DATA_ROOT, spec.name), create=False)
    except OSError as exc:
        raise explain_oserror(exc, f"cannot open the dataset folder {folder}") from exc
    if fd is None:
        return _State(None, False, None, everything)
    try:
        marker = read_marker(folder, dir_fd=fd)
        if marker is None:
            if not only_leftovers(fd, MARKER):
                raise UserError(f"{folder} exists and was not made by iobench: move it away or pick another --mount")
            return _State(None, False, None, everything)
        if marker["params"] != spec.as_dict():
            raise UserError(f"{folder} holds a dataset with other parameters: {marker['params']}")
        manifest_ok = _check_manifest(fd, folder, marker, rel, sizes)
        found = inspect_files(fd, folder, rel, threads, stop)
        return _State(marker, manifest_ok, found, np.flatnonzero(found != sizes))
    finally:
        os.close(fd)


NETWORK_THREADS = 32  # gen's threads on a network or FUSE file system
LOCAL_THREADS = 8  # at most, on a local one: 2 per usable core below that


def _local(path: Path) -> bool:
    """Whether `path` is on a local file system (not network, not FUSE); False when that cannot be told."""
    from iobench.mounts import fs_family, mount_of  # only gen and the reuse check need them

    try:
        return fs_family(mount_of(path).fstype) == "local"
    except (OSError, RuntimeError):
        return False


def default_threads(mount: Path) -> int:
    """gen's writer threads where --threads is not given. On a network or FUSE file system a thread mostly waits
    for round trips, so many help (sshfs +1 ms each way, 20,000 files in 16 folders: 390 files/s at 4 threads, 740
    at 8, 1,153 at 16, 1,290 at 32). On a local disk creating a file is the kernel's CPU work, so threads past the
    cores only queue for the interpreter lock (ext4, 2 cores, 100,000 files of 4 KiB: 4 threads ~12% faster than
    8): 2 per usable core, up to 8."""
    from iobench.mounts import usable_cpus  # only a gen without --threads needs it

    return min(LOCAL_THREADS, max(2, 2 * int(usable_cpus()))) if _local(mount) else NETWORK_THREADS


def _reusable(state: _State) -> bool:
    return bool(state.marker and state.marker["status"] == "complete" and state.manifest_ok and len(state.todo) == 0)


def _warn_stderr(msg: str) -> None:
    print(f"iobench: warning: {msg}", file=sys.stderr, flush=True)


def generate(mount: Path, spec: GenSpec, *, threads: int | None = None, progress: Progress | None = None,
             warn: Callable[[str], None] | None = None) -> GenReport:
    """Make (or reuse, or complete) the dataset for `spec` under `mount`/iobench-data/.

    A complete dataset is reused once every file has the size its manifest says. Files missing or of the wrong
    size are (re)written, in a dataset iobench made only, and when its marker said complete, `warn` (default:
    stderr) names them. `threads` writers (and checkers; default: `default_threads(mount)`). Ctrl-C stops the
    writers within a file; the marker then says incomplete and the next gen completes it."""
    if threads is not None and (not _whole(threads) or threads < 1):
        raise UserError(f"--threads must be >= 1 (got {threads})")
    mount = check_mount(mount, writable=False)
    if threads is None:
        threads = default_threads(mount)
    folder = mount / DATA_ROOT / spec.name
    rel, sizes = plan(spec)
    stop = threading.Event()
    state = _look(mount, folder, spec, rel, sizes, threads, stop)
    if _reusable(state):  # the manifest as runs read it: manifest.index mapped (workers share it; derived if missing)
        return GenReport(Manifest.load(folder), 0, 0, 0.0, True)
    check_mount(mount, writable=True)  # reading a finished dataset works on a read-only mount too

    try:
        fd = open_tree(mount, (DATA_ROOT, spec.name), create=True)
    except OSError as exc:
        raise explain_oserror(exc, f"cannot create the dataset folder {folder}") from exc
    assert fd is not None
    try:
        with writer_lock(fd, folder):
            if read_marker(folder, dir_fd=fd) != state.marker:  # another gen got here first: look again
                state = _look(mount, folder, spec, rel, sizes, threads, stop)
                if _reusable(state):
                    return GenReport(Manifest.read(fd, folder, folder), 0, 0, 0.0, True)
            return _complete(fd, mount, folder, spec, rel, sizes, state, threads, progress, warn or _warn_stderr,
                             stop)
    except OSError as exc:
        raise explain_oserror(exc, f"cannot write the dataset in {folder}") from exc
    finally:
        os.close(fd)


def _complete(fd: int, mount: Path, folder: Path, spec: GenSpec, rel: list[str], sizes: np.ndarray, state: _State,
              threads: int, progress: Progress | None, warn: Callable[[str], None],
              stop: threading.Event) -> GenReport:
    notes = []
    if state.marker and state.marker["status"] == "complete":
        if len(state.todo):
            assert state.found is not None
            notes.append(f"the dataset changed since iobench made it: "
                         f"{describe_damage(folder, rel, sizes, state.found, state.todo)}; rewriting "
                         f"{len(state.todo):,} file(s)")
        if not state.manifest_ok:
            notes.append(f"{folder / MANIFEST} was missing: writing it again from the dataset's parameters")
        for note in notes:
            warn(note)
    todo = state.todo
    need = int(sizes[todo].sum())
    free = shutil.disk_usage(mount).free
    if need > free:
        raise UserError(f"not enough space on {mount}: the dataset needs {fmt_bytes(need)} more, "
                        f"{fmt_bytes(free)} free (use fewer --files)")
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    created = (state.marker or {}).get("created") or now
    params = {"iobench": __version__, "params": spec.as_dict(), "files": spec.files, "bytes": int(sizes.sum()),
              "created": created}
    try:
        write_json_atomic(fd, MARKER, {**params, "status": "incomplete"}, folder / MARKER)
        if not state.manifest_ok:
            _write_manifest(fd, folder, rel, sizes)
        # class folders are made by the writers, in parallel, as they come to them: one by one here cost a few
        # round trips per folder (seconds on a NAS at ImageNet scale) before the first file
    except OSError as exc:
        raise explain_oserror(exc, f"cannot create the dataset in {folder}") from exc

    t0 = time.perf_counter()
    written, written_bytes = _write_files(fd, folder, rel, sizes, todo, spec.seed, threads, progress, stop)
    os.sync()  # the marker says "complete" only for data that is on the storage
    write_json_atomic(fd, MARKER, {**params, "status": "complete", "completed": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
                      folder / MARKER)
    return GenReport(Manifest.read(fd, folder, folder), written, written_bytes, time.perf_counter() - t0, False,
                     notes)


def _write_manifest(dir_fd: int, folder: Path, rel: list[str], sizes: np.ndarray) -> None:
    write_atomic(dir_fd, MANIFEST, tsv_bytes(rel, sizes), folder / MANIFEST)


def _create_file(dfd: int, name: str, folder: Path, rel: str) -> int:
    """A descriptor to write a dataset file (`name` in the folder open as `dfd`; `folder`/`rel` names it in errors,
    joined only then: a path join per file costs more than the rest of gen's Python per file): a new file
    (O_EXCL|O_NOFOLLOW), or an existing regular file with one link, emptied. A link or special file there is a
    one-line error, left as it is."""
    try:
        return os.open(name, _NEW_FILE, 0o644, dir_fd=dfd)
    except FileExistsError:
        pass
    where = folder / rel
    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        refuse(where, st.st_mode, "a file of the dataset")
    if st.st_nlink > 1:
        raise UserError(f"{where} has {st.st_nlink} hard links: iobench does not rewrite a file linked elsewhere; "
                        "move it away")
    fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise UserError(f"{where} changed while iobench was about to rewrite it; run again")
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_files(root_fd: int, folder: Path, rel: list[str], sizes: np.ndarray, todo: np.ndarray, seed: int,
                 threads: int, progress: Progress | None, stop: threading.Event) -> tuple[int, int]:
    if len(todo) == 0:
        return 0, 0
    want = sizes[todo]
    pool = JpegPool.build(int(want.max()), seed)
    # plain lists, indexed by position in `todo`: a numpy scalar per file costs more than the rest of the loop
    ids, lengths, images = todo.tolist(), want.tolist(), pool.pick(want).tolist()
    lock = threading.Lock()
    done = [0, 0]

    def report(n: int, nbytes: int) -> None:
        with lock:
            done[0] += n
            done[1] += nbytes
            if progress:
                progress(done[0], done[1])

    def write_run(item: object) -> None:
        d, lo, hi = item  # type: ignore[misc]
        dfd = _open_rel(root_fd, d, folder, create=True)
        assert dfd is not None
        cut = len(d) + 1 if d else 0
        n = nbytes = 0
        last = time.monotonic()
        try:
            for k in range(lo, hi):
                if stop.is_set():
                    return
                i = ids[k]
                fd = _create_file(dfd, rel[i][cut:], folder, rel[i])
                try:
                    nbytes += write_all(fd, pool.parts(i, lengths[k], images[k]), lengths[k])
                finally:
                    os.close(fd)
                n += 1
                # progress every CHUNK files or half second, not per run: a run may take minutes on a slow NAS
                if n == CHUNK or time.monotonic() - last > 0.5:
                    report(n, nbytes)
                    n = nbytes = 0
                    last = time.monotonic()
        finally:
            os.close(dfd)
            if n:
                report(n, nbytes)

    try:
        run_bounded(write_run, _runs(rel, ids, threads), threads, stop)
    except OSError as exc:
        # The marker still says "incomplete": the next gen or run finds the gap and completes it.
        raise explain_oserror(exc, f"gen stopped after {done[0]} of {len(todo)} files") from exc
    return done[0], done[1]


def _runs(rel: list[str], ids: Sequence[int], threads: int, least: int = CHUNK) -> list[tuple[str, int, int]]:
    """The work items of gen's writers and of the reuse check: (folder, lo, hi), files ids[lo:hi], all in that
    folder (a folder met again later in `ids` gets items of its own). A whole folder per item where there are
    enough folders to keep every thread busy: threads that create files in one folder queue on its lock, held for a
    whole round trip on a network file system (sshfs +1 ms, 8 threads, 20,000 files in 16 folders: 155 files/s in
    chunks of 64, 740 with a folder each; ext4: ~15% more files/s). Folders are cut in pieces of at least `least`
    files only to give every thread work (~4 items each), dealt folder by folder (the first piece of every folder,
    then the second, ...) so that the threads still work in different folders."""
    folders: list[tuple[str, int, int]] = []
    lo, cur = 0, None
    for k, i in enumerate(ids):
        d = rel[i].rpartition("/")[0]
        if d != cur:
            if cur is not None:
                folders.append((cur, lo, k))
            lo, cur = k, d
    assert cur is not None
    folders.append((cur, lo, len(ids)))
    piece = max(least, -(-len(ids) // (4 * threads)))
    items = []
    for r in range(max(-(-(hi - lo) // piece) for _, lo, hi in folders)):
        for d, lo, hi in folders:
            if lo + r * piece < hi:
                items.append((d, lo + r * piece, min(hi, lo + (r + 1) * piece)))
    return items


def spec_of(marker: dict) -> GenSpec:
    """The GenSpec a dataset marker records."""
    p = marker["params"]
    return GenSpec(int(p["files"]), parse_dist(p["size_dist"]), int(p["classes"]), int(p["seed"]))


def find_datasets(mount: Path) -> list[Path]:
    """iobench dataset folders under mount/iobench-data (real folders, not links, with a marker file)."""
    root = Path(mount) / DATA_ROOT
    try:
        if not stat.S_ISDIR(os.lstat(root).st_mode):
            return []
        found = []
        with os.scandir(root) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    with suppress(OSError):
                        if stat.S_ISREG(os.lstat(os.path.join(e.path, MARKER)).st_mode):
                            found.append(Path(e.path))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise explain_oserror(exc, f"cannot list {root}") from exc
    return sorted(found)


# ---- existing trees --------------------------------------------------------------------------------

def scan(path: Path, *, threads: int = 8, progress: Callable[[int, int], None] | None = None, cache: bool = False,
         say: Callable[[str], None] | None = None) -> Manifest:
    """Manifest of an existing image tree iobench did not make (e.g. an ImageFolder), sorted like one; or, for a
    dataset iobench made, its manifest once every file is checked against it. A tree is scanned by
    `iobench.scan.scan_tree` (`threads` listings in flight, `progress(files, folders)`, its listing cached outside
    the tree when `cache`, one line to `say` on what happened)."""
    if not path.exists():
        raise UserError(f"dataset {path} does not exist")
    if not path.is_dir():
        raise UserError(f"dataset {path} is not a directory")
    root = path.resolve()
    if os.path.lexists(root / MARKER) and os.path.lexists(root / MANIFEST):
        return _verified(root, threads)
    from iobench.scan import scan_tree  # iobench.scan imports this module

    return scan_tree(root, threads=threads, progress=progress, cache=cache, say=say, shown=path)


def _verified(root: Path, threads: int) -> Manifest:
    """An iobench dataset read in place (`--dataset`): its manifest must match its marker and every file its
    manifest; what differs is a one-line error (repairing is `iobench gen`'s job)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        marker = read_marker(root, dir_fd=fd)
        assert marker is not None
        rel, sizes = parse_manifest(root / MANIFEST, dir_fd=fd)
        if len(rel) != marker["files"]:
            raise UserError(f"{root / MANIFEST} lists {len(rel):,} files, its marker {marker['files']:,}: the "
                            "manifest was changed since iobench wrote it")
        found = inspect_files(fd, root, rel, threads)
    finally:
        os.close(fd)
    bad = np.flatnonzero(found != sizes)
    if len(bad):
        p = marker["params"]
        how = ""
        if root.parent.name == DATA_ROOT:
            how = (f"; `iobench gen --mount {root.parent.parent} --files {p['files']} --size-dist {p['size_dist']} "
                   f"--classes {p['classes']} --seed {p['seed']}` repairs it")
        raise UserError(f"the dataset {root} differs from its manifest: {describe_damage(root, rel, sizes, found, bad)}"
                        + how)
    return Manifest.of(root, rel, sizes)
