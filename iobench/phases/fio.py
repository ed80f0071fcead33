"""fio baseline: what the storage itself does for these exact files at this concurrency.
(~660 lines: the iolog job files, running fio under the stall watchdog, and reading its JSON are one contract with
one binary, described below.)

iobench runs the real ``fio`` binary (Debian package ``fio``) as a subprocess and parses its JSON, to
give a figure to hold iobench's own Python readers against.

How the job reads "exactly these files, each once per loop, whole file per IO": fio's ordinary file
options cannot do it for small files of mixed sizes. With ``filename=a:b:...`` (or ``opendir=``) and
``bs`` >= the largest file, fio skips every file smaller than ``bs`` without reading it (an IO may not
pass the end of a file), and with a smaller ``bs`` it never reads a file's last partial block; a job
file's option value is also capped at 4,096 characters (~100 paths). So each job replays an iolog
(``read_iolog``, "fio version 2 iolog"): per file ``open``, one ``read 0 <size>``, ``close``, in an order
shuffled per loop. Job *j* of ``numjobs`` replays the *j*-th log, holding its share of the files, so
every file is read exactly once per loop in total.

fio quirks found with fio 3.33 (see the notes in ``build_job`` and ``run_fio``):

* fio looks every iolog line's file up by a linear scan over the job's files: setup costs about
  ``1.2e-8 s x loops x (files per job)**2`` (5 s for 20,000 files in one job, 20 s for 40,000), done by
  each job before its clock starts. Sample the dataset (a few 10,000 files) for the baseline.
* Before the timed phase fio ``stat()``s every file (to size it): on a cold run the data is cold but
  inodes/dentries have just been read, so fio's open() is cheaper than a truly cold one.
* fio's ``loops=`` does not replay an iolog again: loops are written into the logs.
* A read longer than the file fails the job ("full resid"): logs carry each file's exact size.
* group_reporting's runtime is the longest job's runtime (ms resolution) and iops = ios / that: it
  assumes the jobs ran side by side. Jobs start their clocks one by one after parsing their logs, so
  keep logs small next to the run, and runs >= ~1 s (``loops``) for the rate to mean something.

Is fio at its best here? At one job the replay does what a Python ``open``/``read``/``close`` loop does,
syscall for syscall (strace: ``openat(O_RDONLY)``, one ``pread64`` of the whole file, ``close``; no
``fadvise64``: ``fadvise_hint=0``, whereas fio's default would advise SEQUENTIAL on every open; no
``stat`` in the timed part); its clock starts after the log parsing, the ``stat`` of every file and
``exec_prerun`` (backend.c ``thread_main``; runtime = first ``open`` to last ``close``); warm, it reads as
many files/s as the Python loop (50,000-70,000 on 1,000-20,000 files). Measured side by side, cold, the
two agree; a single cold run, though, varies up to 2x on a shared machine (other processes dropping the
caches, CPU and disk load), either way. So ``run_fio(repeats=N)`` keeps the fastest of N runs (the raw
upper bound), and ``FioResult.caveats`` says when the figure kept may still be below fio's best.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from iobench.errors import UserError
from iobench.host.bounded import stalled
from iobench.host.stall import StorageStalled
from iobench.safefs import write_file

__all__ = [
    "FioError",
    "FioJob",
    "FioMissing",
    "FioResult",
    "build_job",
    "fio_can_read",
    "fio_version",
    "parse_fio_json",
    "run_fio",
]

INSTALL_HINT = "install it with `apt-get install -y fio` (Debian package fio)"
# fio's iolog parser reads a path with sscanf("%256s"): at most 256 bytes, no white space.
MAX_IOLOG_PATH = 256
DROP_CACHES = "/proc/sys/vm/drop_caches"
VMSTAT = "/proc/vmstat"
# Cold runs empty the caches as iobench's own eviction does (cache.evict): write back dirty pages first, so
# none (e.g. the iologs just written) are left to flush during the timed reads, then drop everything.
PRERUN_DROP = "sh -c 'sync && echo 3 > /proc/sys/vm/drop_caches'"
SHORT_RUN_S = 0.1
"""Timed reads shorter than this get a caveat: 1 ms runtime resolution, jobs that start one by one."""
KEEP_IOLOGS_MAX = 1 << 20
"""``run_fio(save_to=...)`` copies a job's iologs there only when they total at most this many bytes (~3,000
files read once): they list every file's path (once, then once more per read), so they grow with the sample and
the loops."""
_PERCENTILES = {"p50": "50.000000", "p90": "90.000000", "p99": "99.000000", "p999": "99.900000"}
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


class FioMissing(UserError):
    """fio is not on PATH."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or f"fio is not installed (not found on PATH): {INSTALL_HINT}")


