"""fio baseline: what the storage itself does for these exact files at this concurrency. The real ``fio`` binary
(Debian package ``fio``) runs here under the stall watchdog, replaying the iologs of fio_job.py (why iologs, and
fio's quirks they work around: docs/performance.md, "How fio reads the exact files"); fio_json.py reads its JSON.
One cold run on a shared machine can be 2x off: ``run_fio(repeats=N)`` keeps the fastest of N runs."""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import psutil

from iobench.errors import UserError
from iobench.host.bounded import stalled
from iobench.host.stall import StorageStalled, Watch, alive
from iobench.phases.fio_job import FioJob
from iobench.phases.fio_json import FioError, FioResult, json_start, parse_fio_output, result_from_json
from iobench.safefs import write_file

INSTALL_HINT = "install it with `apt-get install -y fio` (Debian package fio)"
DROP_CACHES = "/proc/sys/vm/drop_caches"
VMSTAT = "/proc/vmstat"
SHORT_RUN_S = 0.1
"""Timed reads shorter than this get a caveat: 1 ms runtime resolution, jobs that start one by one."""
KEEP_IOLOGS_MAX = 1 << 20
"""``run_fio(save_to=...)`` copies a job's iologs there only when they total at most this many bytes (~3,000
files read once): they list every file's path (once, then once more per read), so they grow with the sample and
the loops."""

