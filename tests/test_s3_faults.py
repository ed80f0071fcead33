"""Faults of a real S3 server (the SeaweedFS bed) while iobench reads or writes it: a server frozen with SIGSTOP, an
object deleted mid-run, a real SIGINT, a throttling server (SeaweedFS's circuit breaker), and --in-flight values a
run cannot keep. Each ends in one line with its exit code, the partial result kept (complete: false) and the
reports written; nothing is mocked. Small datasets and --io-timeout 2-3 s keep each test to seconds."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from conftest import first_epoch_kept, iobench

from iobench.result import Result

pytestmark = pytest.mark.testbed

FILES = 600
SHAPE = ["--files", str(FILES), "--size-dist", "uniform:4KiB-24KiB", "--classes", "4"]
IO_TIMEOUT = 3
ERROR = re.compile(r"^iobench: error: .*$", re.M)


@pytest.fixture(scope="module")
def prefix(s3_bed) -> str:
    p = f"f-{uuid.uuid4().hex[:8]}"
    made = iobench("gen", "--url", f"s3://{s3_bed.bucket}/{p}", *SHAPE, env=s3_bed.env(), timeout=300)
    assert made.returncode == 0, made.stderr
    return p


def _weed(bed) -> int:
    state = json.loads((bed.state / "state.json").read_text())
    (pid,) = [p["pid"] for p in state["procs"] if p["what"] == "weed server"]
    return pid


@contextmanager
def _frozen(bed) -> Iterator[None]:
    """The bed's server stopped (SIGSTOP) for the block; it answers again after it, whatever happened (and after
    60 s at most)."""
    pid = _weed(bed)
    thaw = threading.Timer(60, lambda: os.kill(pid, signal.SIGCONT))
    os.kill(pid, signal.SIGSTOP)
    thaw.start()
    try:
        yield
    finally:
        thaw.cancel()
        os.kill(pid, signal.SIGCONT)


def _start(bed, tmp: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "iobench.cli", *args], env=bed.env(), cwd=tmp,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ended(proc: subprocess.Popen, timeout: float = 60) -> tuple[str, float]:
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return err, time.monotonic() - t0


def _one_error(err: str) -> str:
    lines = ERROR.findall(err)
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _kept(out: Path) -> Result:
    """The partial result, kept, and its reports beside it."""
    r = Result.load(out / "result.json")
    assert not r.complete and r.runs and not r.runs[-1].complete, [(x.samples, x.complete) for x in r.runs]
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    return r


def _keys(bed, prefix: str) -> list[str]:
    found: list[str] = []
    for page in bed.boto3().get_paginator("list_objects_v2").paginate(Bucket=bed.bucket, Prefix=prefix):
        found += [o["Key"] for o in page.get("Contents", [])]
    return found


# ------------------------------------------------------------------------------ a stall judged on finished samples


def test_a_frozen_server_ends_a_dataloader_run_in_its_first_epoch(s3_bed, prefix: str, tmp_path: Path) -> None:
    """The CRT's DataLoader workers reading when the server freezes, in the first epoch: the CRT's event loop keeps
    moving the process's /proc read counters, so the stall is judged on finished samples: exit 3 within
    --io-timeout (was: the CRT's own error after 36-42 s, nothing kept), the partial epoch kept, reports written."""
    out = tmp_path / "r"
    proc = _start(s3_bed, tmp_path, "run", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE, "--engine",
                  "dataloader", "--workers", "2", "--batch-size", "8", "--cache", "cold", "--epochs", "20",
                  "--io-timeout", str(IO_TIMEOUT), "--no-fio", "--no-metadata", "--quiet", "--out", str(out))
    deadline = time.monotonic() + 60
    while not [c for c in psutil.Process(proc.pid).children() if c.name() == "iobench-worker"]:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
        time.sleep(0.02)
    time.sleep(0.2)  # its first GETs under way
    with _frozen(s3_bed):
        err, took = _ended(proc)
    line = _one_error(err)
    assert proc.returncode == 3, err
    assert re.fullmatch(rf"iobench: error: the storage stopped answering: \d+ reads? pending for {IO_TIMEOUT} s; "
                        rf"kept what was measured in {re.escape(str(out))}/result.json", line), line
    assert took < IO_TIMEOUT + 10, took
    r = _kept(out)
    assert r.runs[0].epoch == 1 and r.runs[-1].samples < FILES


# ------------------------------------------------------------------------------------- an object deleted mid-run


@pytest.mark.parametrize("source", ["files", "tar"])
def test_an_object_deleted_mid_run_is_named_and_the_result_kept(s3_bed, tmp_path: Path, source: str) -> None:
    """A sample's object (or, read from tar shards by the CRT's ranged GETs, its shard) deleted once the first epoch
    is kept: the next GET of it is a 404; the line names its key, says the object was deleted and where the result
    was kept; exit 3, reports written."""
    p = f"del-{uuid.uuid4().hex[:8]}"
    shape = ["--files", "300", "--size-dist", "fixed:4KiB", "--classes", "2"]
    assert iobench("gen", "--url", f"s3://{s3_bed.bucket}/{p}", *shape, env=s3_bed.env()).returncode == 0
    out = tmp_path / "r"
    proc = _start(s3_bed, tmp_path, "run", "--url", f"s3://{s3_bed.bucket}/{p}", *shape, "--engine", "threads",
                  "--threads", "2", "--in-flight", "2", "--cache", "cold", "--epochs", "200", "--no-fio",
                  "--no-metadata", "--quiet", "--source", source, "--out", str(out))
    first_epoch_kept(out, proc)
    victim = sorted(k for k in _keys(s3_bed, f"{p}/") if k.endswith(".JPEG" if source == "files" else ".tar"))[
        150 if source == "files" else 0]
    s3_bed.boto3().delete_object(Bucket=s3_bed.bucket, Key=victim)
    err, _ = _ended(proc)
    line = _one_error(err)
    assert proc.returncode == 3, err
    assert f"reading s3://{s3_bed.bucket}/{victim} at " in line, line
    assert "no such key (404): the object was deleted" in line, line
    assert line.endswith(f"; kept what was measured in {out}/result.json"), line
    _kept(out)


# ------------------------------------------------------------------------------------ gen on a frozen server


def _gen_writing(bed, tmp: Path, *args: str) -> tuple[subprocess.Popen, str, float]:
    """`gen --url` of 3,000 objects on a prefix of its own, returned once it has written some, with the seconds that
    took: this host's pace right now (start-up, the client, 50 PUTs), for a test to judge a stop against."""
    p = f"gen-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    proc = _start(bed, tmp, "gen", "--url", f"s3://{bed.bucket}/{p}", "--files", "3000", "--size-dist",
                  "fixed:4KiB", "--classes", "2", "--threads", "4", *args)
    deadline = time.monotonic() + 60
    while len(_keys(bed, f"{p}/")) < 50:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
        time.sleep(0.05)
    return proc, p, time.monotonic() - t0


