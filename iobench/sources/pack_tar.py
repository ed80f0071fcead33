"""The tar pack (`pack_tar`): WebDataset-style USTAR shards of the dataset's samples, planned ahead so that each
member's offset is known, and their offset index `index.npy` (the layout: docs/architecture.md, "The pack formats")."""

from __future__ import annotations

import io
import os
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

import numpy as np

from iobench.dataset import Manifest
from iobench.errors import UserError, explain_oserror
from iobench.sources.pack_folder import (
    DEFAULT_SHARD_SIZE,
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

TAR_INDEX = "index.npy"
TAR_BLOCK = tarfile.BLOCKSIZE  # 512: one USTAR header, and the unit data is padded to
TAR_RECORD = tarfile.RECORDSIZE  # 10240: tarfile pads a closed archive to a whole record
TAR_END = 2 * TAR_BLOCK  # the end-of-archive marker: two zero blocks
F = TypeVar("F", bound=BinaryIO)  # a shard's file: on disk, or in memory (sources/pack_s3.py)


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
    # each member: its header, then its data in whole blocks
    member = (TAR_BLOCK + -(-np.asarray(sizes, dtype=np.int64) // TAR_BLOCK) * TAR_BLOCK).tolist()
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


def pack_tar(manifest: Manifest, dest: Path | None = None, shard_size: int = DEFAULT_SHARD_SIZE,
             progress: Progress | None = None) -> PackReport:
    """Write (or reuse) WebDataset-style tar shards of `manifest` and their offset index."""
    dest = Path(dest) if dest is not None else default_dest(manifest, "tar", shard_size)
    sizes = np.asarray(manifest.sizes, dtype=np.int64)
    params = tar_params(manifest, sizes, shard_size)
    plan = plan_tar(sizes, shard_size)
    shards = [shard_name(s) for s in range(len(plan.shard_bytes))]

    def write(dfd: int) -> tuple[dict[str, int], dict]:
        try:
            write_shards(manifest, plan, read_samples(manifest, THREADS, progress), dest,
                         lambda s: os.fdopen(new_file(dfd, shards[s], dest), "wb", buffering=2**20))
            save_npy(dfd, TAR_INDEX, np.stack([plan.shard, plan.offset, sizes], axis=1), dest)
        except OSError as exc:
            raise explain_oserror(exc, f"cannot write the tar pack in {dest}") from exc
        files = dict(zip(shards, plan.shard_bytes, strict=True))
        files[TAR_INDEX] = os.stat(TAR_INDEX, dir_fd=dfd, follow_symlinks=False).st_size
        return files, {"shards": shards, "shard_size": int(shard_size)}

    index_bytes = 128 + 24 * len(manifest)
    return write_pack(manifest, dest, "tar", params, [*shards, TAR_INDEX], sum(plan.shard_bytes) + index_bytes,
                      write, progress)


def write_shards(manifest: Manifest, plan: TarPlan, samples: Iterator[bytes], where: object,
                 open_shard: Callable[[int], F], done: Callable[[int, F], None] | None = None) -> None:
    """Each sample (`samples`: their bytes in manifest order) as a member of its shard, at the plan's offset:
    `open_shard(s)` gives shard s's file (`where` names it in an error), handed whole to `done(s, f)`, then closed."""
    mtime = int(time.time())
    # each shard's last sample: the shard is closed after it
    last = (np.searchsorted(plan.shard, np.arange(1, len(plan.shard_bytes) + 1)) - 1).tolist()
    f: F | None = None
    try:
        for i, data in enumerate(samples):
            s = int(plan.shard[i])
            if f is None:
                f = open_shard(s)
                tf = tarfile.TarFile(fileobj=f, mode="w", format=tarfile.USTAR_FORMAT)
            ti = tarfile.TarInfo(member_name(i, manifest.paths[i]))
            ti.size = len(data)
            ti.mtime = mtime
            ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
            # tarfile's offset is now past the padded data: where the data began is what it would
            # report as offset_data when reading the shard back.
            if tf.offset - round_up(len(data), TAR_BLOCK) != plan.offset[i]:
                raise RuntimeError(f"tar layout differs from the plan at sample {i}: tarfile wrote a header "
                                   "longer than one block")
            if i == last[s]:
                tf.close()  # writes the end-of-archive blocks and the record padding, leaves f open
                if (size := f.seek(0, io.SEEK_END)) != plan.shard_bytes[s]:  # (flushed first)
                    raise RuntimeError(f"{where}/{shard_name(s)}: {size} bytes written, {plan.shard_bytes[s]} "
                                       "planned")
                if done is not None:
                    done(s, f)
                f.close()
                f = None
    finally:
        if f is not None:
            f.close()
