"""Packing a dataset into few big files: LMDB and WebDataset-style tar shards (`iobench pack`).
Here: finding a made pack; the LMDB writer is in pack_lmdb.py, the tar writer in pack_tar.py, and what both share
(the pack folder's marker, its writer lock, its resumable writes and its checks) in pack_folder.py; this module
names what callers use of them.

Both packs are written inside the dataset by default (`<dataset root>/packed/lmdb/`,
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

from pathlib import Path

from iobench.dataset import Manifest, fmt_bytes
from iobench.sources.pack_folder import (
    DEFAULT_SHARD_SIZE,
    PACK_MARKER,
    PackReport,
    default_dest,
    fingerprint,
    read_pack_marker,
)
from iobench.sources.pack_lmdb import pack_lmdb
from iobench.sources.pack_tar import pack_tar

__all__ = ["PACK_MARKER", "PackReport", "find_pack", "fmt_bytes", "pack_lmdb", "pack_tar"]


def find_pack(manifest: Manifest, fmt: str, shard_size: int = DEFAULT_SHARD_SIZE) -> Path | None:
    """The default-place pack of `manifest` if it is complete and made from this manifest, else None."""
    dest = default_dest(manifest, fmt, shard_size)
    marker = read_pack_marker(dest)
    if not marker or marker.get("status") != "complete":
        return None
    return dest if marker.get("params", {}).get("manifest") == fingerprint(manifest) else None
