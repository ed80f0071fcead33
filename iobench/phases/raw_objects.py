"""The raw baseline for objects, fio's role where the dataset is in a bucket (docs/s3.md): the AWS CRT's native
S3 client (iobench/s3/raw.py, a process of its own) GETs every key once per point, watched as fio is (`run_watched`)."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iobench.dataset import Manifest
from iobench.host.stall import DEFAULT_IO_TIMEOUT_S
from iobench.phases.fio import FioError, FioStatus, run_watched, status_of
from iobench.phases.fio_json import Measured
from iobench.store import Store


@dataclass(frozen=True, kw_only=True)
class RawResult(Measured):
    """What the raw client measured at one depth: every key read once (`ios` GETs, `seconds` from the first request
    sent to the last body received, by the client's own clock; `latency_ms` each GET's, request sent to last byte)."""

    command: str
    """The client's command line (no credential is on it: they come from the standard chain)."""
    throttled: int = 0
    """Answers the server throttled (503 SlowDown, 429), each sent again after its pause (the CRT's retries off)."""


def _received(progress: Path) -> int:
    """The bytes the raw client says it has received (0 before it first says)."""
    try:
        return int(progress.read_text() or 0)
    except (OSError, ValueError):
        return 0


def run_raw(where: Store, manifest: Manifest, keys: Sequence[str], sizes: Sequence[int], in_flight: int, *,
            io_timeout_s: float | None = None, status: FioStatus | None = None, name: str = "awscrt") -> RawResult:
    """GET each of `keys` (whole object keys) once with `in_flight` requests at a time through the raw client.

    Raises FioError when it fails (with its one line) or reads other than the keys' `sizes`, StorageStalled when it
    reads nothing for `io_timeout_s`."""
    tool = where.raw
    if where.raw_version() is None:
        raise FioError(f"{tool} is not installed: pip install {tool}")
    with tempfile.TemporaryDirectory(prefix="iobench-raw-") as tmp:
        listing = Path(tmp) / f"{name}.keys"
        listing.write_text("".join(k + "\n" for k in keys), encoding="utf-8")
        cmd, env = where.raw_command(manifest.root, listing.name, in_flight,
                                     DEFAULT_IO_TIMEOUT_S if io_timeout_s is None else io_timeout_s)
        nbytes = int(sum(sizes))
        t0 = time.perf_counter()
        tick = None if status is None else status_of(status, 0, 1, nbytes, len(keys), t0, 0)
        rc, out, err = run_watched(cmd, Path(tmp), io_timeout_s, tick, tool=tool, env=env,
                                   done=lambda: _received(Path(tmp) / "progress"))
        wall = time.perf_counter() - t0
    if rc != 0:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        raise FioError(f"{tool} failed: {lines[-1] if lines else f'exit status {rc}'}")
    doc: dict[str, Any] = json.loads(out)
    if (doc["requests"], doc["bytes"]) != (len(keys), nbytes):
        raise FioError(f"{tool} read {doc['requests']} objects / {doc['bytes']} B, expected {len(keys)} / {nbytes}")
    shown = " ".join(cmd[1:]).replace(sys.executable, "python")
    return RawResult(ios=doc["requests"], bytes=doc["bytes"], seconds=doc["seconds"], cpu_s=doc["cpu_s"],
                     latency_ms=doc["latency_ms"], command=f"python {shown}", setup_s=max(0.0, wall - doc["seconds"]),
                     throttled=int(doc.get("throttled", 0)), raw_json=out.strip())
