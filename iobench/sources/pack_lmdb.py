"""The LMDB pack (`pack_lmdb`): one environment of the dataset's samples, key = the sample index as 8-byte big-endian,
value = the file's bytes, with `sizes.npy` beside it (the layout: docs/architecture.md, "The pack formats")."""

from __future__ import annotations

import mmap
import os
import stat
from pathlib import Path

import numpy as np

from iobench.dataset import Manifest
from iobench.errors import UserError, explain_oserror
from iobench.sources.pack_folder import (
    THREADS,
    PackReport,
    Progress,
    default_dest,
    fingerprint,
    new_file,
    read_samples,
    round_up,
    save_npy,
    write_pack,
)

COMMIT_BYTES = 64 * 2**20  # LMDB: one write transaction per ~64 MB
LMDB_DATA = "data.mdb"
LMDB_SIZES = "sizes.npy"


def import_lmdb():
    try:
        import lmdb
    except ImportError as exc:
        raise UserError("the lmdb source and pack need py-lmdb, a dependency of iobench: pip install lmdb") from exc
    return lmdb


def lmdb_map_size(sizes: np.ndarray, page: int = mmap.PAGESIZE) -> int:
    """An LMDB map size that holds `sizes` with room to spare: each value rounded up to whole pages
    (a value over ~half a page goes to its own overflow pages behind a 16-byte header; smaller ones
    share leaf pages, for which this overcounts), plus leaf and branch pages for the keys (~40 bytes
    a node), plus copy-on-write pages of each commit, +25% and 64 MiB of margin. The map only
    reserves address space: the file grows to what is written."""
    return round_up(int(_lmdb_estimate(sizes, page) * 1.25) + 64 * 2**20, page)


def _lmdb_estimate(sizes: np.ndarray, page: int) -> int:
    """Bytes the written data.mdb should take (the estimate the free-space check uses)."""
    data_pages = int(((sizes.astype(np.int64) + 16 + page - 1) // page).sum())
    key_pages = -(-len(sizes) * 40 // page) * 2  # leaf nodes + branch pages, half-full at worst
    return (data_pages + key_pages + 64) * page


def pack_lmdb(manifest: Manifest, dest: Path | None = None, progress: Progress | None = None) -> PackReport:
    """Write (or reuse) an LMDB of `manifest`: key = index as 8-byte big-endian, value = file bytes."""
    lmdb = import_lmdb()
    dest = Path(dest) if dest is not None else default_dest(manifest, "lmdb")
    sizes = np.asarray(manifest.sizes, dtype=np.int64)
    params = {"format": "lmdb", "samples": len(manifest), "data_bytes": int(sizes.sum()),
              "manifest": fingerprint(manifest), "key": "index, 8-byte big-endian", "value": "file bytes"}

    def write(dfd: int) -> tuple[dict[str, int], dict]:
        map_size = lmdb_map_size(sizes, mmap.PAGESIZE)
        try:
            _write_lmdb(lmdb, manifest, dest, dfd, map_size, progress)
            save_npy(dfd, LMDB_SIZES, sizes, dest)
        except lmdb.MapFullError as exc:
            raise UserError(f"LMDB map of {map_size} bytes filled up in {dest}: the dataset's files grew "
                            "since its manifest was written") from exc
        except lmdb.Error as exc:
            raise _lmdb_error(exc, dest) from exc
        except OSError as exc:
            raise explain_oserror(exc, f"cannot write the LMDB pack in {dest}") from exc
        files = {name: os.stat(name, dir_fd=dfd, follow_symlinks=False).st_size for name in (LMDB_DATA, LMDB_SIZES)}
        return files, {"map_size": map_size}

    return write_pack(manifest, dest, "lmdb", params, [LMDB_DATA, "lock.mdb", LMDB_SIZES],
                      _lmdb_estimate(sizes, mmap.PAGESIZE), write, progress)


def _write_lmdb(lmdb, manifest: Manifest, dest: Path, dfd: int, map_size: int, progress: Progress | None) -> None:
    # data.mdb is made here, new (O_EXCL|O_NOFOLLOW): LMDB then opens the empty file iobench made (and
    # starts a new environment in it), never one a link points to.
    os.close(new_file(dfd, LMDB_DATA, dest))
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
            for i, data in enumerate(read_samples(manifest, THREADS, progress)):
                txn.put(i.to_bytes(8, "big"), data, append=True)  # keys arrive in order
                pending += len(data)
                if pending >= COMMIT_BYTES:
                    txn.commit()
                    txn = env.begin(write=True)
                    pending = 0
            txn.commit()
        except BaseException:
            txn.abort()
            raise
        env.sync(True)
    finally:
        env.close()


def _lmdb_error(exc: Exception, dest: Path) -> UserError:
    code = getattr(exc, "code", 0) or 0
    if 0 < code < 4096:  # LMDB passes errno values through (ENOSPC, EROFS, EACCES...)
        return explain_oserror(OSError(code, os.strerror(code), str(dest)), "cannot write the LMDB pack")
    return UserError(f"cannot write the LMDB pack in {dest}: {exc}")
