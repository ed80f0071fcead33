"""The tar pack (`pack_tar`): WebDataset-style USTAR shards of the dataset's samples, planned ahead so that each
member's offset is known, and their offset index `index.npy` (the layout: docs/architecture.md, "The pack formats")."""

from __future__ import annotations

import io
import os
import tarfile
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from iobench.dataset import Manifest
from iobench.errors import UserError, explain_oserror
from iobench.sources.pack_folder import (
    DEFAULT_SHARD_SIZE,
    PROGRESS_EVERY,
    PackReport,
    Progress,
    begin,
    default_dest,
    fingerprint,
    finish,
    new_file,
    pack_report,
    read_samples,
    round_up,
    round_up_arr,
    save_npy,
    stat_check,
)

TAR_INDEX = "index.npy"
TAR_BLOCK = tarfile.BLOCKSIZE  # 512: one USTAR header, and the unit data is padded to
TAR_RECORD = tarfile.RECORDSIZE  # 10240: tarfile pads a closed archive to a whole record
TAR_END = 2 * TAR_BLOCK  # the end-of-archive marker: two zero blocks


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
    member = (TAR_BLOCK + round_up_arr(sizes, TAR_BLOCK)).tolist()
    shard = np.empty(n, dtype=np.int64)
    offset = np.empty(n, dtype=np.int64)
    shard_bytes: list[int] = []
    s = cur = 0
    for i, m in enumerate(member):
        if cur > 0 and round_up(cur + m + TAR_END, TAR_RECORD) > shard_size:
            shard_bytes.append(round_up(cur + TAR_END, TAR_RECORD))
            s += 1
            cur = 0
        shard[i] = s
        offset[i] = cur + TAR_BLOCK
        cur += m
    if n:
        shard_bytes.append(round_up(cur + TAR_END, TAR_RECORD))
    return TarPlan(shard, offset, shard_bytes)


def shard_name(s: int) -> str:
    return f"shard-{s:06d}.tar"


def index_columns(index: np.ndarray, shards: int | None, where: object) -> tuple[int, int, array, array, array]:
    """(shards, biggest sample, and the shard, offset and size columns) of a tar pack's offset index, its shard count
    checked against the `shards` its marker lists (None: it lists none). The columns are array('q'): the hot path
    indexes them as Python ints at 8 bytes a sample (a list would take ~36, times ImageNet's 1.28 M samples times
    forked workers)."""
    nshards = int(index[:, 0].max()) + 1 if len(index) else 0
    if shards is not None and shards < nshards:
        raise UserError(f"{where}: the index names {nshards} shards, the marker {shards}")
    shard, offset, size = (array("q", index[:, c].tobytes()) for c in range(3))
    return nshards, int(index[:, 2].max()) if len(index) else 0, shard, offset, size


def member_name(index: int, path: str) -> str:
    """`00000042.jpg`: WebDataset's key (the index) and the file's extension (.jpeg -> jpg)."""
    ext = os.path.splitext(path)[1].lower().lstrip(".") or "bin"
    return f"{index:08d}.{'jpg' if ext == 'jpeg' else ext}"


def tar_params(manifest: Manifest, sizes: np.ndarray, shard_size: int) -> dict:
    """What a tar pack is made of, as its marker records it (a pack is reused only with the same)."""
    if shard_size < TAR_RECORD:
        raise UserError(f"shard size {shard_size} is too small (at least {TAR_RECORD} bytes)")
    return {"format": "tar", "samples": len(manifest), "data_bytes": int(sizes.sum()),
            "manifest": fingerprint(manifest), "shard_size": int(shard_size), "tar_format": "ustar",
            "members": "<index:08d>.<ext>"}


def add_member(tf: tarfile.TarFile, index: int, path: str, data: bytes, mtime: int, planned: int) -> None:
    """Sample `index` as the shard's next member, where the plan put its bytes (`planned`: their offset)."""
    ti = tarfile.TarInfo(member_name(index, path))
    ti.size = len(data)
    ti.mtime = mtime
    ti.mode = 0o644
    tf.addfile(ti, io.BytesIO(data))
    # tarfile's offset is now past the padded data: where the data began is what it would
    # report as offset_data when reading the shard back.
    if tf.offset - round_up(len(data), TAR_BLOCK) != planned:
        raise RuntimeError(f"tar layout differs from the plan at sample {index}: tarfile wrote a header "
                           "longer than one block")


def pack_tar(manifest: Manifest, dest: Path | None = None, shard_size: int = DEFAULT_SHARD_SIZE,
             progress: Progress | None = None, *, threads: int = 8) -> PackReport:
    """Write (or reuse) WebDataset-style tar shards of `manifest` and their offset index."""
    dest = Path(dest) if dest is not None else default_dest(manifest, "tar", shard_size)
    sizes = np.asarray(manifest.sizes, dtype=np.int64)
    params = tar_params(manifest, sizes, shard_size)
    plan = plan_tar(sizes, shard_size)
    shards = [shard_name(s) for s in range(len(plan.shard_bytes))]
    made = [*shards, TAR_INDEX]
    index_bytes = 128 + 24 * len(manifest)
    got = begin(dest, "tar", params, made, sum(plan.shard_bytes) + index_bytes, stat_check, manifest.folder)
    if isinstance(got, dict):
        return pack_report(dest, got, reused=True)
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
        for i, data in enumerate(read_samples(manifest, threads)):
            s = int(plan.shard[i])
            if s != cur:
                if tf is not None and f is not None:
                    _close_shard(tf, f, plan.shard_bytes[cur], dest / shards[cur])
                    tf = f = None
                cur = s
                f = os.fdopen(new_file(dfd, shards[s], dest), "wb", buffering=2**20)  # closed in _close_shard
                tf = tarfile.TarFile(fileobj=f, mode="w", format=tarfile.USTAR_FORMAT)
            assert tf is not None  # the first sample (cur -1) opened a shard
            add_member(tf, i, manifest.paths[i], data, mtime, int(plan.offset[i]))
            done += len(data)
            if progress and (i + 1) % PROGRESS_EVERY == 0:
                progress(i + 1, done)
        if tf is not None and f is not None:
            _close_shard(tf, f, plan.shard_bytes[cur], dest / shards[cur])
            tf = f = None
        save_npy(dfd, TAR_INDEX, np.stack([plan.shard, plan.offset, sizes], axis=1), dest)
    except OSError as exc:
        raise explain_oserror(exc, f"cannot write the tar pack in {dest}") from exc
    finally:
        if f is not None:
            f.close()
    if progress:
        progress(len(manifest), done)
    files = {name: size for name, size in zip(shards, plan.shard_bytes, strict=True)}
    files[TAR_INDEX] = os.stat(TAR_INDEX, dir_fd=dfd, follow_symlinks=False).st_size
    return finish(dfd, dest, "tar", params, made, files, t0,
                   {"shards": shards, "shard_size": int(shard_size)})


def _close_shard(tf: tarfile.TarFile, f: BinaryIO, planned: int, path: Path) -> None:
    tf.close()  # writes the end-of-archive blocks and the record padding, leaves f open
    f.flush()
    size = os.fstat(f.fileno()).st_size
    f.close()
    if size != planned:
        raise RuntimeError(f"{path}: {size} bytes written, {planned} planned")