class FioMissing(UserError):
    """fio is not on PATH."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or f"fio is not installed (not found on PATH): {INSTALL_HINT}")


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
    return out.strip().removeprefix("fio-") or None


def _last_line(*texts: str) -> str:
    """The last line that is not blank of the first text that has one."""
    return next((ln.strip() for text in texts for ln in reversed(text.splitlines()) if ln.strip()), "")


def _with_errno_text(line: str) -> str:
    """fio's job error with its errno spelled out: fio cuts the line at 128 characters, so behind a long path
    "err=2/..., error=No such file or directory" arrives as "error=No"."""
    m = re.search(r"\berr=\s*(\d+)/", line)
    if m is None or int(m[1]) == 0:
        return line
    text = os.strerror(int(m[1]))
    return line if text in line else f"{line} [errno {m[1]}: {text}]"


def _save(result: FioResult, job: FioJob, workdir: Path, save_to: Path) -> None:
    """Keep fio's JSON (``<name>.json``), the job file (``<name>.fio``) and, when small (``KEEP_IOLOGS_MAX``), the
    iologs (``<name>.<j>.iolog``) in *save_to*, each written atomically."""
    save_to.mkdir(parents=True, exist_ok=True)
    out = [save_to / f"{job.name}.json", save_to / job.job_name]
    write_file(out[0], result.raw_json + "\n")
    write_file(out[1], job.job)
    logs = [workdir / n for n in job.iolog_names]
    keep = sum(p.stat().st_size for p in logs) <= KEEP_IOLOGS_MAX
    for p in logs if keep else ():
        write_file(save_to / p.name, p.read_bytes())  # at most KEEP_IOLOGS_MAX in all
        out.append(save_to / p.name)
    # An earlier run's iologs of the same name (another numjobs, or logs now too large) would not match.
    stale = re.compile(rf"^{re.escape(job.name)}\.\d+\.iolog$")
    for p in save_to.iterdir():
        if stale.match(p.name) and p not in out:
            p.unlink(missing_ok=True)


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


# run_fio's `status`: percent done, (files/s, MB/s) or None while fio sets up, (run k, of n), seconds left
FioStatus = Callable[[float, tuple[float, float] | None, tuple[int, int], float | None], None]

FIO_TICK_S = 1.0  # how often a running fio's progress is looked at
FIO_KILL_WAIT_S = 3.0  # after SIGKILL, how long fio's processes may take to go; those left are stuck in IO


def run_watched(cmd: list[str], cwd: Path, io_timeout_s: float | None = None,
                on_tick: Callable[[int], None] | None = None, tool: str = "fio",
                env: dict[str, str] | None = None, done: Callable[[], int] | None = None) -> tuple[int, str, str]:
    """Run fio (or another raw `tool`: the objects' baseline) in a session of its own, so that stopping it stops its
    jobs too. `io_timeout_s`: its processes doing nothing for that long (no byte read, no read() call, no job waking
    up) raises StorageStalled; stopping it never waits more than a few seconds (a job stuck in IO is named, left
    behind). `on_tick`: each tick, the bytes read so far (fio prints no percent done for a replayed iolog). `done`:
    the bytes the tool says it has read, for a tool whose /proc counters move while it waits (the CRT's event loops)."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True, env=env)
    watch = None if io_timeout_s is None else Watch(
        io_timeout_s, lambda waited: stalled(f"{tool} ran its baseline", waited, _stop(proc), f"{tool} process"))
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=FIO_TICK_S)
                return proc.returncode, out, err
            except subprocess.TimeoutExpired:
                pass
            if on_tick is not None:
                on_tick(_bytes_read(proc.pid) if done is None else done())
            if watch is not None:
                watch.check(_progress(proc.pid) if done is None else done())
    except StorageStalled:
        raise
    except BaseException:  # Ctrl-C: fio, in a session of its own, would read on
        _stop(proc)
        raise


def _descendants(pid: int) -> list[int]:
    """`pid` and its descendants (fio's job processes each call setsid: they leave its group)."""
    try:
        return [pid, *(p.pid for p in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:  # gone
        return [pid]


def _bytes_read(fio_pid: int) -> int:
    """Bytes fio's processes have read so far (rchar of /proc/PID/io: the files, and their job file and
    iologs)."""
    total = 0
    for pid in _descendants(fio_pid):
        with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{pid}/io", encoding="ascii") as f:
            total += next(int(line.split()[1]) for line in f if line.startswith("rchar"))
    return total


def _progress(fio_pid: int) -> tuple:
    """What fio's job processes have done so far: per process, bytes and read calls (/proc/PID/io), context
    switches and CPU time (a job parsing its iolog or stat()ing its files before the timed reads is busy, not
    stalled). The main process counts only before its jobs start and after they end: it wakes up every 100 ms and
    reads a little whatever they do (a stalled job under it would look busy). Unchanged: nothing moved. The jobs
    each call setsid: they are found as the main process's descendants, not in its process group."""
    pids = _descendants(fio_pid)
    jobs = [pid for pid in pids if pid != fio_pid]
    out = []
    for pid in sorted(jobs) or [fio_pid]:
        item: list[float] = [pid]
        with contextlib.suppress(psutil.Error):  # gone, or not ours to read: what was read so far
            proc = psutil.Process(pid)
            io = proc.io_counters()
            item += [io.read_chars, io.read_count]  # rchar, syscr
            if pid != fio_pid:
                item += [*proc.num_ctx_switches(), *proc.cpu_times()[:2]]  # user, system
        out.append(tuple(item))
    return tuple(out)


def _alive(pids: Sequence[int]) -> tuple[int, ...]:
    """Those of `pids` still running (a zombie has gone: only its exit status is left)."""
    return tuple(pid for pid in pids if alive(pid))


def _stop(proc: subprocess.Popen) -> tuple[int, ...]:
    """SIGTERM then SIGKILL fio and its job processes (each in a session of its own: signalled one by one, listed
    before the main process goes), a few seconds each at most; returns the pids still there (stuck in
    uninterruptible IO), not waited for."""
    pids = _descendants(proc.pid)
    for sig, wait_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, FIO_KILL_WAIT_S)):
        for pid in _alive(pids):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=wait_s)
        deadline = time.monotonic() + wait_s
        while _alive(pids) and time.monotonic() < deadline:  # the jobs, no longer fio's children once it went
            time.sleep(0.05)
        if not _alive(pids):
            break
    return _alive(pids)