class FioError(RuntimeError):
    """fio ran but failed, timed out, or did not do the IO asked of it."""


def _fio_binary() -> str | None:
    return shutil.which("fio")


def fio_version() -> str | None:
    """fio's version ("3.33"), or None when fio is not on PATH (or does not run)."""
    exe = _fio_binary()
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.strip()
    return text.removeprefix("fio-") or None


@dataclass(frozen=True)
class FioJob:
    """A fio job that reads given files: the job file plus one iolog per job (``numjobs``).

    ``job`` names the logs by relative path (``iolog_names``): write everything into one folder with
    ``write(folder)`` and run ``fio --readonly --output-format=json <job file>`` from that folder.
    """

    job: str
    name: str
    paths: tuple[str, ...]
    sizes: tuple[int, ...]
    orders: tuple[tuple[int, ...], ...]
    """Per job, the indices into ``paths`` it reads, in order, loops included."""
    loops: int

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

    def iolog(self, j: int) -> str:
        """Job *j*'s iolog as text (for small jobs and tests; ``write`` streams to disk)."""
        buf = io.StringIO()
        self.write_iolog(j, buf)
        return buf.getvalue()

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
    max_file_size: int | None = None,
    sizes: Sequence[int] | None = None,
    loops: int = 1,
    seed: int | None = None,
    name: str = "iobench",
    drop_caches: bool = False,
) -> FioJob:
    """A fio job reading each of *files* whole, once per loop in total, from *concurrency* jobs.

    The files are shuffled (``seed``) and dealt into *concurrency* equal shares; job *j* reads its share
    in a new random order each loop, one ``pread`` of the whole file per file, between an ``open`` and a
    ``close`` (``ioengine=psync``, no fadvise hint, ``invalidate=0``: evict the page cache yourself).
    *sizes* (bytes, same order as *files*) saves a ``stat`` per file; *max_file_size*, when given, is
    checked against them and sets fio's buffer size (``bs``).
    Paths are made absolute; fio's iolog cannot hold white space or paths over 256 bytes (ValueError).
    ``drop_caches`` (root): each job runs ``sync && echo 3 > /proc/sys/vm/drop_caches`` after fio's setup
    has ``stat()``ed every file and just before its clock starts, so inodes and dentries are cold too.
    """
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
    largest = max(size_t)
    if max_file_size is not None and largest > max_file_size:
        big = paths[size_t.index(largest)]
        raise ValueError(f"{big} is {largest} B, larger than max_file_size={max_file_size}")

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

    bs = max(max_file_size or 0, largest, 4096)
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
        *(["; exec_prerun (root): each job empties them again after its setup (a stat of every file),",
           "; just before its clock starts."] if drop_caches else []),
        "[global]",
        "ioengine=psync",
        "rw=read",
        f"bs={bs}",
        "invalidate=0",
        "fadvise_hint=0",
        "group_reporting=1",
        "percentile_list=50:90:99:99.9",
        *([f"exec_prerun={PRERUN_DROP}"] if drop_caches else []),
        "",
        f"[{name}]",
        f"numjobs={concurrency}",
        f"read_iolog={logs}",
        "",
    ])
    return FioJob(job=job, name=name, paths=paths, sizes=size_t, orders=tuple(orders), loops=loops)


