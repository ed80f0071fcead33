"""The pack's folder, shared by both formats (docs/architecture.md, "The pack formats"): where a pack goes and
finding a made one, its marker, the writer's lock, the resumable writes (made way for, then marked complete), the
checks a pack is reused on, and the samples read in manifest order to pack."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from iobench import __version__
from iobench.dataset import Manifest, check_mount, read_marker
from iobench.errors import UserError, explain_oserror
from iobench.safefs import fmt_bytes, only_leftovers, open_dir, open_tree, refuse, write_json_atomic, writer_lock

if TYPE_CHECKING:
    from iobench.store import Location  # a folder, or a bucket's prefix

PACK_MARKER = "iobench-pack.json"
PACKED = "packed"  # folder under the dataset root that holds its packs
DEFAULT_SHARD_SIZE = 256 * 2**20
PROGRESS_EVERY = 64  # samples between progress callbacks
THREADS = 8  # a folder's samples read at once while packing

Progress = Callable[[int, int], None]  # (samples done, bytes done) in this call


@dataclass
class PackReport:
    path: Location  # the pack's folder (a bucket's: its prefix)
    format: str  # "lmdb" or "tar"
    samples: int
    data_bytes: int  # sum of the samples' sizes
    bytes: int  # space the pack takes on disk (allocated blocks): the mitigation's extra space
    files: int  # files in the pack (marker excluded)
    seconds: float  # time making the pack took; when reused, the time recorded when it was made
    reused: bool  # True: an existing complete pack was found and nothing was written
    shards: int = 0  # tar: number of shard files


def pack_name(fmt: str, shard_size: int = DEFAULT_SHARD_SIZE) -> str:
    """A pack's folder under the dataset's `packed/` (a bucket's too): `lmdb`, or `tar-256MiB` for shards of
    256 * 2**20 bytes."""
    if fmt == "lmdb":
        return fmt
    if fmt != "tar":
        raise ValueError(f"unknown pack format {fmt!r}")
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if shard_size % scale == 0:
            return f"tar-{shard_size // scale}{unit}"
    return f"tar-{shard_size}B"


def default_dest(manifest: Manifest, fmt: str, shard_size: int = DEFAULT_SHARD_SIZE) -> Path:
    """Where a pack of `manifest` goes by default: `<root>/packed/lmdb` or `<root>/packed/tar-256MiB`."""
    return manifest.folder / PACKED / pack_name(fmt, shard_size)


def find_pack(manifest: Manifest, fmt: str, shard_size: int = DEFAULT_SHARD_SIZE) -> Path | None:
    """The default-place pack of `manifest` if it is complete and made from this manifest, else None."""
    dest = default_dest(manifest, fmt, shard_size)
    marker = read_pack_marker(dest)
    if not marker or marker.get("status") != "complete":
        return None
    return dest if marker.get("params", {}).get("manifest") == fingerprint(manifest) else None


_MARKER_FIELDS = (("made", list, "made is not a list"), ("params", dict, "params is not an object"),
                  ("files", dict, "files is not an object"))  # (field, its type, the words of one that is not)


def read_pack_marker(folder: Path, *, dir_fd: int | None = None) -> dict | None:
    """The pack marker of `folder`, or None where there is none; one that is not a JSON object with the fields
    iobench relies on is a one-line error."""
    marker = read_marker(folder, PACK_MARKER, dir_fd=dir_fd)
    if marker is None:
        return None
    problem = "not a JSON object" if not isinstance(marker, dict) else next(
        (why for key, kind, why in _MARKER_FIELDS if not isinstance(marker.get(key, kind()), kind)), None)
    if problem:
        raise UserError(f"{Path(folder) / PACK_MARKER}: not a valid iobench pack marker ({problem}): fix it, or move "
                        "its folder away")
    return marker


def write_pack(manifest: Manifest, dest: Path, fmt: str, params: dict, made: list[str], need: int,
               write: Callable[[int], tuple[dict[str, int], dict]], progress: Progress | None) -> PackReport:
    """Both formats' writer: a complete pack at `dest` made with `params` is reused; else way is made for a new one
    (`begin`), `write(dir_fd)` writes its files (giving their sizes and the marker's fields of its format) and the
    pack is marked complete."""
    with ExitStack() as stack:
        got = begin(dest, fmt, params, made, need, manifest.folder, stack)
        if isinstance(got, dict):
            return pack_report(dest, got, reused=True)
        t0 = time.perf_counter()
        files, extra = write(got)
        if progress:  # every sample read had its manifest size: all of them, all their bytes
            progress(params["samples"], params["data_bytes"])
        os.sync()  # "complete" only for data that is on the storage; the pack time includes it
        seconds = round(time.perf_counter() - t0, 3)
        on_disk = sum(_allocated(got, name) for name in files)
        marker = {"iobench": __version__, "format": fmt, "params": params, "made": made, "status": "complete",
                  "files": files, "bytes": on_disk, "seconds": seconds, **extra,
                  "completed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:
            write_json_atomic(got, PACK_MARKER, marker, dest / PACK_MARKER)
        except OSError as exc:
            raise explain_oserror(exc, f"cannot mark the {fmt} pack complete in {dest}") from exc
        return pack_report(dest, marker, reused=False)


def begin(dest: Path, fmt: str, params: dict, made: list[str], need: int, root: Path, stack: ExitStack) -> dict | int:
    """The complete marker of a reusable pack at `dest`; otherwise make way for a new one (checks, the writer's
    lock held in `stack`, removal of what an old marker lists) and write the `incomplete` marker, and return the
    folder's descriptor (closed with `stack`)."""
    marker = read_pack_marker(dest)
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise explain_oserror(exc, f"cannot prepare the {fmt} pack") from exc
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            refuse(dest, st.st_mode, "the pack's folder")
        if not stat.S_ISDIR(st.st_mode):
            raise UserError(f"{dest} exists and is not a directory")
        if marker is None and not _empty(dest):
            raise UserError(f"{dest} exists and was not made by iobench (no {PACK_MARKER}): "
                            "move it away or pick another destination")
        if _reusable(dest, marker, fmt, params):
            assert marker is not None
            return marker
    check_mount(_existing(dest), writable=True)  # the destination, or the nearest folder above it that exists
    reclaim = sum(max(0, _size(dest / n)) for n in _old(marker))
    free = shutil.disk_usage(_existing(dest)).free
    if need > free + reclaim:
        raise UserError(f"not enough space for the {fmt} pack in {dest}: it needs {fmt_bytes(need)}, "
                        f"{fmt_bytes(free + reclaim)} free")
    try:
        fd = _open_dest(dest, root)
        stack.callback(os.close, fd)
        stack.enter_context(writer_lock(fd, dest))
        now = read_pack_marker(dest, dir_fd=fd)
        if now != marker:  # another pack got here first
            if _reusable(dest, now, fmt, params):
                assert now is not None
                return now
            if now is None and not only_leftovers(fd, PACK_MARKER):
                raise UserError(f"{dest} was filled by something other than iobench meanwhile: move it away")
            marker = now
        old = _old(marker)
        # The marker lists old and new files before any is touched: whatever happens next, a rerun
        # knows everything iobench may have left here.
        base = {"iobench": __version__, "format": fmt, "params": params,
                "made": sorted(set(made) | set(old)), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        write_json_atomic(fd, PACK_MARKER, {**base, "status": "incomplete"}, dest / PACK_MARKER)
        for name in old:
            _remove_ours(fd, name, dest / name)
    except OSError as exc:
        raise explain_oserror(exc, f"cannot prepare the {fmt} pack in {dest}") from exc
    return fd


def _reusable(dest: Path, marker: dict | None, fmt: str, params: dict) -> bool:
    if marker is None:
        return False
    if marker.get("format") != fmt:
        raise UserError(f"{dest} holds an iobench {marker.get('format')} pack, not {fmt}: pick another destination")
    return (marker.get("status") == "complete" and marker.get("params") == params and
            all_there(marker, lambda name: _size(dest / name) if _safe_name(name) else None))


def _old(marker: dict | None) -> list[str]:
    """The files an old marker says iobench made (plain names in the folder only)."""
    return [n for n in marker.get("made", []) if _safe_name(n)] if marker else []


def _empty(dest: Path) -> bool:
    """Nothing in the folder but what an iobench writer interrupted before its first marker leaves."""
    try:
        fd = open_dir(dest, where=dest, expected="the pack's folder")
    except OSError as exc:
        raise explain_oserror(exc, f"cannot list {dest}") from exc
    try:
        return only_leftovers(fd, PACK_MARKER)
    finally:
        os.close(fd)


def _open_dest(dest: Path, root: Path) -> int:
    """The pack's folder, made and opened without following a link: below the dataset's root for the default place
    (so `packed/` cannot lead out of it), else below the destination's parent as given."""
    dest, root = Path(os.path.abspath(dest)), Path(os.path.abspath(root))
    if dest.is_relative_to(root) and dest != root:
        base, parts = root, dest.relative_to(root).parts
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        base, parts = dest.parent, (dest.name,)
    fd = open_tree(base, parts, create=True)
    assert fd is not None
    return fd


def _remove_ours(dir_fd: int, name: str, where: Path) -> None:
    """Remove a file an old marker lists, if it is still a regular file; a link or special file there is reported."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        refuse(where, st.st_mode, "a file of the pack")
    os.unlink(name, dir_fd=dir_fd)


def new_file(dir_fd: int, name: str, dest: Path) -> int:
    """A new file of the pack (O_EXCL|O_NOFOLLOW): whatever is already there was not made by iobench (the old
    marker's files were removed), so it is reported, not opened."""
    try:
        return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    except FileExistsError:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            refuse(dest / name, st.st_mode, "a file of the pack")
        raise UserError(f"{dest / name} exists and iobench did not make it (its pack marker does not list it): "
                        "move it away") from None


def save_npy(dir_fd: int, name: str, array: np.ndarray, dest: Path) -> None:
    with os.fdopen(new_file(dir_fd, name, dest), "wb") as f:
        np.save(f, array)


def pack_report(dest: Location, marker: dict, reused: bool) -> PackReport:
    """What a complete pack's marker says of it (a folder's, or a bucket's: pack_s3.py)."""
    p = marker["params"]
    return PackReport(path=dest, format=marker["format"], samples=int(p["samples"]),
                      data_bytes=int(p["data_bytes"]), bytes=int(marker["bytes"]), files=len(marker["files"]),
                      seconds=float(marker["seconds"]), reused=reused, shards=len(marker.get("shards", [])))


def all_there(marker: dict, size: Callable[[str], int | None]) -> bool:
    """A finished pack (a folder's or a bucket's) is reused when each of its files is there, a regular file, with the
    size it was written with (`size(name)`: None or -1 where it is not)."""
    files = marker.get("files")
    return isinstance(files, dict) and bool(files) and all(isinstance(n, int) and size(name) == n
                                                           for name, n in files.items())


def _existing(path: Path) -> Path:
    """The path itself, or its nearest ancestor that exists."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _safe_name(name: object) -> bool:
    """Only plain file names directly in the pack folder are ever removed."""
    return (isinstance(name, str) and name not in ("", ".", "..", PACK_MARKER) and "/" not in name
            and "\\" not in name and "\0" not in name)


def _size(path: Path) -> int:
    """Bytes in the regular file; -1 when it is missing (or a link, or not a regular file)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return -1
    return st.st_size if stat.S_ISREG(st.st_mode) else -1


def _allocated(dir_fd: int, name: str) -> int:
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    return st.st_blocks * 512 if st.st_blocks else st.st_size  # some FUSE file systems report no blocks


def fingerprint(manifest: Manifest) -> str:
    """Which manifest a pack was made from: its relative paths and sizes (a changed dataset makes the
    pack stale; the same dataset seen under another mount point does not)."""
    h = hashlib.sha256()
    root = str(manifest.root).rstrip("/") + "/"
    cut = len(root)
    rel = [p[cut:] if p.startswith(root) else p for p in manifest.paths]
    h.update("\n".join(rel).encode("utf-8", "surrogateescape"))
    h.update(np.asarray(manifest.sizes, dtype="<i8").tobytes())
    return h.hexdigest()[:32]


def read_samples(manifest: Manifest, threads: int, progress: Progress | None,
                 load: Callable[[int], bytes] | None = None, window: int = 64) -> Iterator[bytes]:
    """Every sample's bytes in manifest order, read by `threads` threads at most `window` ahead (a
    network file system needs several reads in flight; memory stays bounded); `load(i)` reads sample i (default:
    its file). `progress` is told every PROGRESS_EVERY samples, once the caller has taken (written) them."""
    paths, sizes = manifest.paths, manifest.sizes.tolist()

    def read_file(i: int) -> bytes:
        # O_NONBLOCK and a check before reading: a FIFO or device among the samples is reported, never waited on
        fd = os.open(paths[i], os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb", buffering=0) as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                refuse(paths[i], st.st_mode, "a sample file")
            os.set_blocking(fd, True)
            data = f.read()
        if len(data) != sizes[i]:
            raise UserError(f"{paths[i]} has {len(data)} bytes, its manifest says {sizes[i]}: the dataset "
                            "changed since its manifest was written")
        return data

    load = load or read_file
    n = len(paths)
    ex = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="iobench-pack")
    try:
        futs = deque(ex.submit(load, i) for i in range(min(n, window)))
        nxt = len(futs)
        taken = done = 0
        while futs:
            try:
                data = futs.popleft().result()
            except OSError as exc:
                raise explain_oserror(exc, "pack cannot read the dataset") from exc
            if nxt < n:
                futs.append(ex.submit(load, nxt))
                nxt += 1
            yield data
            taken += 1
            done += len(data)
            if progress and taken % PROGRESS_EVERY == 0:
                progress(taken, done)
    finally:
        ex.shutdown(wait=True, cancel_futures=True)


def round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit
