"""The fio job that reads exactly these files, each once per loop, whole file per IO: the job file and one iolog
per job (why iologs, and fio's quirks they work around: docs/performance.md, "How fio reads the exact files")."""

from __future__ import annotations

import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# fio's iolog parser reads a path with sscanf("%256s"): at most 256 bytes, no white space.
MAX_IOLOG_PATH = 256
# Cold runs empty the caches as iobench's own eviction does (cache.evict): write back dirty pages first, so
# none (e.g. the iologs just written) are left to flush during the timed reads, then drop everything.
PRERUN_DROP = "sh -c 'sync && echo 3 > /proc/sys/vm/drop_caches'"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class FioJob:
    """A fio job that reads given files: the job file plus one iolog per job (``numjobs``), which it names relative
    to the folder ``write`` puts them all in (fio runs from there)."""

    job: str
    name: str
    paths: tuple[str, ...]
    sizes: tuple[int, ...]
    orders: tuple[tuple[int, ...], ...]
    """Per job, the indices into ``paths`` it reads, in order, loops included."""
    drop_caches: bool = False  # each job drops the caches after its setup (build_job)

    @property
    def concurrency(self) -> int:
        return len(self.orders)

    @property
    def iolog_names(self) -> tuple[str, ...]:
        return tuple(f"{self.name}.{j}.iolog" for j in range(self.concurrency))

    @property
    def job_name(self) -> str:
        return f"{self.name}.fio"

    @property
    def ios(self) -> int:
        """Reads fio must do in total: files x loops (empty files are opened, not read)."""
        return sum(1 for order in self.orders for i in order if self.sizes[i] > 0)

    @property
    def bytes(self) -> int:
        """Bytes fio must read in total: the sum of the file sizes x loops."""
        return sum(self.sizes[i] for order in self.orders for i in order)

    def write_iolog(self, j: int, out: IO[str]) -> None:
        """Job *j*'s iolog: add its files once, then open / read the whole file / close each."""
        order = self.orders[j]
        out.write("fio version 2 iolog\n")
        for i in dict.fromkeys(order):
            out.write(f"{self.paths[i]} add\n")
        for i in order:
            p, size = self.paths[i], self.sizes[i]
            out.write(f"{p} open\n{p} read 0 {size}\n{p} close\n" if size else f"{p} open\n{p} close\n")

    def write(self, folder: str | os.PathLike[str]) -> Path:
        """Write the job file and the iologs into *folder*; return the job file's path."""
        d = Path(folder)
        d.mkdir(parents=True, exist_ok=True)
        for j, log_name in enumerate(self.iolog_names):
            with open(d / log_name, "w", encoding="utf-8", errors="surrogateescape") as f:
                self.write_iolog(j, f)
        job_path = d / self.job_name
        job_path.write_text(self.job, encoding="utf-8")
        return job_path


def fio_can_read(p: str | os.PathLike[str]) -> bool:
    """fio's iolog can name this path: no white space, at most MAX_IOLOG_PATH bytes once absolute."""
    try:
        _check_path(os.fspath(p))
    except ValueError:
        return False
    return True


def _check_path(p: str) -> str:
    ap = os.path.abspath(os.fspath(p))
    if any(c.isspace() for c in ap):
        raise ValueError(f"fio cannot replay a path with white space in it: {ap!r}")
    if len(os.fsencode(ap)) > MAX_IOLOG_PATH:
        raise ValueError(f"fio cannot replay a path longer than {MAX_IOLOG_PATH} bytes: {ap!r}")
    return ap


def build_job(
    files: Sequence[str | os.PathLike[str]],
    concurrency: int,
    *,
    sizes: Sequence[int] | None = None,
    loops: int = 1,
    seed: int | None = None,
    name: str = "iobench",
    drop_caches: bool = False,
) -> FioJob:
    """A fio job reading each of *files* whole, once per loop in total, from *concurrency* jobs: the files shuffled
    (``seed``) and dealt into equal shares, job *j* reading its share in a new order each loop, one ``pread`` of the
    whole file per file (the job file's comments say why each option). *sizes* (bytes, as *files*) saves a ``stat``
    per file. ``drop_caches`` (root): each job drops the caches after fio's ``stat()`` of every file, just before its
    clock starts (inodes cold too). Paths are made absolute; one fio's iolog cannot hold (white space, over 256
    bytes): ValueError."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, not {concurrency}")
    if loops < 1:
        raise ValueError(f"loops must be >= 1, not {loops}")
    if not _NAME_RE.match(name):
        raise ValueError(f"job name must be letters, digits, '_', '.', '-': {name!r}")
    if not files:
        raise ValueError("no files to read")
    if concurrency > len(files):
        raise ValueError(f"concurrency {concurrency} > {len(files)} files: each job needs at least one file")
    paths = tuple(_check_path(os.fspath(p)) for p in files)
    if sizes is None:
        sizes = [os.stat(p).st_size for p in paths]
    elif len(sizes) != len(paths):
        raise ValueError(f"{len(sizes)} sizes for {len(paths)} files")
    size_t = tuple(int(s) for s in sizes)

    rng = random.Random(seed)
    deck = list(range(len(paths)))
    rng.shuffle(deck)
    shares = [deck[j::concurrency] for j in range(concurrency)]
    orders = []
    for share in shares:
        order: list[int] = []
        for _ in range(loops):
            rng.shuffle(share)
            order.extend(share)
        orders.append(tuple(order))

    bs = max(*size_t, 4096)
    bs = -(-bs // 4096) * 4096
    logs = ":".join(f"{name}.{j}.iolog" for j in range(concurrency))
    job = "\n".join([
        f"; iobench fio baseline: {len(paths)} files ({sum(size_t)} B), {loops} loop(s), "
        f"{concurrency} job(s), seed {seed}",
        "; every file read whole, once per loop in total; each job replays its own iolog (its share of",
        "; the files, shuffled per loop). Rerun from the folder holding the iologs:",
        f";   fio --readonly --output-format=json {name}.fio",
        "; fadvise_hint=0: fio calls no posix_fadvise (by default it would advise SEQUENTIAL on every open,",
        "; which a loader does not). invalidate=0: the caller empties the caches.",
        "; iomem_align=4k: the buffer starts on a page (fio's default is malloc's address, 16 bytes past one,",
        "; where the kernel's copy from the page cache costs ~3x on some CPUs: iobench's readers start on a page too).",
        *(["; exec_prerun (root): each job empties them again after its setup (a stat of every file),",
           "; just before its clock starts."] if drop_caches else []),
        "[global]",
        "ioengine=psync",
        "rw=read",
        f"bs={bs}",
        "invalidate=0",
        "fadvise_hint=0",
        "iomem_align=4k",
        "group_reporting=1",
        "percentile_list=50:90:99:99.9",
        *([f"exec_prerun={PRERUN_DROP}"] if drop_caches else []),
        "",
        f"[{name}]",
        f"numjobs={concurrency}",
        f"read_iolog={logs}",
        "",
    ])
    return FioJob(job=job, name=name, paths=paths, sizes=size_t, orders=tuple(orders), drop_caches=drop_caches)
