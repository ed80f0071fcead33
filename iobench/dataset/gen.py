"""`iobench gen`: the dataset a `GenSpec` names, under MOUNT/iobench-data/<its name>/, made, reused or completed.

`plan` gives every file's path and exact size from the spec's seed; `generate` checks what is there (see
folder.py) and writes only what is missing or of the wrong size, on writer threads that each take a class folder (or a
piece of one), the marker saying `incomplete` until every file is on the storage. Writing follows safefs.py's
rules.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from iobench import __version__
from iobench.dataset.folder import (
    CHUNK,
    DATA_ROOT,
    MARKER,
    Manifest,
    _local,
    _runs,
    _whole,
    _write_manifest,
    check_mount,
    describe_damage,
    inspect_files,
    parse_manifest,
    read_marker,
    run_bounded,
)
from iobench.dataset.jpeg import JpegPool, write_all
from iobench.dataset.paths import MANIFEST
from iobench.dataset.sizes import SizeDist, parse_dist
from iobench.errors import UserError, explain_oserror
from iobench.safefs import (
    _NEW_FILE,
    _open_rel,
    fmt_bytes,
    only_leftovers,
    open_tree,
    read_regular,
    refuse,
    write_json_atomic,
    writer_lock,
)

FILES_PER_CLASS = 1281  # ImageNet-1k: 1,281,167 training images in 1,000 class folders
NETWORK_THREADS = 32  # gen's threads on a network or FUSE file system
LOCAL_THREADS = 8  # at most, on a local one: 2 per usable core below that


# ---- what gen makes ------------------------------------------------------------------------------

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


def spec_of(marker: dict) -> GenSpec:
    """The GenSpec a dataset marker records."""
    p = marker["params"]
    return GenSpec(int(p["files"]), parse_dist(p["size_dist"]), int(p["classes"]), int(p["seed"]))


# ---- making it, reusing it, completing it --------------------------------------------------------

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


def default_threads(mount: Path) -> int:
    """gen's writer threads where --threads is not given. On a network or FUSE file system a thread mostly waits
    for round trips, so many help (sshfs +1 ms each way, 20,000 files in 16 folders: 390 files/s at 4 threads, 740
    at 8, 1,153 at 16, 1,290 at 32). On a local disk creating a file is the kernel's CPU work, so threads past the
    cores only queue for the interpreter lock (ext4, 2 cores, 100,000 files of 4 KiB: 4 threads ~12% faster than
    8): 2 per usable core, up to 8."""
    from iobench.host.mounts import usable_cpus  # only a gen without --threads needs it

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
        return GenReport(_manifest(folder, rel, sizes), 0, 0, 0.0, True)
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
                    return GenReport(Manifest.read(fd, folder, folder, expect=(rel, sizes)), 0, 0, 0.0, True)
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
    return GenReport(Manifest.read(fd, folder, folder, expect=(rel, sizes)), written, written_bytes,
                     time.perf_counter() - t0, False, notes)


def _manifest(folder: Path, rel: list[str], sizes: np.ndarray) -> Manifest:
    """The manifest of a dataset whose manifest.tsv and files were just checked to be `rel` and `sizes`: its index
    mapped, or derived again where it holds anything else."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return Manifest.read(fd, folder, folder, expect=(rel, sizes))
    finally:
        os.close(fd)


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

    def write_run(item: tuple[str, int, int]) -> None:
        d, lo, hi = item
        try:
            dfd = _open_rel(root_fd, d, folder, create=True)
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
                    fd = _create_file(dfd, rel[i][cut:], folder, rel[i])
                    try:
                        nbytes += write_all(fd, pool.parts(i, lengths[k], images[k]), lengths[k])
                    finally:
                        os.close(fd)
                except OSError as exc:
                    raise _at(exc, folder / rel[i]) from exc
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