def status_of(status: FioStatus, k: int, repeats: int, nbytes: int, files: int, t0: float,
               setup_bytes: int) -> Callable[[int], None]:
    """fio's bytes read so far in run k of `repeats` (each `nbytes`, `files` reads) as `status` (FioStatus) takes
    them. `setup_bytes`: its job file and iologs, read before the files (twice: by a job, and by the main process)."""
    per_file = nbytes / max(files, 1)
    last = [t0, 0]

    def tick(done: int) -> None:
        # The rate over the last tick: fio first reads its iologs and stat()s its files (a slow start that an
        # average from t0 would carry into the ETA).
        done, now = min(max(done - 2 * setup_bytes, 0), nbytes), time.perf_counter()
        rate = (done - last[1]) / max(now - last[0], 1e-9)
        last[0], last[1] = now, done
        left = ((nbytes - done) + (repeats - k - 1) * nbytes) / rate if rate > 0 and done >= 0.02 * nbytes else None
        figures = (rate / per_file, rate / 1e6) if left is not None else None
        status(100.0 * (k * nbytes + done) / (repeats * nbytes), figures, (k + 1, repeats), left)

    return tick


def run_fio(
    job: FioJob,
    *,
    repeats: int = 1,
    prepare: Callable[[], object] | None = None,
    save_to: str | os.PathLike[str] | None = None,
    io_timeout_s: float | None = None,
    status: FioStatus | None = None,
) -> FioResult:
    """Read the files of *job* (``build_job``) with fio and return its measurement; ``fio --readonly``: it cannot
    write. Raises FioMissing when fio is not on PATH, FioError when it fails (with fio's last error line) or reads
    other than files x loops files / bytes; StorageStalled when it does nothing for ``io_timeout_s``.

    The job file and iologs go to a temporary folder; ``save_to``: a folder that keeps fio's JSON (``raw_json``),
    the job file and, when small, the iologs (``_save``). ``repeats``: the same job that many times, the
    fastest kept, ``prepare`` called before each (the caller's eviction: a cold run repeated without the job's
    ``drop_caches`` needs it, as fio leaves the files cached). ``status``: called about every second (``status_of``)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, not {repeats}")
    if job.drop_caches and not os.access(DROP_CACHES, os.W_OK):
        raise PermissionError(errno.EACCES, f"drop_caches=True needs root: cannot write {DROP_CACHES}")
    exe = _fio_binary()
    if exe is None:
        raise FioMissing()
    own_drops = job.concurrency if job.drop_caches else 0  # each job's exec_prerun
    results: list[FioResult] = []
    with tempfile.TemporaryDirectory(prefix="iobench-fio-") as tmp:
        folder = Path(tmp)
        job_path = job.write(folder)
        cmd = [exe, "--readonly", "--output-format=json", "--eta=never", job_path.name]
        total_bytes = job.bytes if status is not None else 0
        setup_bytes = sum(p.stat().st_size for p in folder.glob(f"{glob.escape(job.name)}.*"))
        for k in range(repeats):
            if prepare is not None:
                prepare()
            drops0 = _drop_counts()
            t0 = time.perf_counter()
            tick = None if status is None else status_of(status, k, repeats, total_bytes, job.ios, t0, setup_bytes)
            rc, out, err = run_watched(cmd, folder, io_timeout_s, tick)
            wall = time.perf_counter() - t0
            foreign = _foreign_drops(drops0, _drop_counts(), own_drops)
            try:
                doc, raw = parse_fio_output(out)
            except ValueError:
                doc, raw = None, ""
            if rc != 0 or doc is None:
                # fio prints job errors ("fio: pid=..., err=5/...") on stdout before its JSON, others on stderr.
                prefix = out[:json_start(out)] if doc is not None else out
                msg = _with_errno_text(_last_line(err, prefix)) or f"exit status {rc}"
                raise FioError(f"fio failed: {msg}")
            res = result_from_json(doc, job, wall)
            results.append(replace(res, caveats=_caveats(res.seconds, foreign), raw_json=raw))
        best = max(results, key=lambda r: r.files_per_s)
        result = replace(best, repeats=repeats, runs_files_per_s=tuple(round(r.files_per_s, 2) for r in results))
        if save_to is not None:
            _save(result, job, folder, Path(save_to))
    return result
