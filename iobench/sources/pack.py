"""Packing a dataset into few big files: LMDB and WebDataset-style tar shards (`iobench pack`).
(~630 lines: both formats share the pack folder's marker, its writer lock, its resumable writes and its checks.)

Both packs are written beside the dataset by default (`<dataset root>/packed/lmdb/`,
`<dataset root>/packed/tar-<shard size>/`), from the manifest, in manifest order, so sample `i` of the
pack is sample `i` of the manifest and every pattern reads the same samples from every source.

LMDB (`pack_lmdb`): one environment (`data.mdb`; no `lock.mdb`: it is written and read with
`lock=False`), one unnamed database; key = the sample index as 8-byte big-endian (so key order is
manifest order), value = the file's bytes. Beside it `sizes.npy` (int64 per index).

Tar (`pack_tar`): `shard-000000.tar`, `shard-000001.tar`, ... each at most `shard_size` bytes (a sample
bigger than that gets a shard of its own), USTAR format written by Python's `tarfile`; member `i` is
named `<i:08d>.<ext>` (`00000042.jpg`: WebDataset's key + extension; one member per sample, no `.cls`).
`index.npy` is an int64 array of shape (samples, 3): shard number, offset of the member's data in the
shard (what `tarfile` reports as `TarInfo.offset_data`), size. Random access is one pread.

Both folders hold the marker `iobench-pack.json`: the parameters, the files iobench made, status
`incomplete` while writing and `complete` (after `os.sync()`) when done, pack time and bytes on disk.
A complete pack with the same parameters is reused after a stat check; an incomplete or stale one is
rebuilt after removing only the files its marker names; a folder without the marker is never touched.

Writing is as safe as `gen`'s (see iobench/safefs.py): the pack's folder is opened without following a link
(below the dataset's root for the default place), every file is created new with O_EXCL|O_NOFOLLOW (LMDB then
opens the data.mdb iobench made), the marker is written aside under a unique name and renamed, a link or special
file where a pack file should be is reported and left alone, and one writer at a time holds
`iobench-writer.lock` (a second gets one line naming the first).
"""

from __future__ import annotations

import hashlib
import io
import mmap
import os
import shutil
import stat
import tarfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from iobench import __version__
from iobench.dataset import (
    Manifest,
    check_mount,
    fmt_bytes,
    only_leftovers,
    open_dir,
    open_tree,
    read_marker,
    refuse,
    write_json_atomic,
    writer_lock,
)
from iobench.errors import UserError, explain_oserror

PACK_MARKER = "iobench-pack.json"
PACKED = "packed"  # folder under the dataset root that holds its packs
DEFAULT_SHARD_SIZE = 256 * 2**20
COMMIT_BYTES = 64 * 2**20  # LMDB: one write transaction per ~64 MB
LMDB_DATA = "data.mdb"
LMDB_SIZES = "sizes.npy"
TAR_INDEX = "index.npy"
TAR_BLOCK = tarfile.BLOCKSIZE  # 512: one USTAR header, and the unit data is padded to
TAR_RECORD = tarfile.RECORDSIZE  # 10240: tarfile pads a closed archive to a whole record
TAR_END = 2 * TAR_BLOCK  # the end-of-archive marker: two zero blocks
PROGRESS_EVERY = 64  # samples between progress callbacks

Progress = Callable[[int, int], None]  # (samples done, bytes done) in this call