def _listed_for_clean(bed, tmp: Path, p: str) -> None:
    """What gen wrote is iobench's (its marker says incomplete): clean lists it, and removes it."""
    shown = iobench("clean", "--url", f"s3://{bed.bucket}/{p}", "--dry-run", env=bed.env(), cwd=tmp)
    assert shown.returncode == 0 and "would remove dataset" in shown.stdout + shown.stderr, shown
    gone = iobench("clean", "--url", f"s3://{bed.bucket}/{p}", "--yes", env=bed.env(), cwd=tmp)
    assert gone.returncode == 0 and not _keys(bed, f"{p}/"), gone.stderr


def test_gen_on_a_frozen_server_ends_within_its_io_timeout(s3_bed, tmp_path: Path) -> None:
    proc, p, started = _gen_writing(s3_bed, tmp_path, "--io-timeout", "2")
    with _frozen(s3_bed):
        err, took = _ended(proc)
    line = _one_error(err)
    assert proc.returncode == 3, err
    assert re.match(r"iobench: error: gen stopped after [\d,]+ of 3,000 objects \(kept, marked incomplete", line), line
    assert "the endpoint does not answer" in line, line
    # a PUT's one attempt: up to 1 s for 100 Continue, then the 2 s read; the rest (5 s quiet) no longer than
    # starting took, measured here
    assert took < 2 + max(5.0, started), (took, started)
    _listed_for_clean(s3_bed, tmp_path, p)


