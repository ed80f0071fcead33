"""Reading fio's JSON: the document found in its output, and the measurement (FioResult) it holds for one job; what
every raw baseline measures (Measured)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from iobench.phases.fio_job import FioJob

_PERCENTILES = {"p50": "50.000000", "p90": "90.000000", "p99": "99.000000", "p999": "99.900000"}


class FioError(RuntimeError):
    """fio (or the raw client) ran but failed, or did not do the IO asked of it."""


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What a raw baseline measured at one point (fio's job, or the raw client's GETs on objects: raw_objects.py)."""

    ios: int  # reads done: files x loops (fio), GETs (objects)
    bytes: int
    seconds: float
    """The tool's own timed reads (fio's runtime: 1 ms resolution, make runs last >= 1 s with ``loops``)."""
    latency_ms: dict[str, float]
    """p50, p90, p99, p999, max and mean of each read, in ms."""
    setup_s: float = 0.0
    """Wall time of the tool's process not spent in the timed reads (parsing logs, stat of every file)."""
    cpu_s: float | None = None
    """User + system CPU seconds of the tool's reads: fio's jobs (group_reporting sums each job's rusage and
    runtime: its %s are of the summed runtime), the raw client's process over its timed reads; None where fio did not
    give them."""
    raw_json: str = field(default="", repr=False)
    """The tool's own JSON document, as it printed it (fio's ``--output-format=json``, of the run kept: what fio-plot
    and other fio tooling read)."""

    @property
    def files_per_s(self) -> float:
        return self.ios / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        """10**6 bytes per second, from the bytes read."""
        return self.bytes / self.seconds / 1e6 if self.seconds else 0.0


@dataclass(frozen=True, kw_only=True)
class FioResult(Measured):
    """fio's measurement of one job (group_reporting: all its jobs together). ``latency_ms`` is the completion
    latency (clat) of each read, the ``pread()`` of a whole file, without its ``open()``/``close()``; ``seconds``
    (fio's runtime) includes them: ``files_per_s`` is the full per-file rate."""

    job: str  # the job file fio ran
    repeats: int = 1
    """How many times fio ran the job (``run_fio(repeats=...)``); this result is the fastest run's."""
    runs_files_per_s: tuple[float, ...] = ()
    """files/s of every run, in order (the spread shows how steady the storage was)."""
    caveats: tuple[str, ...] = ()
    """Why this figure may be below fio's best (a cache drop by another process while the kept run's fio ran, from
    /proc/vmstat less fio's own ``drop_caches``; timed reads too short): a baseline to label, and not to rest a
    verdict on."""

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


def result_from_json(doc: dict[str, Any], job: FioJob, wall_s: float) -> FioResult:
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
    usr, sys_, runtime_ms = j.get("usr_cpu"), j.get("sys_cpu"), j.get("job_runtime")
    cpu_s = None if usr is None or sys_ is None or not runtime_ms else (
        (float(usr) + float(sys_)) / 100.0 * float(runtime_ms) / 1000.0)
    return FioResult(ios=ios, bytes=nbytes, seconds=seconds, latency_ms=lat, job=job.job,
                     setup_s=max(0.0, wall_s - seconds), cpu_s=cpu_s)
