"""The metadata phase (mdtest-style, on the dataset tree): how long a job spends finding its files
before the first batch. Listing is what torchvision's ImageFolder does at start-up (scandir of every
class folder); then stat and open+close without reading, each timed per file on one thread, as the
start-up code runs. On NFS or Isilon each of these is a round trip; at ImageNet scale they add up.

A FIFO, socket or device among the samples is never opened (a FIFO would block the phase for good): the timed
stat sees it first and it is reported in one line; open+close uses O_NONBLOCK as well."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Sequence

import numpy as np

from iobench.dataset import Manifest, refuse
from iobench.host import cache
from iobench.host.bounded import in_child
from iobench.host.stall import DEFAULT_IO_TIMEOUT_S
from iobench.record.recorder import latency_summary
from iobench.result import Latency, Metadata
from iobench.s3 import S3Location
from iobench.s3.clients import boto3_client, explain

SAMPLE = 20_000  # stat and open+close time a random sample this large (listing always covers the tree)
OBJECT_SAMPLE = 2_000  # HEADs and first-byte GETs: each a round trip of milliseconds, one at a time as start-up does
LIST_PAGE = 1000  # keys per LIST request (S3's most)


PARTS = ("evicting the page cache", "listing the dataset", "stat of the samples", "open+close of the samples")


def list_tree(dirs: list[str], beat=None) -> int:
    """scandir every folder, as ImageFolder does; returns the regular files seen. `beat[0]` counts the folders."""
    files = 0
    for d in dirs:
        with os.scandir(d) as it:
            for entry in it:
                if entry.is_file():
                    files += 1
        if beat is not None:
            beat[0] += 1
    return files


def _timed(paths: Sequence[str], op, ns: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Rate and per-file ns of `op` over `paths`; `ns` (shared with a watchdog) receives the times as they come."""
    if ns is None:
        ns = np.empty(len(paths), dtype=np.int64)
    clock = time.perf_counter_ns
    t0 = clock()
    for i, p in enumerate(paths):
        t = clock()
        op(p)
        ns[i] = clock() - t
    seconds = (clock() - t0) / 1e9
    return len(paths) / seconds if seconds > 0 else 0.0, ns


def _stat(path: str) -> None:
    """stat, as ImageFolder's start-up does (links followed); what is not a regular file stops the phase here,
    before anything opens it."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        refuse(path, st.st_mode, "a sample file")


def _open_close(path: str) -> None:
    os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))


def metadata_phase(manifest: Manifest, state: str, scale_files: int, seed: int = 0,
                   timeout_s: float | None = None) -> Metadata:
    if isinstance(manifest.root, S3Location):
        return object_metadata(manifest, manifest.root, state, scale_files, seed,
                               timeout_s if timeout_s is not None else DEFAULT_IO_TIMEOUT_S)
    return _files_metadata(manifest, state, scale_files, seed, timeout_s)


def object_metadata(manifest: Manifest, loc: S3Location, state: str, scale_files: int, seed: int,
                    timeout_s: float) -> Metadata:
    """The metadata phase of a dataset in a bucket, as a map-style dataset's start-up meets it: LIST of its
    prefix in pages of 1,000 keys (`dirs`: the LIST requests), then one at a time on a random sample, HEAD (in
    `stat_*`) and a ranged GET of the first byte (in `open_close_*`: the request without the body's transfer).
    No cache to drop: "cold" is the first pass, "warm" the second. Each request is bounded by the client's
    time-out (no hang on a server that stops answering: one line, exit 3)."""
    client = boto3_client(loc, timeout_s=timeout_s, attempts=1)
    rng = np.random.default_rng([seed, 0x3E7A])
    n = min(OBJECT_SAMPLE, len(manifest))
    sample = [manifest.paths[i] for i in rng.choice(len(manifest), size=n, replace=False).tolist()]
    top = loc.key("")
    try:
        t = time.perf_counter()
        pages = keys = 0
        for page in client.get_paginator("list_objects_v2").paginate(
                Bucket=loc.bucket, Prefix=top, PaginationConfig={"PageSize": LIST_PAGE}):
            pages += 1
            keys += page.get("KeyCount", len(page.get("Contents", [])))
        list_s = round(time.perf_counter() - t, 6)
        head_rate, head_ns = _timed(sample, lambda k: client.head_object(Bucket=loc.bucket, Key=k))
        first_rate, first_ns = _timed(sample, lambda k: client.get_object(Bucket=loc.bucket, Key=k,
                                                                          Range="bytes=0-0")["Body"].read())
    except Exception as exc:
        raise explain(exc, loc, "the metadata phase (LIST, HEAD) on") from None
    return Metadata(cache=state, eviction="no client cache (object storage): a warm pass is the second",
                    dirs=pages, files=keys, list_s=list_s, stat_files=n, stat_per_s=round(head_rate, 1),
                    stat_ms=Latency(**latency_summary(head_ns)), open_close_files=n,
                    open_close_per_s=round(first_rate, 1), open_close_ms=Latency(**latency_summary(first_ns)),
                    scale_files=scale_files, projected_list_s=round(list_s * scale_files / max(keys, 1), 3))


def _files_metadata(manifest: Manifest, state: str, scale_files: int, seed: int = 0,
                    timeout_s: float | None = None) -> Metadata:
    """One pass of list, stat, open+close; for "cold", the caches are emptied before each part
    (as root, drop_caches also drops dentries and inodes; per-file fadvise cannot, so cold
    metadata without root is really warm: the eviction field says which was used).
    `timeout_s`: the pass runs in a child process (see bounded); no progress for that long (the storage stopped
    answering) raises StorageStalled naming the part. The progress marks cost nothing per file: the watchdog
    sees the per-file times arrive in shared memory."""
    n = min(SAMPLE, len(manifest))
    # beat: [part, folders listed / files evicted, stat ns x n, open+close ns x n]
    return in_child(lambda beat: _phase(manifest, state, scale_files, seed, beat), timeout_s,
                    lambda beat: PARTS[int(beat[0])], slots=2 + 2 * n)


def _phase(manifest: Manifest, state: str, scale_files: int, seed: int, beat: np.ndarray) -> Metadata:
    dirs = sorted({os.path.dirname(p) for p in manifest.paths})
    rng = np.random.default_rng([seed, 0x3E7A])
    n = min(SAMPLE, len(manifest))
    sample = [manifest.paths[i] for i in rng.choice(len(manifest), size=n, replace=False).tolist()]
    eviction = None
    counter = beat[1:2]

    def prepare() -> None:
        nonlocal eviction
        if state == "cold":
            beat[0] = 0
            eviction = cache._evict(manifest.paths, None, counter)

    prepare()
    beat[0] = 1
    t = time.perf_counter()
    files = list_tree(dirs, counter)
    list_s = round(time.perf_counter() - t, 6)
    prepare()
    beat[0] = 2
    stat_rate, stat_ns = _timed(sample, _stat, beat[2:2 + n])
    prepare()
    beat[0] = 3
    oc_rate, oc_ns = _timed(sample, _open_close, beat[2 + n:])
    return Metadata(cache=state, eviction=eviction, dirs=len(dirs), files=files, list_s=list_s,
                    stat_files=n, stat_per_s=round(stat_rate, 1), stat_ms=Latency(**latency_summary(stat_ns)),
                    open_close_files=n, open_close_per_s=round(oc_rate, 1),
                    open_close_ms=Latency(**latency_summary(oc_ns)), scale_files=scale_files,
                    projected_list_s=round(list_s * scale_files / max(files, 1), 3))