@dataclass(frozen=True)
class FioResult:
    """fio's measurement of one job (group_reporting: all ``concurrency`` jobs together).

    ``latency_ms`` is fio's completion latency (clat) of each read: the ``pread()`` of one whole file.
    It does not include the file's ``open()``/``close()`` (nor fio's setup ``stat()``), which a
    small-file reader pays; ``seconds`` (fio's runtime) does include open and close, so
    ``files_per_s`` is the full per-file rate.
    """

    files_per_s: float
    mb_per_s: float
    """10**6 bytes per second, from the bytes fio read."""
    bytes: int
    ios: int
    seconds: float
    """fio's read runtime (1 ms resolution: make runs last >= 1 s with ``loops`` for good figures)."""
    latency_ms: dict[str, float]
    """p50, p90, p99, p999, max and mean of the read (clat) latency, in ms."""
    concurrency: int
    version: str
    job: str
    loops: int = 1
    files: int = 0
    iops: float = 0.0
    """fio's own iops figure (should equal files_per_s)."""
    setup_s: float = 0.0
    """Wall time of the fio process not spent in the timed reads (parsing logs, stat of every file)."""
    workdir: str | None = None
    """Where the job file and iologs were kept (``run_fio(workdir=...)``), else None."""
    extra: dict[str, Any] = field(default_factory=dict)
    """CPU use of fio's jobs (usr_cpu, sys_cpu, %), short reads."""
    repeats: int = 1
    """How many times fio ran the job (``run_fio(repeats=...)``); this result is the fastest run's."""
    runs_files_per_s: tuple[float, ...] = ()
    """files/s of every run, in order (the spread shows how steady the storage was)."""
    foreign_drops: int | None = None
    """Cache drops (writes to /proc/sys/vm/drop_caches) by other processes while the kept run's fio ran
    (from /proc/vmstat's drop_pagecache / drop_slab, less fio's own ``drop_caches``); None: not readable."""
    caveats: tuple[str, ...] = ()
    """Why this figure may be below fio's best here (empty: none that iobench could see): a cache drop by
    another process during the run, or timed reads too short. A caller should label such a baseline, and
    not rest a verdict on it."""
    raw_json: str = field(default="", repr=False)
    """fio's own ``--output-format=json`` document, as fio printed it (any lines around it left out), of the
    run kept: what fio-plot and other fio tooling read."""
    saved: tuple[str, ...] = ()
    """Files written to ``run_fio(save_to=...)``: ``<name>.json`` (``raw_json``), ``<name>.fio`` (the job
    file) and, when they total <= ``KEEP_IOLOGS_MAX`` bytes, the iologs ``<name>.<j>.iolog`` it replays."""

    @property
    def at_best(self) -> bool:
        """True when nothing iobench can see kept fio from its best (no ``caveats``)."""
        return not self.caveats

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "at_best": self.at_best}


def _json_start(text: str) -> int:
    """Offset of fio's JSON document: the first line that starts with '{' (fio may print lines first)."""
    m = re.search(r"^\{", text, flags=re.MULTILINE)
    if m is None:
        raise ValueError("no JSON object in fio's output")
    return m.start()


def _last_line(*texts: str) -> str:
    for t in texts:
        lines = [ln.strip() for ln in t.splitlines() if ln.strip()]
        if lines:
            return lines[-1]
    return ""


def _with_errno_text(line: str) -> str:
    """fio's job error with its errno spelled out: fio cuts the line at 128 characters, so behind a long path
    "err=2/..., error=No such file or directory" arrives as "error=No"."""
    m = re.search(r"\berr=\s*(\d+)/", line)
    if m is None or int(m[1]) == 0:
        return line
    text = os.strerror(int(m[1]))
    return line if text in line else f"{line} [errno {m[1]}: {text}]"


def _parse_fio_json(text: str) -> tuple[dict[str, Any], str]:
    """fio's JSON document parsed, and its text as fio printed it (from its first '{' to its last '}')."""
    start = _json_start(text)
    obj, end = json.JSONDecoder().raw_decode(text, start)
    if not isinstance(obj, dict):
        raise ValueError("fio's JSON is not an object")
    return obj, text[start:end]


def parse_fio_json(text: str) -> dict[str, Any]:
    """Parse fio's ``--output-format=json`` output, skipping any non-JSON lines before (or after) it."""
    return _parse_fio_json(text)[0]


def _write_atomic(path: Path, text: str | None = None, *, copy_of: Path | None = None) -> None:
    """Write *text* (or a copy of the file *copy_of*) to *path* through a temporary file beside it and
    ``os.replace``: a reader sees the old file or the whole new one, never a part."""
    if copy_of is not None:
        with open(copy_of, "rb") as f:
            write_file(path, iter(lambda: f.read(1 << 20), b""))
    else:
        write_file(path, text or "")


