"""Reading fio's JSON: the document found in its output, and the measurement (FioResult) it holds for one job."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from iobench.phases.fio_job import FioJob

_PERCENTILES = {"p50": "50.000000", "p90": "90.000000", "p99": "99.000000", "p999": "99.900000"}


class FioError(RuntimeError):
    """fio ran but failed, timed out, or did not do the IO asked of it."""


@dataclass(frozen=True)
class FioResult:
    """fio's measurement of one job (group_reporting: all ``concurrency`` jobs together). ``latency_ms`` is the
    completion latency (clat) of each read, the ``pread()`` of a whole file, without its ``open()``/``close()``;
    ``seconds`` (fio's runtime) includes them: ``files_per_s`` is the full per-file rate."""

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
    """Why this figure may be below fio's best (a cache drop by another process during the run, timed reads too
    short): a baseline to label, and not to rest a verdict on."""
    raw_json: str = field(default="", repr=False)
    """fio's own ``--output-format=json`` document, as fio printed it (any lines around it left out), of the
    run kept: what fio-plot and other fio tooling read."""
    saved: tuple[str, ...] = ()
    """Files written to ``run_fio(save_to=...)``: ``<name>.json`` (``raw_json``), ``<name>.fio`` and, when small
    (``KEEP_IOLOGS_MAX``), the iologs ``<name>.<j>.iolog``."""

    @property
    def cpu_s(self) -> float | None:
        """User + system CPU seconds of the jobs (group_reporting sums each job's rusage and runtime: the %s are
        of the summed runtime), from ``extra``; None where fio did not give them."""
        usr, sys_, runtime_ms = (self.extra.get(k) for k in ("usr_cpu", "sys_cpu", "job_runtime_ms"))
        if usr is None or sys_ is None or not runtime_ms:
            return None
        return (float(usr) + float(sys_)) / 100.0 * float(runtime_ms) / 1000.0

    @property
    def at_best(self) -> bool:
        """True when nothing iobench can see kept fio from its best (no ``caveats``)."""
        return not self.caveats


def json_start(text: str) -> int:
    """Offset of fio's JSON document: the first line that starts with '{' (fio may print lines first)."""
    m = re.search(r"^\{", text, flags=re.MULTILINE)
    if m is None:
        raise ValueError("no JSON object in fio's output")
    return m.start()


def parse_fio_output(text: str) -> tuple[dict[str, Any], str]:
    """fio's JSON document parsed, and its text as fio printed it (from its first '{' to its last '}')."""
    start = json_start(text)
    obj, end = json.JSONDecoder().raw_decode(text, start)
    if not isinstance(obj, dict):
        raise ValueError("fio's JSON is not an object")
    return obj, text[start:end]


def result_from_json(doc: dict[str, Any], job: FioJob, version: str, wall_s: float) -> FioResult:
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
