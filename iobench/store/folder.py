"""The first Store: a folder under a mount, MOUNT/iobench-data/<name>/ (files, `manifest.tsv`, the marker
`iobench-dataset.json`), written and read on open folder descriptors by safefs.py's rules."""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from iobench import sources
from iobench.dataset.folder import (
    CHUNK,
    DATA_ROOT,
    MARKER,
    Manifest,
    _runs,
    check_mount,
    entry_line,
    inspect_files,
    parse_manifest,
    read_marker,
    run_bounded,
)
from iobench.dataset.gen import default_threads
from iobench.dataset.jpeg import write_all
from iobench.dataset.paths import MANIFEST, tsv_bytes
from iobench.errors import UserError, explain_oserror
from iobench.host import cache, mounts
from iobench.host.bounded import in_child
from iobench.result import Metadata
from iobench.safefs import (
    _NEW_FILE,
    _open_rel,
    only_leftovers,
    open_tree,
    read_regular,
    refuse,
    write_atomic,
    write_json_atomic,
    writer_lock,
)
from iobench.sources import Source
from iobench.sources.pack_folder import PackReport, Progress
from iobench.store import clean, lock
from iobench.store.base import Cleaned, Content, Location
from iobench.store.metadata import metadata_phase

if TYPE_CHECKING:
    from iobench.ui import UI


class Folder:
    """The datasets under MOUNT/iobench-data (see the module); a Store."""

    items, raw, client_cache, probes, entry = "files", "fio", True, "stat, open+close", "folder"

    def __init__(self, mount: Path):
        self.mount = Path(mount)  # as given until `check` (which resolves it): it touches nothing before

    @property
    def url(self) -> str:
        return str(self.mount)

    def check(self, *, writable: bool) -> None:
        self.mount = check_mount(self.mount, writable=writable)

    def probe(self, timeout_s: float | None) -> None:
        """statvfs, stat and a listing in a watched child (see host/bounded.py)."""
        path = self.mount

        def ask(beat: np.ndarray) -> None:
            with suppress(OSError):  # a missing or unreadable path is said later, in words of its own
                os.statvfs(path)
                beat[0] += 1
                os.stat(path)
                beat[0] += 1
                with os.scandir(path) as entries:
                    next(entries, None)
            beat[0] += 1

        in_child(ask, timeout_s, f"checking {path}", name=b"iobench-probe")

    def root(self) -> Path:
        return self.mount / DATA_ROOT

    def location(self, name: str) -> Path:
        return self.mount / DATA_ROOT / name

    def names(self) -> list[str]:
        """iobench's dataset folders under MOUNT/iobench-data (real folders, not links, with a marker file)."""
        root = self.root()
        try:
            if not stat.S_ISDIR(os.lstat(root).st_mode):
                return []
            found = []
            with os.scandir(root) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        with suppress(OSError):
                            if stat.S_ISREG(os.lstat(os.path.join(e.path, MARKER)).st_mode):
                                found.append(e.name)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise explain_oserror(exc, f"cannot list {root}") from exc
        return sorted(found)

    def marker(self, name: str) -> dict | None:
        return read_marker(self.location(name))

    def open(self, name: str, *, create: bool) -> FolderHome | None:
        fd = open_tree(self.mount, (DATA_ROOT, name), create=create)
        return None if fd is None else FolderHome(fd, self.location(name))

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.mount).free

    def writers(self) -> int:
        return default_threads(self.mount)

    def lock(self, dataset: Location) -> AbstractContextManager[object]:
        return lock.hold(dataset)

    def clean(self, *, dry_run: bool) -> list[Cleaned]:
        return clean.clean(self.mount, dry_run=dry_run)

    def evict(self, files: Sequence[str], *, timeout_s: float | None) -> str | None:
        return cache.evict(files, timeout_s=timeout_s)

    def resident(self, files: Sequence[str], *, seed: int = 0, timeout_s: float | None) -> float | None:
        return cache.resident_sample(files, seed=seed, timeout_s=timeout_s)

    def describe(self, dataset: Location) -> dict:
        return mounts.describe(_path(dataset))

    def place(self, dataset: Location) -> tuple[str, str]:
        entry = mounts.mount_of(_path(dataset))
        return entry.fstype, entry.path

    def source(self, name: str, manifest: Manifest, ui: UI | None = None, *, advice: str | None = None,
               readahead: bool = True, stream: bool = False) -> Source:
        return sources.open(name, manifest, ui, advice=advice, readahead=readahead)

    def pack(self, manifest: Manifest, fmt: str, *, shard_size: int, progress: Progress | None) -> PackReport:
        return sources.pack(manifest, fmt, shard_size, progress)

    def metadata(self, manifest: Manifest, state: str, scale_files: int, seed: int = 0,
                 timeout_s: float | None = None) -> Metadata:
        return metadata_phase(manifest, state, scale_files, seed, timeout_s)

    def raw_command(self, dataset: Location, keys: str, in_flight: int,
                    io_timeout_s: float) -> tuple[list[str], dict[str, str]]:
        raise AssertionError("a folder's raw baseline is fio's job (phases/fio_job.py)")

    def raw_version(self) -> str | None:
        raise AssertionError("a folder's raw baseline is fio's (phases/fio.py)")

    def fuse_folders(self, dataset: Location, mount: Path) -> list[Path]:
        return []  # files already: a FUSE view is of a bucket