def _save(result: FioResult, job: FioJob, workdir: Path, save_to: Path) -> tuple[str, ...]:
    """Keep fio's JSON, the job file and (when small) the iologs in *save_to*; see ``FioResult.saved``."""
    save_to.mkdir(parents=True, exist_ok=True)
    out = [save_to / f"{job.name}.json", save_to / job.job_name]
    _write_atomic(out[0], result.raw_json + "\n")
    _write_atomic(out[1], job.job)
    logs = [workdir / n for n in job.iolog_names]
    keep = sum(p.stat().st_size for p in logs) <= KEEP_IOLOGS_MAX
    for p in logs if keep else ():
        _write_atomic(save_to / p.name, copy_of=p)
        out.append(save_to / p.name)
    # An earlier run's iologs of the same name (another numjobs, or logs now too large) would not match.
    stale = re.compile(rf"^{re.escape(job.name)}\.\d+\.iolog$")
    for p in save_to.iterdir():
        if stale.match(p.name) and p not in out:
            p.unlink(missing_ok=True)
    return tuple(str(p) for p in out)


def _result_from_json(doc: dict[str, Any], job: FioJob, version: str, wall_s: float) -> FioResult:
    jobs = doc.get("jobs") or []
    if len(jobs) != 1:
        raise FioError(f"expected one fio job group (group_reporting=1), got {len(jobs)}")
    j = jobs[0]
    if j.get("error"):
        raise FioError(f"fio job failed with error {j['error']} ({os.strerror(int(j['error']))})")
    r = j["read"]
    ios, nbytes, runtime_ms = int(r["total_ios"]), int(r["io_bytes"]), int(r["runtime"])
    if ios != job.ios or nbytes != job.bytes:
        raise FioError(f"fio read {ios} files / {nbytes} B, expected {job.ios} / {job.bytes} "
                       "(did files change size, or fail to open?)")
    seconds = runtime_ms / 1000.0
    clat = r.get("clat_ns") or {}
    pct = clat.get("percentile") or {}
    lat: dict[str, float] = {k: pct[key] / 1e6 for k, key in _PERCENTILES.items() if key in pct}
    if clat.get("N"):
        # fio's percentiles are bin values (64 bins per power of two: up to ~1.6% high) and can
        # exceed the exact max: clamp them to it.
        lat = {k: min(v, clat["max"] / 1e6) for k, v in lat.items()}
        lat["max"] = clat["max"] / 1e6
        lat["mean"] = clat["mean"] / 1e6
    return FioResult(
        files_per_s=ios / seconds if seconds else 0.0,
        mb_per_s=nbytes / seconds / 1e6 if seconds else 0.0,
        bytes=nbytes,
        ios=ios,
        seconds=seconds,
        latency_ms=lat,
        concurrency=job.concurrency,
        version=version,
        job=job.job,
        loops=job.loops,
        files=len(job.paths),
        iops=float(r.get("iops", 0.0)),
        setup_s=max(0.0, wall_s - seconds),
        extra={"usr_cpu": j.get("usr_cpu"), "sys_cpu": j.get("sys_cpu"),
               "short_ios": r.get("short_ios", 0), "job_runtime_ms": j.get("job_runtime")},
    )


def _drop_counts() -> tuple[int, int] | None:
    """(drop_pagecache, drop_slab) from /proc/vmstat: how many times the caches were dropped since boot."""
    try:
        with open(VMSTAT, encoding="ascii") as f:
            counts = dict(line.split()[:2] for line in f if line.startswith("drop_"))
        return int(counts["drop_pagecache"]), int(counts["drop_slab"])
    except (OSError, KeyError, ValueError):
        return None


def _foreign_drops(before: tuple[int, int] | None, after: tuple[int, int] | None, own: int) -> int | None:
    """Cache drops in between by someone else: the counters' growth less the *own* drops (each of fio's
    jobs writes 3, counted in both)."""
    if before is None or after is None:
        return None
    return max(0, after[0] - before[0] - own, after[1] - before[1] - own)


