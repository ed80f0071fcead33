"""The metadata phase (mdtest-style): how long a job's start-up spends finding its samples before the first batch,
one runner (`measure`) over the operations of the Store that holds them. A folder's: scandir of every class folder
(as torchvision's ImageFolder), then stat and open+close, each timed per file on one thread (on NFS each a round
trip). A FIFO, socket or device among the samples is never opened (a FIFO would block the phase for good): the
timed stat sees it first, in one line; open+close uses O_NONBLOCK as well."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence

import numpy as np

from iobench.dataset import Manifest
from iobench.host import cache
from iobench.host.bounded import in_child
from iobench.record.recorder import latency_summary
from iobench.result import Latency, Metadata
from iobench.safefs import refuse

SAMPLE = 20_000  # stat and open+close time a random sample this large (listing always covers the tree)


PARTS = ("evicting the page cache", "listing the dataset", "stat of the samples", "open+close of the samples")


def list_tree(dirs: list[str], beat: np.ndarray) -> int:
    """scandir every folder, as ImageFolder does; returns the regular files seen. `beat[0]` counts the folders."""
    files = 0
    for d in dirs:
        with os.scandir(d) as it:
            for entry in it:
                if entry.is_file():
                    files += 1
        beat[0] += 1
    return files


def timed(paths: Sequence[str], op: Callable[[str], object], ns: np.ndarray) -> float:
    """Rate of `op` over `paths`; `ns` (shared with a watchdog) receives the per-file times as they come."""
    clock = time.perf_counter_ns
    t0 = clock()
    for i, p in enumerate(paths):
        t = clock()
        op(p)
        ns[i] = clock() - t
    seconds = (clock() - t0) / 1e9
    return len(paths) / seconds if seconds > 0 else 0.0


def measure(manifest: Manifest, most: int, seed: int, state: str, scale_files: int,
            listing: Callable[[], tuple[int, int]], stat_op: Callable[[str], object],
            open_op: Callable[[str], object], ready: Callable[[int], str | None],
            ns: np.ndarray | None = None) -> Metadata:
    """One pass of the metadata phase, whatever holds the dataset (its Store gives the operations): `listing()`
    (folders or LIST pages, entries seen), then `stat_op` and `open_op` on a random sample of at most `most` samples,
    one at a time, each timed. `ready(part)` readies the cache before each part (1, 2, 3) and says how (the
    result's `eviction`); `ns` (2 x the sample) receives the per-sample times as they come."""
    rng = np.random.default_rng([seed, 0x3E7A])
    n = min(most, len(manifest))
    sample = [manifest.paths[i] for i in rng.choice(len(manifest), size=n, replace=False).tolist()]
    ns = np.empty(2 * n, dtype=np.int64) if ns is None else ns
    ready(1)
    t = time.perf_counter()
    dirs, files = listing()
    list_s = round(time.perf_counter() - t, 6)
    ready(2)
    stat_rate = timed(sample, stat_op, ns[:n])
    eviction = ready(3)
    oc_rate = timed(sample, open_op, ns[n:])
    return Metadata(cache=state, eviction=eviction, dirs=dirs, files=files, list_s=list_s,
                    stat_files=n, stat_per_s=round(stat_rate, 1), stat_ms=Latency(**latency_summary(ns[:n])),
                    open_close_files=n, open_close_per_s=round(oc_rate, 1),
                    open_close_ms=Latency(**latency_summary(ns[n:])), scale_files=scale_files,
                    projected_list_s=round(list_s * scale_files / max(files, 1), 3))


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
    counter = beat[1:2]

    def ready(part: int) -> str | None:
        how = None
        if state == "cold":
            beat[0] = 0
            how = cache._evict(manifest.paths, None, counter)
        beat[0] = part
        return how

    return measure(manifest, SAMPLE, seed, state, scale_files, lambda: (len(dirs), list_tree(dirs, counter)), _stat,
                   _open_close, ready, beat[2:])