def _path(dataset: Location) -> Path:
    assert isinstance(dataset, Path), dataset  # a folder store's datasets are folders
    return dataset


class FolderHome:
    """One dataset's folder, open as a descriptor (every name below it is opened relative to it); a Home."""

    def __init__(self, fd: int, where: Path):
        self.fd = fd
        self.where = where

    def marker(self) -> dict | None:
        return read_marker(self.where, dir_fd=self.fd)

    def only_leftovers(self) -> bool:
        return only_leftovers(self.fd, MARKER)

    def entries(self) -> tuple[list[str], np.ndarray]:
        return parse_manifest(self.where / MANIFEST, dir_fd=self.fd)

    def entry_line(self, index: int) -> int:
        return entry_line(read_regular(self.where / MANIFEST, dir_fd=self.fd), index)

    def sizes(self, keys: list[str], threads: int, stop: threading.Event) -> np.ndarray:
        return inspect_files(self.fd, self.where, keys, threads, stop)

    def writing(self) -> AbstractContextManager[object]:
        return writer_lock(self.fd, self.where)

    def put_marker(self, marker: dict) -> None:
        write_json_atomic(self.fd, MARKER, marker, self.where / MARKER)

    def put_manifest(self, keys: list[str], sizes: np.ndarray) -> None:
        write_atomic(self.fd, MANIFEST, tsv_bytes(keys, sizes), self.where / MANIFEST)

    def sync(self) -> None:
        os.sync()

    def manifest(self, expect: tuple[Sequence[str], np.ndarray] | None = None) -> Manifest:
        return Manifest.read(self.fd, self.where, self.where, expect=expect)

    def close(self) -> None:
        os.close(self.fd)

    def put_samples(self, keys: list[str], ids: list[int], lengths: list[int], content: Content, threads: int,
                    progress: Progress | None, stop: threading.Event) -> tuple[int, int]:
        """Writer threads that each take a class folder (or a piece of one: `_runs`), open it once and create its
        files by name relative to it."""
        folder = self.where
        lock = threading.Lock()
        done = [0, 0]

        def report(n: int, nbytes: int) -> None:
            with lock:
                done[0] += n
                done[1] += nbytes
                if progress:
                    progress(done[0], done[1])

        def write_run(item: tuple[str, int, int]) -> None:
            d, lo, hi = item
            try:
                dfd = _open_rel(self.fd, d, folder, create=True)
            except OSError as exc:
                raise _at(exc, folder / d) from exc
            assert dfd is not None
            cut = len(d) + 1 if d else 0
            n = nbytes = 0
            last = time.monotonic()
            try:
                for k in range(lo, hi):
                    if stop.is_set():
                        return
                    i = ids[k]
                    try:
                        fd = _create_file(dfd, keys[i][cut:], folder, keys[i])
                        try:
                            nbytes += write_all(fd, content(k), lengths[k])
                        finally:
                            os.close(fd)
                    except OSError as exc:
                        raise _at(exc, folder / keys[i]) from exc
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
            run_bounded(write_run, _runs(keys, ids, threads), threads, stop)
        except OSError as exc:
            # The marker still says "incomplete": the next gen or run finds the gap and completes it.
            raise explain_oserror(exc, f"gen stopped after {done[0]} of {len(ids)} files") from exc
        return done[0], done[1]


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


def _at(exc: OSError, path: Path) -> OSError:
    """The error, naming the file (or folder) gen was writing: a write() that fails names no file, and one made
    relative to its folder names only its last part."""
    return type(exc)(exc.errno, exc.strerror, str(path))