@dataclass
class PackReport:
    path: Path  # the pack's folder
    format: str  # "lmdb" or "tar"
    samples: int
    data_bytes: int  # sum of the samples' sizes
    bytes: int  # space the pack takes on disk (allocated blocks): the mitigation's extra space
    files: int  # files in the pack (marker excluded)
    seconds: float  # time making the pack took; when reused, the time recorded when it was made
    reused: bool  # True: an existing complete pack was found and nothing was written
    shards: int = 0  # tar: number of shard files

    def as_dict(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def shard_label(shard_size: int) -> str:
    """`256MiB` for 256 * 2**20: the name part of a tar pack's default folder."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if shard_size % scale == 0:
            return f"{shard_size // scale}{unit}"
    return f"{shard_size}B"


def default_dest(manifest: Manifest, fmt: str, shard_size: int = DEFAULT_SHARD_SIZE) -> Path:
    """Where a pack of `manifest` goes by default: `<root>/packed/lmdb` or `<root>/packed/tar-256MiB`."""
    if fmt == "lmdb":
        return Path(manifest.root) / PACKED / "lmdb"
    if fmt == "tar":
        return Path(manifest.root) / PACKED / f"tar-{shard_label(shard_size)}"
    raise ValueError(f"unknown pack format {fmt!r}")


def read_pack_marker(folder: Path, *, dir_fd: int | None = None) -> dict | None:
    """The pack marker of `folder`, or None where there is none; one that is not a JSON object with the fields
    iobench relies on is a one-line error."""
    marker = read_marker(folder, PACK_MARKER, dir_fd=dir_fd)
    if marker is None:
        return None
    problem = None
    if not isinstance(marker, dict):
        problem = "not a JSON object"
    elif not isinstance(marker.get("made", []), list):
        problem = "made is not a list"
    elif not isinstance(marker.get("params", {}), dict):
        problem = "params is not an object"
    elif not isinstance(marker.get("files", {}), dict):
        problem = "files is not an object"
    if problem:
        raise UserError(f"{Path(folder) / PACK_MARKER}: not a valid iobench pack marker ({problem}): fix it, or move "
                        "its folder away")
    return marker


def find_pack(manifest: Manifest, fmt: str, shard_size: int = DEFAULT_SHARD_SIZE) -> Path | None:
    """The default-place pack of `manifest` if it is complete and made from this manifest, else None."""
    dest = default_dest(manifest, fmt, shard_size)
    marker = read_pack_marker(dest)
    if not marker or marker.get("status") != "complete":
        return None
    return dest if marker.get("params", {}).get("manifest") == _fingerprint(manifest) else None


# ---- LMDB ----------------------------------------------------------------------------------------

def lmdb_map_size(sizes: np.ndarray, page: int = mmap.PAGESIZE) -> int:
    """An LMDB map size that holds `sizes` with room to spare: each value rounded up to whole pages
    (a value over ~half a page goes to its own overflow pages behind a 16-byte header; smaller ones
    share leaf pages, for which this overcounts), plus leaf and branch pages for the keys (~40 bytes
    a node), plus copy-on-write pages of each commit, +25% and 64 MiB of margin. The map only
    reserves address space: the file grows to what is written."""
    return _round_up(int(_lmdb_estimate(sizes, page) * 1.25) + 64 * 2**20, page)


def _lmdb_estimate(sizes: np.ndarray, page: int) -> int:
    """Bytes the written data.mdb should take (the estimate the free-space check uses)."""
    data_pages = int(((sizes.astype(np.int64) + 16 + page - 1) // page).sum())
    key_pages = -(-len(sizes) * 40 // page) * 2  # leaf nodes + branch pages, half-full at worst
    return (data_pages + key_pages + 64) * page


def pack_lmdb(manifest: Manifest, dest: Path | None = None, progress: Progress | None = None, *,
              threads: int = 8) -> PackReport:
    """Write (or reuse) an LMDB of `manifest`: key = index as 8-byte big-endian, value = file bytes."""
    try:
        import lmdb
    except ImportError as exc:
        raise UserError("the lmdb pack needs py-lmdb, a dependency of iobench: pip install lmdb") from exc
    dest = Path(dest) if dest is not None else default_dest(manifest, "lmdb")
    sizes = np.asarray(manifest.sizes, dtype=np.int64)
    page = mmap.PAGESIZE
    params = {"format": "lmdb", "samples": len(manifest), "data_bytes": int(sizes.sum()),
              "manifest": _fingerprint(manifest), "key": "index, 8-byte big-endian", "value": "file bytes"}
    made = [LMDB_DATA, "lock.mdb", LMDB_SIZES]
    got = _begin(dest, "lmdb", params, made, _lmdb_estimate(sizes, page), _stat_check, manifest.root)
    if isinstance(got, dict):
        return _reused(dest, got)
    with got as dfd:
        return _write_lmdb(lmdb, manifest, dest, dfd, sizes, params, made, progress, threads)


def _write_lmdb(lmdb, manifest: Manifest, dest: Path, dfd: int, sizes: np.ndarray, params: dict, made: list[str],
                progress: Progress | None, threads: int) -> PackReport:
    t0 = time.perf_counter()
    map_size = lmdb_map_size(sizes, mmap.PAGESIZE)
    done = 0
    try:
        # data.mdb is made here, new (O_EXCL|O_NOFOLLOW): LMDB then opens the empty file iobench made (and
        # starts a new environment in it), never one a link points to.
        os.close(_new_file(dfd, LMDB_DATA, dest))
        made_ino = os.stat(LMDB_DATA, dir_fd=dfd, follow_symlinks=False).st_ino
        # lock=False: iobench is the only writer of a folder its marker calls incomplete; readers
        # open with lock=False too, so no lock.mdb is left behind. sync=False + one env.sync() at the
        # end: the marker, not LMDB's per-commit fsync, says when the data is safe.
        env = lmdb.open(str(dest), map_size=map_size, subdir=True, lock=False, sync=False, metasync=False,
                        readahead=False, meminit=False, max_dbs=0)
        try:
            st = os.stat(LMDB_DATA, dir_fd=dfd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_ino != made_ino:
                raise UserError(f"{dest / LMDB_DATA} was replaced while iobench opened it; run again")
            txn = env.begin(write=True)
            pending = 0
            try:
                for i, data in enumerate(_read_samples(manifest, threads)):
                    txn.put(i.to_bytes(8, "big"), data, append=True)  # keys arrive in order
                    pending += len(data)
                    done += len(data)
                    if pending >= COMMIT_BYTES:
                        txn.commit()
                        txn = env.begin(write=True)
                        pending = 0
                    if progress and (i + 1) % PROGRESS_EVERY == 0:
                        progress(i + 1, done)
                txn.commit()
            except BaseException:
                txn.abort()
                raise
            env.sync(True)
        finally:
            env.close()
        _save_npy(dfd, LMDB_SIZES, sizes, dest)
    except lmdb.MapFullError as exc:
        raise UserError(f"LMDB map of {map_size} bytes filled up in {dest}: the dataset's files grew "
                        "since its manifest was written") from exc
    except lmdb.Error as exc:
        raise _lmdb_error(exc, dest) from exc
    except OSError as exc:
        raise explain_oserror(exc, f"cannot write the LMDB pack in {dest}") from exc
    if progress:
        progress(len(manifest), done)
    files = {name: os.stat(name, dir_fd=dfd, follow_symlinks=False).st_size for name in (LMDB_DATA, LMDB_SIZES)}
    return _finish(dfd, dest, "lmdb", params, made, files, t0, {"map_size": map_size})


def _lmdb_error(exc: Exception, dest: Path) -> UserError:
    code = getattr(exc, "code", 0) or 0
    if 0 < code < 4096:  # LMDB passes errno values through (ENOSPC, EROFS, EACCES...)
        return explain_oserror(OSError(code, os.strerror(code), str(dest)), "cannot write the LMDB pack")
    return UserError(f"cannot write the LMDB pack in {dest}: {exc}")


# ---- tar shards ----------------------------------------------------------------------------------

@dataclass
class TarPlan:
    shard: np.ndarray  # int64 per sample: its shard number
    offset: np.ndarray  # int64 per sample: offset of its data in the shard
    shard_bytes: list[int]  # size of each shard file


def plan_tar(sizes: np.ndarray, shard_size: int = DEFAULT_SHARD_SIZE) -> TarPlan:
    """Which shard each sample goes to and where its bytes land: consecutive samples fill a shard
    while the closed tar (one 512-byte header per member, data padded to 512, two zero blocks, the
    whole padded to tarfile's 10240-byte record) stays within shard_size."""
    n = len(sizes)
    member = (TAR_BLOCK + _round_up_arr(sizes, TAR_BLOCK)).tolist()
    shard = np.empty(n, dtype=np.int64)
    offset = np.empty(n, dtype=np.int64)
    shard_bytes: list[int] = []
    s = cur = 0
    for i, m in enumerate(member):
        if cur > 0 and _round_up(cur + m + TAR_END, TAR_RECORD) > shard_size:
            shard_bytes.append(_round_up(cur + TAR_END, TAR_RECORD))
            s += 1
            cur = 0
        shard[i] = s
        offset[i] = cur + TAR_BLOCK
        cur += m
    if n:
        shard_bytes.append(_round_up(cur + TAR_END, TAR_RECORD))
    return TarPlan(shard, offset, shard_bytes)


def shard_name(s: int) -> str:
    return f"shard-{s:06d}.tar"


def member_name(index: int, path: str) -> str:
    """`00000042.jpg`: WebDataset's key (the index) and the file's extension (.jpeg -> jpg)."""
    ext = os.path.splitext(path)[1].lower().lstrip(".") or "bin"
    return f"{index:08d}.{'jpg' if ext == 'jpeg' else ext}"


def pack_tar(manifest: Manifest, dest: Path | None = None, shard_size: int = DEFAULT_SHARD_SIZE,
             progress: Progress | None = None, *, threads: int = 8) -> PackReport:
    """Write (or reuse) WebDataset-style tar shards of `manifest` and their offset index."""
    if shard_size < TAR_RECORD:
        raise UserError(f"shard size {shard_size} is too small (at least {TAR_RECORD} bytes)")
    dest = Path(dest) if dest is not None else default_dest(manifest, "tar", shard_size)
    sizes = np.asarray(manifest.sizes, dtype=np.int64)
    plan = plan_tar(sizes, shard_size)
    shards = [shard_name(s) for s in range(len(plan.shard_bytes))]
    params = {"format": "tar", "samples": len(manifest), "data_bytes": int(sizes.sum()),
              "manifest": _fingerprint(manifest), "shard_size": int(shard_size), "tar_format": "ustar",
              "members": "<index:08d>.<ext>"}
    made = [*shards, TAR_INDEX]
    index_bytes = 128 + 24 * len(manifest)
    got = _begin(dest, "tar", params, made, sum(plan.shard_bytes) + index_bytes, _stat_check, manifest.root)
    if isinstance(got, dict):
        return _reused(dest, got)
    with got as dfd:
        return _write_tar(manifest, dest, dfd, sizes, plan, shards, shard_size, params, made, progress, threads)


def _write_tar(manifest: Manifest, dest: Path, dfd: int, sizes: np.ndarray, plan: TarPlan, shards: list[str],
               shard_size: int, params: dict, made: list[str], progress: Progress | None,
               threads: int) -> PackReport:
    t0 = time.perf_counter()
    mtime = int(time.time())
    done = 0
    f: BinaryIO | None = None
    tf: tarfile.TarFile | None = None  # writes to f: the two are set and cleared together
    cur = -1
    try:
        for i, data in enumerate(_read_samples(manifest, threads)):
            s = int(plan.shard[i])
            if s != cur:
                if tf is not None and f is not None:
                    _close_shard(tf, f, plan.shard_bytes[cur], dest / shards[cur])
                    tf = f = None
                cur = s
                f = os.fdopen(_new_file(dfd, shards[s], dest), "wb", buffering=2**20)  # closed in _close_shard
                tf = tarfile.TarFile(fileobj=f, mode="w", format=tarfile.USTAR_FORMAT)
            ti = tarfile.TarInfo(member_name(i, manifest.paths[i]))
            ti.size = len(data)
            ti.mtime = mtime
            ti.mode = 0o644
            assert tf is not None  # the first sample (cur -1) opened a shard
            tf.addfile(ti, io.BytesIO(data))
            # tarfile's offset is now past the padded data: where the data began is what it would
            # report as offset_data when reading the shard back.
            if tf.offset - _round_up(len(data), TAR_BLOCK) != plan.offset[i]:
                raise RuntimeError(f"tar layout differs from the plan at sample {i}: tarfile wrote a header "
                                   "longer than one block")
            done += len(data)
            if progress and (i + 1) % PROGRESS_EVERY == 0:
                progress(i + 1, done)
        if tf is not None and f is not None:
            _close_shard(tf, f, plan.shard_bytes[cur], dest / shards[cur])
            tf = f = None
        _save_npy(dfd, TAR_INDEX, np.stack([plan.shard, plan.offset, sizes], axis=1), dest)
    except OSError as exc:
        raise explain_oserror(exc, f"cannot write the tar pack in {dest}") from exc
    finally:
        if f is not None:
            f.close()
    if progress:
        progress(len(manifest), done)
    files = {name: size for name, size in zip(shards, plan.shard_bytes, strict=True)}
    files[TAR_INDEX] = os.stat(TAR_INDEX, dir_fd=dfd, follow_symlinks=False).st_size
    return _finish(dfd, dest, "tar", params, made, files, t0,
                   {"shards": shards, "shard_size": int(shard_size)})


def _close_shard(tf: tarfile.TarFile, f: BinaryIO, planned: int, path: Path) -> None:
    tf.close()  # writes the end-of-archive blocks and the record padding, leaves f open
    f.flush()
    size = os.fstat(f.fileno()).st_size
    f.close()
    if size != planned:
        raise RuntimeError(f"{path}: {size} bytes written, {planned} planned")


# ---- shared: marker, reuse, space, reading the samples ------------------------------------------

class _Dest:
    """The pack's folder, open and locked while a pack is written (a context manager giving the descriptor)."""

    def __init__(self, fd: int, stack: ExitStack):
        self.fd = fd
        self.stack = stack

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def _begin(dest: Path, fmt: str, params: dict, made: list[str], need: int,
           check: Callable[[Path, dict], bool], root: Path) -> dict | _Dest:
    """The complete marker of a reusable pack at `dest`; otherwise make way for a new one (checks, the writer's
    lock, removal of what an old marker lists) and write the `incomplete` marker, and return the folder open."""
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
        if _reusable(dest, marker, fmt, params, check):
            assert marker is not None
            return marker
    _check_writable(dest)
    reclaim = sum(max(0, _size(dest / n)) for n in _old(marker))
    free = shutil.disk_usage(_existing(dest)).free
    if need > free + reclaim:
        raise UserError(f"not enough space for the {fmt} pack in {dest}: it needs {fmt_bytes(need)}, "
                        f"{fmt_bytes(free + reclaim)} free")
    stack = ExitStack()
    try:
        fd = _open_dest(dest, root)
        stack.callback(os.close, fd)
        stack.enter_context(writer_lock(fd, dest))
        now = read_pack_marker(dest, dir_fd=fd)
        if now != marker:  # another pack got here first
            if _reusable(dest, now, fmt, params, check):
                stack.close()
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
        stack.close()
        raise explain_oserror(exc, f"cannot prepare the {fmt} pack in {dest}") from exc
    except BaseException:
        stack.close()
        raise
    return _Dest(fd, stack)


def _reusable(dest: Path, marker: dict | None, fmt: str, params: dict, check: Callable[[Path, dict], bool]) -> bool:
    if marker is None:
        return False
    if marker.get("format") != fmt:
        raise UserError(f"{dest} holds an iobench {marker.get('format')} pack, not {fmt}: pick another destination")
    return marker.get("status") == "complete" and marker.get("params") == params and check(dest, marker)


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


def _new_file(dir_fd: int, name: str, dest: Path) -> int:
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


def _save_npy(dir_fd: int, name: str, array: np.ndarray, dest: Path) -> None:
    with os.fdopen(_new_file(dir_fd, name, dest), "wb") as f:
        np.save(f, array)


def _finish(dfd: int, dest: Path, fmt: str, params: dict, made: list[str], files: dict[str, int], t0: float,
            extra: dict) -> PackReport:
    os.sync()  # "complete" only for data that is on the storage; the pack time includes it
    seconds = time.perf_counter() - t0
    on_disk = sum(_allocated(dfd, name) for name in files)
    marker = {"iobench": __version__, "format": fmt, "params": params, "made": made, "status": "complete",
              "files": files, "bytes": on_disk, "seconds": round(seconds, 3), **extra,
              "completed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        write_json_atomic(dfd, PACK_MARKER, marker, dest / PACK_MARKER)
    except OSError as exc:
        raise explain_oserror(exc, f"cannot mark the {fmt} pack complete in {dest}") from exc
    return _report(dest, marker, reused=False)


def _reused(dest: Path, marker: dict) -> PackReport:
    return _report(dest, marker, reused=True)


def _report(dest: Path, marker: dict, reused: bool) -> PackReport:
    p = marker["params"]
    return PackReport(path=dest, format=marker["format"], samples=int(p["samples"]),
                      data_bytes=int(p["data_bytes"]), bytes=int(marker["bytes"]), files=len(marker["files"]),
                      seconds=float(marker["seconds"]), reused=reused, shards=len(marker.get("shards", [])))


def _stat_check(dest: Path, marker: dict) -> bool:
    """A finished pack is reused when each of its files is there, a regular file, with the size it was written
    with."""
    files = marker.get("files")
    if not isinstance(files, dict) or not files:
        return False
    return all(_safe_name(name) and _size(dest / name) == size for name, size in files.items())


def _check_writable(dest: Path) -> None:
    """The destination, or the nearest folder above it that exists, must take writes."""
    check_mount(_existing(dest), writable=True)


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


def _fingerprint(manifest: Manifest) -> str:
    """Which manifest a pack was made from: its relative paths and sizes (a changed dataset makes the
    pack stale; the same dataset seen under another mount point does not)."""
    h = hashlib.sha256()
    root = str(manifest.root).rstrip("/") + "/"
    cut = len(root)
    rel = [p[cut:] if p.startswith(root) else p for p in manifest.paths]
    h.update("\n".join(rel).encode("utf-8", "surrogateescape"))
    h.update(np.asarray(manifest.sizes, dtype="<i8").tobytes())
    return h.hexdigest()[:32]


def _read_samples(manifest: Manifest, threads: int, window: int = 64) -> Iterator[bytes]:
    """Every sample's bytes in manifest order, read by `threads` threads at most `window` ahead (a
    network file system needs several reads in flight; memory stays bounded)."""
    paths, sizes = manifest.paths, manifest.sizes.tolist()

    def load(i: int) -> bytes:
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

    n = len(paths)
    ex = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="iobench-pack")
    try:
        futs = deque(ex.submit(load, i) for i in range(min(n, window)))
        nxt = len(futs)
        while futs:
            try:
                data = futs.popleft().result()
            except OSError as exc:
                raise explain_oserror(exc, "pack cannot read the dataset") from exc
            if nxt < n:
                futs.append(ex.submit(load, nxt))
                nxt += 1
            yield data
    finally:
        ex.shutdown(wait=True, cancel_futures=True)


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _round_up_arr(x: np.ndarray, unit: int) -> np.ndarray:
    return -(-np.asarray(x, dtype=np.int64) // unit) * unit
