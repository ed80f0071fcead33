"""`iobench gen`: the dataset a `GenSpec` names, in a Store (a folder: MOUNT/iobench-data/<its name>/), made,
reused or completed. `plan` gives every file's path and exact size from the spec's seed; `generate` writes only what
is missing or of the wrong size, the marker saying `incomplete` until every sample is on the storage."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from iobench import __version__
from iobench.dataset.folder import (
    Manifest,
    _local,
    _whole,
    describe_damage,
)
from iobench.dataset.jpeg import JpegPool
from iobench.dataset.paths import MANIFEST
from iobench.dataset.sizes import SizeDist, parse_dist
from iobench.errors import Interrupted, UserError, explain_oserror
from iobench.host.mounts import usable_cpus
from iobench.safefs import fmt_bytes

if TYPE_CHECKING:  # types only: store/ imports dataset/, which imports this module (a Store is handed in)
    from iobench.sources.pack_folder import Progress  # (files done, bytes done) in this call
    from iobench.store.base import Home, Store

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
    return [f"train/n{i // per_class:08d}/n{i // per_class:08d}_{i:08d}.JPEG" for i in range(spec.files)], sizes


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


@dataclass
class _State:
    """What is in a dataset's folder: its marker, whether its manifest is there (and right), each file's size."""

    marker: dict | None
    manifest_ok: bool
    found: np.ndarray | None  # bytes per file (-1: missing); None: nothing there
    todo: np.ndarray  # indices of files to (re)write


def _look(home: Home | None, spec: GenSpec, rel: list[str], sizes: np.ndarray, threads: int,
          stop: threading.Event) -> _State:
    everything = np.arange(len(rel), dtype=np.int64)
    if home is None:
        return _State(None, False, None, everything)
    marker = home.marker()
    if marker is None:
        if not home.only_leftovers():
            raise UserError(f"{home.where} exists and was not made by iobench: move it away or pick another --mount")
        return _State(None, False, None, everything)
    if marker["params"] != spec.as_dict():
        raise UserError(f"{home.where} holds a dataset with other parameters: {marker['params']}")
    manifest_ok = _check_manifest(home, marker, rel, sizes)
    found = home.sizes(rel, threads, stop)
    return _State(marker, manifest_ok, found, np.flatnonzero(found != sizes))


def _check_manifest(home: Home, marker: dict, rel: list[str], sizes: np.ndarray) -> bool:
    """Whether the dataset's manifest is there (False: missing, to be written); one that does not parse, whose
    line count is not the marker's file count, or that differs from the dataset's parameters, is a one-line
    error: iobench never replaces it behind the user's back."""
    path = home.where / MANIFEST
    try:
        mrel, msizes = home.entries()
    except FileNotFoundError:
        return False
    fix = ("the manifest was changed since iobench wrote it: move the dataset away (or `iobench clean` it), or "
           f"remove {MANIFEST} to have iobench write it again")
    if len(mrel) != marker["files"]:
        raise UserError(f"{path} lists {len(mrel):,} files, its marker {marker['files']:,}: {fix}")
    if mrel != rel or not np.array_equal(msizes, sizes):
        i = next(k for k in range(len(rel)) if mrel[k] != rel[k] or msizes[k] != sizes[k])
        line = home.entry_line(i)
        raise UserError(f"{path} line {line}: {mrel[i]} {int(msizes[i]):,} B, expected {rel[i]} {int(sizes[i]):,} B "
                        f"(from the dataset's parameters): {fix}")
    return True


def default_threads(mount: Path) -> int:
    """gen's writer threads where --threads is not given: many on a network or FUSE file system, where a thread
    mostly waits for round trips; 2 per usable core (up to 8) on a local disk, where more only queue for the
    interpreter lock (ext4, 2 cores, 100,000 files of 4 KiB: 4 threads ~12% faster than 8). docs/performance.md,
    "(b) at scale"."""
    return min(LOCAL_THREADS, max(2, 2 * int(usable_cpus()))) if _local(mount) else NETWORK_THREADS


def _reusable(state: _State) -> bool:
    return bool(state.marker and state.marker["status"] == "complete" and state.manifest_ok and len(state.todo) == 0)


def _warn_stderr(msg: str) -> None:
    print(f"iobench: warning: {msg}", file=sys.stderr, flush=True)