def _caveats(seconds: float, foreign_drops: int | None) -> tuple[str, ...]:
    """What may have kept this run's figure below fio's best (see ``FioResult.caveats``)."""
    out = []
    if foreign_drops:
        out.append(f"another process dropped the caches {foreign_drops} time(s) while fio ran: its reads may "
                   "have found less cached than prepared, and that work ran beside them")
    if seconds < SHORT_RUN_S:
        out.append(f"fio's timed reads lasted {seconds * 1000:.0f} ms (< {SHORT_RUN_S * 1000:.0f} ms): its "
                   "runtime has 1 ms resolution and its jobs start one by one; read more files or loops")
    return tuple(out)


FIO_TICK_S = 1.0  # how often a running fio's progress is looked at
FIO_KILL_WAIT_S = 3.0  # after SIGKILL, how long fio's processes may take to go; those left are stuck in IO


def _run(cmd: list[str], cwd: Path, timeout_s: float | None,
         io_timeout_s: float | None = None) -> tuple[int, str, str]:
    """Run fio in its own process group so a timeout can stop its forked jobs too. `io_timeout_s`: fio's processes
    doing nothing for that long (no bytes read, no read() call, no job waking up: the storage stopped answering)
    raises StorageStalled. Stopping fio never waits more than a few seconds: a job stuck in uninterruptible IO
    cannot be killed, and is named (left behind) instead."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    t0 = last_t = time.monotonic()
    last = None
    try:
        while True:
            try:
                left = FIO_TICK_S if timeout_s is None else max(0.0, t0 + timeout_s - time.monotonic())
                out, err = proc.communicate(timeout=min(FIO_TICK_S, left))
                return proc.returncode, out, err
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if timeout_s is not None and now - t0 >= timeout_s:
                break
            if io_timeout_s is not None:
                progress = _progress(proc.pid)
                if progress != last:
                    last, last_t = progress, now
                elif now - last_t >= io_timeout_s:
                    raise stalled("fio ran its baseline", io_timeout_s, _stop(proc), "fio process")
    except StorageStalled:
        raise
    except BaseException:  # Ctrl-C: fio, in a session of its own, would read on
        _stop(proc)
        raise
    _stop(proc)
    raise FioError(f"fio timed out after {timeout_s} s")


def _group(pgid: int) -> list[int]:
    """The pids of process group `pgid` (fio and its job processes), from /proc."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 3 and int(fields[2]) == pgid and fields[0] != b"Z":
                pids.append(int(name))
    return pids


def _progress(pgid: int) -> tuple:
    """What fio's processes have done so far: per process, bytes and read calls (/proc/PID/io) and, but for the
    main process (which wakes up every 100 ms whatever the jobs do), context switches and CPU time (a job parsing
    its iolog or stat()ing its files before the timed reads is busy, not stalled). Unchanged: nothing moved."""
    out = []
    for pid in sorted(_group(pgid)):
        item: list[int | str] = [pid]
        try:
            with open(f"/proc/{pid}/io", encoding="ascii") as f:
                item += [line.split()[1] for line in f if line.startswith(("rchar", "syscr"))]
            if pid != pgid:
                with open(f"/proc/{pid}/status", encoding="ascii") as f:
                    item += [line.split()[1] for line in f if "ctxt_switches" in line]
                with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                    item += f.read().rsplit(")", 1)[1].split()[11:13]  # utime, stime (fields 14 and 15)
        except (OSError, IndexError):
            pass
        out.append(tuple(item))
    return tuple(out)


def _stop(proc: subprocess.Popen) -> tuple[int, ...]:
    """SIGTERM then SIGKILL fio's process group, a few seconds each at most; returns the pids still there (stuck
    in uninterruptible IO), not waited for."""
    for sig, wait_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, FIO_KILL_WAIT_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=wait_s)
            break
    if proc.poll() is None:
        return tuple(_group(proc.pid)) or (proc.pid,)
    return tuple(_group(proc.pid))