def test_ctrl_c_ends_gen_on_a_frozen_server_within_2_s(s3_bed, tmp_path: Path) -> None:
    """Ctrl-C ends gen at once though its PUTs wait on a frozen server: within 2 s on a quiet host, and never longer
    than starting it took (measured here, so a busy host that slows both does not fail it), not its 60 s time-out."""
    proc, p, started = _gen_writing(s3_bed, tmp_path)  # --io-timeout 60: only Ctrl-C ends it
    with _frozen(s3_bed):
        time.sleep(0.3)  # its PUTs now wait on the server
        os.kill(proc.pid, signal.SIGINT)
        err, took = _ended(proc)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert "iobench: interrupted: what was written of" in err and "is kept, marked incomplete" in err, err
    assert took < max(2.0, started), (took, started)
    _listed_for_clean(s3_bed, tmp_path, p)


# ------------------------------------------------------------------------------------------- requests in flight


def test_tar_shards_are_read_with_several_ranged_gets_in_flight(s3_bed, prefix: str, tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = iobench("run", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE, "--source", "tar", "--engine",
                   "threads", "--threads", "2", "--in-flight", "4", "--cache", "cold", "--epochs", "1", "--no-fio",
                   "--no-metadata", "--quiet", "--out", str(out), env=s3_bed.env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (run,) = Result.load(out / "result.json").runs
    assert (run.source, run.depth, run.in_flight, run.samples, run.complete) == ("tar", 4, 8, FILES, True)
    boto = iobench("run", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE, "--source", "tar", "--s3-client",
                   "boto3", "--in-flight", "4", env=s3_bed.env(), cwd=tmp_path)
    assert boto.returncode == 2 and _one_error(boto.stderr).startswith(
        "iobench: error: --source tar reads ranged GETs several in flight through the CRT only"), boto.stderr


def test_in_flight_past_the_objects_is_capped_and_an_absurd_value_refused(s3_bed, prefix: str,
                                                                         tmp_path: Path) -> None:
    """More GETs in flight than a reader has objects is capped before the run, said, and the run records what was
    in flight; past the client's connections, refused in one line before anything runs."""
    absurd = iobench("run", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE, "--in-flight", "100000",
                     env=s3_bed.env(), cwd=tmp_path)
    assert absurd.returncode == 2 and _one_error(absurd.stderr) == (
        "iobench: error: --in-flight is at most 512 GETs per reader: the S3 client opens at most 512 connections, "
        "so more would wait inside it, not at the server, each holding a buffer of the largest object")
    out = tmp_path / "r"
    proc = iobench("run", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE, "--engine", "threads", "--threads",
                   "2", "--in-flight", "500", "--cache", "cold", "--epochs", "1", "--no-fio", "--no-metadata",
                   "--out", str(out), env=s3_bed.env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = "--in-flight 500 at 2 threads: 300 GETs in flight per reader, 600 in all: 600 objects give each reader 300"
    assert said in proc.stderr
    r = Result.load(out / "result.json")
    (run,) = r.runs
    assert (run.depth, run.in_flight, run.samples) == (300, 600, FILES) and said in r.warnings


# ------------------------------------------------------------------------- the raw baseline under throttling


def test_the_raw_baseline_counts_the_servers_throttling(s3_bed, prefix: str, tmp_path: Path) -> None:
    """SeaweedFS's breaker at 1 read at a time answers the rest 503: the raw client (the CRT's retries off) counts
    each, reads every key all the same, records them in baseline.points[].throttled, and the verdict says so."""
    from test_s3 import _breaker

    _breaker(s3_bed, "1")
    try:
        out = tmp_path / "r"
        proc = iobench("fio", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE, "--threads", "8", "--cache",
                       "cold", "--quiet", "--out", str(out), env=s3_bed.env(), cwd=tmp_path)
    finally:
        _breaker(s3_bed, None)
    assert proc.returncode == 0, proc.stderr
    r = Result.load(out / "result.json")
    assert r.baseline is not None
    (point,) = r.baseline.points
    assert point.samples == FILES and point.throttled > 0, point
    assert r.verdict is not None and (
        f"Throttled: the server throttled {point.throttled:,} of {FILES + point.throttled:,} requests of the raw "
        "baseline (awscrt) at 8 in flight") in r.verdict.text, r.verdict.text