def generate(where: Store, spec: GenSpec, *, threads: int | None = None, progress: Progress | None = None,
             warn: Callable[[str], None] | None = None) -> GenReport:
    """Make (or reuse, or complete) the dataset for `spec` in the store `where`: files missing or of the wrong size
    are (re)written, in a dataset iobench made only (`warn`, default stderr, names them where its marker said
    complete), by `threads` writers (default: the store's `writers()`). Ctrl-C stops the writers within a file;
    the marker then says incomplete and the next gen completes it."""
    if threads is not None and (not _whole(threads) or threads < 1):
        raise UserError(f"--threads must be >= 1 (got {threads})")
    where.check(writable=False)
    if threads is None:
        threads = where.writers()
    folder = where.location(spec.name)
    rel, sizes = plan(spec)
    stop = threading.Event()
    home = _open(where, spec.name, create=False, why="cannot open the dataset folder")
    try:
        state = _look(home, spec, rel, sizes, threads, stop)
        if _reusable(state):  # the manifest as runs read it: its index mapped (workers share it; derived if missing)
            assert home is not None
            return GenReport(home.manifest(expect=(rel, sizes)), 0, 0, 0.0, True)
    finally:
        if home is not None:
            home.close()
    where.check(writable=True)  # reading a finished dataset works on a read-only mount too

    home = _open(where, spec.name, create=True, why="cannot create the dataset folder")
    assert home is not None
    try:
        with home.writing():
            if home.marker() != state.marker:  # another gen got here first: look again
                state = _look(home, spec, rel, sizes, threads, stop)
                if _reusable(state):
                    return GenReport(home.manifest(expect=(rel, sizes)), 0, 0, 0.0, True)
            return _complete(home, where, spec, rel, sizes, state, threads, progress, warn or _warn_stderr, stop)
    except OSError as exc:
        raise explain_oserror(exc, f"cannot write the dataset in {folder}") from exc
    finally:
        home.close()


def _open(where: Store, name: str, *, create: bool, why: str) -> Home | None:
    try:
        return where.open(name, create=create)
    except OSError as exc:
        raise explain_oserror(exc, f"{why} {where.location(name)}") from exc


def _complete(home: Home, where: Store, spec: GenSpec, rel: list[str], sizes: np.ndarray, state: _State,
              threads: int, progress: Progress | None, warn: Callable[[str], None],
              stop: threading.Event) -> GenReport:
    folder = home.where
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
    free = where.free_bytes()
    if need > free:
        raise UserError(f"not enough space on {where.url}: the dataset needs {fmt_bytes(need)} more, "
                        f"{fmt_bytes(free)} free (use fewer --files)")
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    created = (state.marker or {}).get("created") or now
    params = {"iobench": __version__, "params": spec.as_dict(), "files": spec.files, "bytes": int(sizes.sum()),
              "created": created}
    try:
        home.put_marker({**params, "status": "incomplete"})
        if not state.manifest_ok:
            home.put_manifest(rel, sizes)
        # class folders are made by the writers, in parallel, as they come to them: one by one here cost a few
        # round trips per folder (seconds on a NAS at ImageNet scale) before the first file
    except OSError as exc:
        raise explain_oserror(exc, f"cannot create the dataset in {folder}") from exc

    t0 = time.perf_counter()
    try:
        written, written_bytes = _write_files(home, rel, sizes, todo, spec.seed, threads, progress, stop)
    except KeyboardInterrupt:  # what was written stays, marked incomplete: the next gen completes it
        raise Interrupted(f"interrupted: what was written of {folder} is kept, marked incomplete (the next gen "
                          "completes it; `iobench clean` lists and removes it)") from None
    home.sync()  # the marker says "complete" only for data that is on the storage
    home.put_marker({**params, "status": "complete", "completed": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return GenReport(home.manifest(expect=(rel, sizes)), written, written_bytes, time.perf_counter() - t0, False,
                     notes)


def _write_files(home: Home, rel: list[str], sizes: np.ndarray, todo: np.ndarray, seed: int, threads: int,
                 progress: Progress | None, stop: threading.Event) -> tuple[int, int]:
    """The files `todo` written, each a decodable JPEG of its exact size (dataset/jpeg.py), on the store's writers."""
    if len(todo) == 0:
        return 0, 0
    want = sizes[todo]
    pool = JpegPool.build(int(want.max()), seed)
    # plain lists, indexed by position in `todo`: a numpy scalar per file costs more than the rest of the loop
    ids, lengths, images = todo.tolist(), want.tolist(), pool.pick(want).tolist()
    return home.put_samples(rel, ids, lengths, lambda k: pool.parts(ids[k], lengths[k], images[k]), threads,
                            progress, stop)