def run_fio(
    files: Sequence[str | os.PathLike[str]],
    concurrency: int,
    *,
    max_file_size: int | None = None,
    sizes: Sequence[int] | None = None,
    loops: int = 1,
    seed: int | None = None,
    timeout_s: float | None = None,
    workdir: str | os.PathLike[str] | None = None,
    drop_caches: bool = False,
    repeats: int = 1,
    prepare: Callable[[], object] | None = None,
    name: str = "iobench",
    save_to: str | os.PathLike[str] | None = None,
    io_timeout_s: float | None = None,
) -> FioResult:
    """Read *files* with fio (see ``build_job``) and return its measurement.

    Raises FioMissing when fio is not on PATH, FioError when fio fails (with fio's last error line),
    times out, or reads other than files x loops files / bytes. The job file and iologs go to a
    temporary folder, or to *workdir* (kept, to rerun by hand). Runs ``fio --readonly``: it cannot write.

    Cold runs: fio ``stat()``s every file before its clock starts, so after your own eviction fio reads
    cold data through warm inodes/dentries (here, local ext4: ~15% more files/s than truly cold; more
    where a stat is a network round trip). ``drop_caches=True`` (root) drops all caches again after
    that stat; see ``build_job``.

    ``repeats``: run the same job that many times and keep the fastest run (fio at its best: one cold run
    on a shared machine can be 2x off); ``runs_files_per_s`` lists them all. ``prepare``, when given, is
    called before each run (e.g. the caller's eviction). A cold run repeated without ``drop_caches`` needs
    it: fio itself leaves the files cached. ``caveats`` says when even the fastest run may be below fio's
    best (another process dropped the caches while it ran, or it was too short).

    ``raw_json`` keeps fio's own JSON output of the run kept. ``save_to``: a folder to keep it in, as
    ``<name>.json``, beside the job file ``<name>.fio`` and, when small (``KEEP_IOLOGS_MAX``), the iologs it
    replays (each written atomically; ``saved`` lists them). ``name`` names the job and its files.

    ``io_timeout_s``: fio doing nothing for that long (the storage stopped answering) raises StorageStalled (see
    ``_run``); its processes stuck in IO are left behind, named in the error's ``left_behind``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, not {repeats}")
    if drop_caches and not os.access(DROP_CACHES, os.W_OK):
        raise PermissionError(errno.EACCES, f"drop_caches=True needs root: cannot write {DROP_CACHES}")
    exe = _fio_binary()
    if exe is None:
        raise FioMissing()
    version = fio_version() or "unknown"
    job = build_job(files, concurrency, max_file_size=max_file_size, sizes=sizes, loops=loops, seed=seed,
                    name=name, drop_caches=drop_caches)
    own_drops = concurrency if drop_caches else 0  # each job's exec_prerun
    results: list[FioResult] = []
    with tempfile.TemporaryDirectory(prefix="iobench-fio-") as tmp:
        folder = Path(workdir) if workdir is not None else Path(tmp)
        job_path = job.write(folder)
        cmd = [exe, "--readonly", "--output-format=json", "--eta=never", job_path.name]
        for _ in range(repeats):
            if prepare is not None:
                prepare()
            drops0 = _drop_counts()
            t0 = time.perf_counter()
            rc, out, err = _run(cmd, folder, timeout_s, io_timeout_s)
            wall = time.perf_counter() - t0
            foreign = _foreign_drops(drops0, _drop_counts(), own_drops)
            try:
                doc, raw = _parse_fio_json(out)
            except ValueError:
                doc, raw = None, ""
            if rc != 0 or doc is None:
                # fio prints job errors ("fio: pid=..., err=5/...") on stdout before its JSON, others on stderr.
                prefix = out[:_json_start(out)] if doc is not None else out
                msg = _with_errno_text(_last_line(err, prefix)) or f"exit status {rc}"
                raise FioError(f"fio failed: {msg}")
            res = _result_from_json(doc, job, version, wall)
            results.append(replace(res, foreign_drops=foreign, caveats=_caveats(res.seconds, foreign), raw_json=raw))
        best = max(results, key=lambda r: r.files_per_s)
        result = replace(best, repeats=repeats, runs_files_per_s=tuple(round(r.files_per_s, 2) for r in results))
        if save_to is not None:
            result = replace(result, saved=_save(result, job, folder, Path(save_to)))
    if workdir is not None:
        result = replace(result, workdir=str(Path(workdir).resolve()))
    return result
