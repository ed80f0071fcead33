"""Object storage on a real S3 server (the SeaweedFS bed: scripts/testbed up s3): gen uploads the dataset, run
reads every object once per epoch through both engines and both clients, clean removes only what iobench wrote,
and each bad input or fault is one line with its exit code. No mock: the objects are on the server."""

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
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from conftest import first_epoch_kept, iobench

from iobench import store
from iobench.result import Result
from iobench.s3.url import parse_url
from iobench.sources.s3 import ObjectSource

pytestmark = pytest.mark.testbed

FILES = 2000  # enough for 16 threads, 2 workers or 2 ranks of 32-sample batches to count (answer/rules), and for an
# epoch at the plain bed's ~1,650 objects/s (16 threads, 2-core host) to last over the 0.5 s a run needs (800: 0.49 s)
SHAPE = ["--files", str(FILES), "--size-dist", "uniform:4KiB-24KiB", "--classes", "4"]


def _client(bed, key: str | None = None, secret: str | None = None):
    return boto3.client("s3", endpoint_url=bed.endpoint, aws_access_key_id=key or bed.access_key,
                        aws_secret_access_key=secret or bed.secret_key, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}))


def _keys(bed, prefix: str) -> dict[str, int]:
    found = {}
    for page in _client(bed).get_paginator("list_objects_v2").paginate(Bucket=bed.bucket, Prefix=prefix):
        found.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return found


@pytest.fixture(scope="session")  # not module: this module's tests then spread over the parallel workers
def prefix(s3_bed) -> str:
    """A prefix of this module's own in the bed's bucket, with the dataset uploaded by `gen --url` (once per
    session: per worker, each with its own bed, in scripts/test's parallel pass)."""
    p = f"t-{uuid.uuid4().hex[:8]}"
    proc = iobench("gen", "--url", f"s3://{s3_bed.bucket}/{p}", *SHAPE, env=s3_bed.env(), timeout=600)
    assert proc.returncode == 0, proc.stderr
    return p


def _dataset(bed, prefix: str) -> tuple[str, dict[str, int]]:
    """The dataset's prefix and its sample objects (key: size), as listed on the server."""
    keys = _keys(bed, f"{prefix}/")
    (marker,) = [k for k in keys if k.endswith("/iobench-dataset.json")]
    top = marker.rsplit("/", 1)[0]
    return top, {k: s for k, s in keys.items() if k.endswith(".JPEG")}


def test_gen_uploads_the_dataset_as_objects_and_reuses_it(s3_bed, prefix: str) -> None:
    top, samples = _dataset(s3_bed, prefix)
    assert len(samples) == FILES
    manifest = _client(s3_bed).get_object(Bucket=s3_bed.bucket, Key=f"{top}/manifest.tsv")["Body"].read().decode()
    listed = dict(line.split("\t") for line in manifest.splitlines() if line and not line.startswith("#"))
    assert {f"{top}/{k}": int(v) for k, v in listed.items()} == samples  # keys and sizes as the manifest says
    marker = json.loads(_client(s3_bed).get_object(Bucket=s3_bed.bucket, Key=f"{top}/iobench-dataset.json")
                        ["Body"].read())
    assert marker["status"] == "complete" and marker["files"] == FILES
    first = next(iter(sorted(samples)))
    assert _client(s3_bed).get_object(Bucket=s3_bed.bucket, Key=first)["Body"].read()[:3] == b"\xff\xd8\xff"  # JPEG
    again = iobench("gen", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE, env=s3_bed.env())
    assert again.returncode == 0 and "reusing the existing dataset" in again.stderr, again.stderr


def _run(bed, prefix: str, tmp: Path, *args: str) -> Result:
    out = tmp / "r"
    # the raw baseline has its own tests (below, "the raw baseline"): left out here, for the suite's time
    proc = iobench("run", "--url", f"s3://{bed.bucket}/{prefix}", *SHAPE, "--cache", "cold", "--epochs", "1",
                   "--out", str(out), "--quiet", "--no-fio", *(args or ("--no-metadata",)), env=bed.env(), cwd=tmp,
                   timeout=600)
    assert proc.returncode == 0, proc.stderr
    return Result.load(out / "result.json")


def _same_bytes(bed, top: str, client: str, monkeypatch: pytest.MonkeyPatch, n: int = 40) -> None:
    """The first n samples read through `client`'s reader (in this process) hold the bytes boto3 GETs."""
    for k, v in bed.env().items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    m = store.home_of(parse_url(f"s3://{bed.bucket}/{top}", endpoint=bed.endpoint, client=client)).manifest()
    reader = ObjectSource(m).reader()
    for i in range(n):
        got = reader.read(i)
        assert 0 < reader.open_ns <= reader.total_ns
        want = _client(bed).get_object(Bucket=bed.bucket, Key=m.paths[i])["Body"].read()
        assert bytes(reader.buffer[:got]) == want, m.paths[i]


# One run serves the CRT's thread-engine test and the metadata phase's: the phase (LIST, then a HEAD and a first-byte
# GET of each object of the sample, one at a time) comes before the epochs and does not depend on their readers, and
# a run more of 2,000 objects costs ~4 CPU-s. Its two tests go to one parallel worker (the run made once).
CRT_RUN = pytest.mark.xdist_group("test_s3-crt-run")


@pytest.fixture(scope="session")
def crt_run(s3_bed, prefix: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    """`run --url` through the CRT, 4 and 16 threads at 1 GET in flight each, with its metadata phase; and where."""
    tmp = tmp_path_factory.mktemp("crt-run")
    return _run(s3_bed, prefix, tmp, "--engine", "threads", "--threads", "4,16", "--in-flight", "1", "--s3-client",
                "crt"), tmp / "r"


# s3torchconnector without --in-flight: its default is 1 (its get_object blocks)
@pytest.mark.parametrize(("client", "threads", "depths"), [
    pytest.param("crt", (4, 16), (1,), marks=CRT_RUN), ("boto3", (4,), (1, 4)), ("s3torchconnector", (4,), (1,))])
def test_the_thread_engine_reads_every_object_once_per_epoch(s3_bed, prefix: str, tmp_path: Path, client: str,
                                                             threads: tuple[int, ...], depths: tuple[int, ...],
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             request: pytest.FixtureRequest) -> None:
    top, samples = _dataset(s3_bed, prefix)
    depth = [] if client == "s3torchconnector" else ["--in-flight", ",".join(map(str, depths))]
    if client == "crt":  # the run the metadata phase's test reads too (its phase on: the epochs are the same)
        r, folder = request.getfixturevalue("crt_run")
    else:
        r, folder = _run(s3_bed, prefix, tmp_path, "--engine", "threads", "--threads", ",".join(map(str, threads)),
                         *depth, "--s3-client", client, "--no-metadata"), tmp_path / "r"
    assert [(run.concurrency, run.depth) for run in r.runs] == [(t, d) for t in threads for d in depths]
    for run in r.runs:
        assert run.in_flight == run.concurrency * run.depth and run.throttled == 0
        assert run.source == "objects" and run.complete
        assert (run.samples, run.bytes) == (FILES, sum(samples.values()))
        assert run.measures == "storage" and run.resident_before == 0.0
        assert run.open_ms.p50 is not None and 0 < run.open_ms.p50 <= run.latency_ms.p50  # first byte, then all
    assert r.mount.family == "object" and r.mount.fstype == "s3" and r.mount.details["client"] == client
    assert r.mount.details["endpoint"] == s3_bed.endpoint
    assert r.mount.details[f"version_{'awscrt' if client == 'crt' else client}"]  # the reading library's version
    assert r.mount.details["read_retries"] == (1 if client == "s3torchconnector" else 0)
    _same_bytes(s3_bed, top, client, monkeypatch)
    assert r.baseline is None  # --no-fio
    text = (folder / "result.json").read_text() + (folder / "report.html").read_text()
    assert s3_bed.secret_key not in text and s3_bed.access_key not in text
    # plan from it: the requests a job keeps in flight for 8 GPUs, by Little's law at the latency measured
    counted = [x for x in r.runs if x.valid]  # the runs plan reads (a run under 0.5 s does not count)
    assert counted, [x.invalid_reason for x in r.runs]
    planned = iobench("plan", "--gpu", "h200", "--gpus", "8", "--model", "resnet50", "--result",
                      str(folder / "result.json"), env={**s3_bed.env(), "COLUMNS": "200"})
    assert planned.returncode == 0, planned.stderr
    m = re.search(r"in flight for the minimum: ([\d,]+) samples/s x ([\d.]+) ms = ([\d,]+) GETs at once",
                  planned.stdout)
    assert m, planned.stdout
    need, w_ms, got = (float(g.replace(",", "")) for g in m.groups())
    best = max(counted, key=lambda x: x.samples_per_s)
    assert w_ms == pytest.approx(best.latency_ms.p50, abs=0.001)
    assert got == pytest.approx(need * w_ms / 1000, abs=1)
    assert "GETs/s (one per sample)" in planned.stdout and "keys to list" in planned.stdout


@pytest.mark.parametrize(("client", "depths"), [("crt", "1,4"), ("s3torchconnector", "1")])
def test_dataloader_workers_read_every_object_with_a_client_each(s3_bed, prefix: str, tmp_path: Path, client: str,
                                                                 depths: str) -> None:
    _, samples = _dataset(s3_bed, prefix)
    r = _run(s3_bed, prefix, tmp_path, "--engine", "dataloader", "--workers", "2", "--batch-size", "32",
             "--in-flight", depths, "--s3-client", client, "--no-metadata")
    runs = [x for x in r.runs if x.kind == "replay"]
    assert [(x.depth, x.in_flight) for x in runs] == [(1, 2), (4, 8)][:len(depths.split(","))]  # workers x depth
    assert r.mount.details["client"] == client
    for run in runs:
        assert run.engine == "dataloader" and run.workers == 2 and run.source == "objects"
        assert (run.samples, run.bytes) == (FILES, sum(samples.values()))


def _fails(bed, *args: str, env: dict | None = None) -> tuple[int, str]:
    proc = iobench("run", *args, "--quiet", env=env or bed.env(), timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    return proc.returncode, lines[0]


def test_bad_input_and_refusals_are_one_line_each(s3_bed, prefix: str, tmp_path: Path) -> None:
    url = f"s3://{s3_bed.bucket}/{prefix}"
    cases = [
        ((["--url", "s3:/x"]), 2, "is not an s3://BUCKET/PREFIX URL"),
        ((["--url", f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/p"]), 3, "does not exist"),
        ((["--url", url, "--endpoint-url", "http://127.0.0.1:9"]), 3, "the endpoint does not answer"),
        ((["--url", url, "--source", "lmdb"]), 2, "--source lmdb reads an LMDB, which is not made in object storage"),
        ((["--url", url, "--mount", str(tmp_path), "--ranks", "2"]), 2, "--mount with --url reads a FUSE view"),
        ((["--url", url, "--s3-client", "s3torchconnector", "--in-flight", "1,4"]), 2,
         "s3torchconnector's get_object waits for each response's headers: depth comes from more --threads/--workers"),
    ]
    for args, code, words in cases:
        rc, line = _fails(s3_bed, *args)
        assert rc == code and words in line, (args, rc, line)
    nobody = {**s3_bed.env(), "AWS_ACCESS_KEY_ID": s3_bed.nobody_access_key,
              "AWS_SECRET_ACCESS_KEY": s3_bed.nobody_secret_key}
    rc, line = _fails(s3_bed, "--url", url, *SHAPE, env=nobody)
    assert rc == 3 and "access denied" in line, line
    bare = {k: v for k, v in s3_bed.env().items() if not k.startswith("AWS_ACCESS") and not k.startswith("AWS_SECRET")}
    rc, line = _fails(s3_bed, "--url", url, *SHAPE, env={**bare, "PATH": os.environ["PATH"]})
    assert rc == 3 and "no S3 credentials" in line, line


def test_clean_removes_what_iobench_wrote_and_leaves_the_rest(s3_bed, tmp_path: Path) -> None:
    p = f"c-{uuid.uuid4().hex[:8]}"
    url = f"s3://{s3_bed.bucket}/{p}"
    made = iobench("gen", "--url", url, "--files", "40", "--size-dist", "fixed:4KiB", env=s3_bed.env())
    assert made.returncode == 0, made.stderr
    top, _ = _dataset(s3_bed, p)
    c = _client(s3_bed)
    c.put_object(Bucket=s3_bed.bucket, Key=f"{top}/notes/mine.txt", Body=b"a user's object")
    c.put_object(Bucket=s3_bed.bucket, Key=f"{p}/elsewhere.bin", Body=b"another")
    asked = iobench("clean", "--url", url, env=s3_bed.env(), stdin=subprocess.DEVNULL)
    assert asked.returncode == 2 and "nothing removed" in asked.stderr
    assert len(_keys(s3_bed, f"{p}/")) == 40 + 4  # samples, manifest, marker, the user's two
    done = iobench("clean", "--url", url, "--yes", env=s3_bed.env())
    assert done.returncode == 0, done.stderr
    assert "removed dataset" in done.stdout and "(41 objects" in done.stdout, done.stdout  # and its manifest
    assert "notes/mine.txt" in done.stdout and "objects iobench did not write" in done.stdout, done.stdout
    left = _keys(s3_bed, f"{p}/")
    assert set(left) == {f"{top}/notes/mine.txt", f"{p}/elsewhere.bin", f"{top}/iobench-dataset.json"}, left


def test_two_ranks_read_the_bucket_each_object_once_per_epoch(s3_bed, prefix: str, tmp_path: Path) -> None:
    _, samples = _dataset(s3_bed, prefix)
    out = tmp_path / "d"
    proc = iobench("run", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE, "--no-fio", "--ranks", "2",
                   "--workers", "1", "--batch-size", "32", "--epochs", "1", "--cache", "cold", "--gpu", "h200",
                   "--model", "resnet50",
                   "--out", str(out), "--quiet", env=s3_bed.env(), cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    r = Result.load(out / "result.json")
    assert r.distributed is not None and r.distributed.world_size == 2
    assert not r.distributed.shared_page_cache  # objects are in no host's page cache
    (run,) = [x for x in r.runs if x.cache == "cold"]
    assert run.read_once and (run.samples, run.bytes) == (FILES, sum(samples.values()))
    assert r.mount.family == "object"


def _started_until_a_run(cmd: list[str], bed, cwd: Path, out: Path) -> subprocess.Popen:
    """`cmd` started on `bed`, returned once its result in `out` holds a run (at most 120 s)."""
    proc = subprocess.Popen(cmd, env=bed.env(), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first_epoch_kept(out, proc, timeout_s=120)
    return proc


def test_a_server_that_stops_answering_ends_the_run_within_its_io_timeout(s3_bed, prefix: str,
                                                                         tmp_path: Path) -> None:
    """The S3 server frozen (SIGSTOP) mid-run, 2 threads x 4 GETs in flight: exit 3 in one line within
    --io-timeout, the epochs measured before kept (complete: false), no hang."""
    state = json.loads((s3_bed.state / "state.json").read_text())
    (pid,) = [p["pid"] for p in state["procs"] if p["what"] == "weed server"]
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "iobench.cli", "run", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE, "--no-fio",
           "--engine", "threads", "--threads", "2", "--in-flight", "4", "--cache", "cold", "--epochs", "20",
           "--io-timeout", "4",
           "--no-metadata",
           "--out", str(out)]
    proc = _started_until_a_run(cmd, s3_bed, tmp_path, out)
    try:
        os.kill(pid, signal.SIGSTOP)
        frozen = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - frozen
    finally:
        os.kill(pid, signal.SIGCONT)  # whatever happens, the server thaws
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    assert "the storage stopped answering" in err and "Traceback" not in err, err
    assert took < 4 + 10, took  # the time-out, and the partial result written
    r = Result.load(out / "result.json")
    assert not r.complete and r.runs and r.runs[0].samples == FILES


@pytest.mark.quiet  # judges rates against the bed's known round trip and bandwidth
def test_with_a_known_round_trip_more_requests_in_flight_give_more(s3_bed_delayed, tmp_path: Path) -> None:
    """The bed whose delay proxy adds 2 ms each way (a known round trip above the server's own time): one GET in
    flight is bound by it (its first byte after >= 4 ms); one reader thread keeping 4 in flight reads each object
    once and more than 2x as fast, the run's in_flight says 4, and the answer says the storage's own limit was
    not reached (still rising: more requests in flight), or where the host's CPU was saturated, says that.
    800 objects: at 4 in flight and >= 4 ms a request, the run lasts >= 0.8 s, over the 0.5 s a run needs to count
    (300 at 8 in flight ended under it on a fast host, and the verdict had one run)."""
    bed, p = s3_bed_delayed, "latency"
    shape = ["--files", "800", "--size-dist", "fixed:8KiB", "--classes", "2"]
    made = iobench("gen", "--url", f"s3://{bed.bucket}/{p}", *shape, env=bed.env(), timeout=600)
    assert made.returncode == 0, made.stderr
    out = tmp_path / "r"
    proc = iobench("run", "--url", f"s3://{bed.bucket}/{p}", *shape, "--engine", "threads", "--threads", "1",
                   "--in-flight", "1,4", "--cache", "cold", "--epochs", "1", "--no-metadata", "--no-fio", "--out",
                   str(out), "--quiet", env=bed.env(), cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    r = Result.load(out / "result.json")
    one, four = r.runs
    assert (one.in_flight, four.in_flight) == (1, 4) and four.samples == 800 and four.bytes == 800 * 8192
    assert one.open_ms.p50 is not None and one.open_ms.p50 >= 4.0  # the first byte waits a round trip
    assert four.samples_per_s > 2 * one.samples_per_s, (one.samples_per_s, four.samples_per_s)
    assert one.valid and four.valid, (one.invalid_reason, four.invalid_reason)  # both runs are in the answer
    v = r.verdict
    assert v is not None and v.still_rising and v.limit in ("input-pipeline", "client-cpu"), v.text
    assert ("other processes took the rest" in v.text if v.limit == "client-cpu" else
            "more requests in flight (--in-flight" in v.text), v.text


@pytest.mark.quiet  # judges rates against the bed's known round trip and bandwidth
def test_a_bed_of_known_bandwidth_is_named_the_limit(s3_bed_delayed, tmp_path: Path) -> None:
    """The delayed bed's answers share one wire of S3_DELAYED_MB_S (16 MB/s): 256 KiB objects come at most ~61/s
    whatever the requests in flight. One GET at a time stays under it (a round trip and a transfer each); with more
    in flight the rate meets the cap and stops rising; the client's CPU is nowhere near its limit at ~61/s, so the
    verdict names the storage as the limit, with a figure within the cap."""
    from testbed_fixtures import S3_DELAYED_MB_S

    bed, p = s3_bed_delayed, "bandwidth"
    shape = ["--files", "120", "--size-dist", "fixed:256KiB", "--classes", "2"]
    made = iobench("gen", "--url", f"s3://{bed.bucket}/{p}", *shape, env=bed.env(), timeout=600)
    assert made.returncode == 0, made.stderr
    out = tmp_path / "r"
    proc = iobench("run", "--url", f"s3://{bed.bucket}/{p}", *shape, "--engine", "threads", "--threads", "1",
                   "--in-flight", "1,4,16", "--cache", "cold", "--epochs", "1", "--no-metadata", "--no-fio",
                   "--out", str(out), "--quiet", env=bed.env(), cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    r = Result.load(out / "result.json")
    cap = S3_DELAYED_MB_S * 1e6 / (256 * 1024)
    rates = [run.samples_per_s for run in r.runs]
    assert [run.in_flight for run in r.runs] == [1, 4, 16] and all(run.samples == 120 for run in r.runs)
    assert max(rates) <= 1.05 * cap and rates[-1] >= 0.8 * cap, (rates, cap)
    v = r.verdict
    assert v is not None and v.limit == "storage" and not v.still_rising, v.text
    assert v.storage_samples_per_s is not None and v.storage_samples_per_s <= 1.05 * cap, v.text


def test_gen_stops_within_an_object_on_ctrl_c_and_resumes_where_it_stopped(s3_bed) -> None:
    p = f"g-{uuid.uuid4().hex[:8]}"
    args = ["gen", "--url", f"s3://{s3_bed.bucket}/{p}", "--files", "1500", "--size-dist", "fixed:8KiB",
            "--threads", "4"]
    proc = subprocess.Popen([sys.executable, "-m", "iobench.cli", *args], env=s3_bed.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(_keys(s3_bed, f"{p}/")) < 50:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    there = [k for k in _keys(s3_bed, f"{p}/") if k.endswith(".JPEG")]
    assert 48 <= len(there) < 1500  # stopped, not run to the end
    marker = json.loads(_client(s3_bed).get_object(Bucket=s3_bed.bucket, Key=next(
        k for k in _keys(s3_bed, f"{p}/") if k.endswith("iobench-dataset.json")))["Body"].read())
    assert marker["status"] == "incomplete"
    again = iobench(*args, env=s3_bed.env(), timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"wrote {1500 - len(there):,} objects" in again.stderr, again.stderr


def _breaker(bed, values: str | None) -> None:
    """SeaweedFS's circuit breaker on reads: at most `values` at once, the rest answered 503 SlowDown; None: off."""
    state = json.loads((bed.state / "state.json").read_text())
    ports = state["ports"]
    command = ("s3.circuitBreaker -global -disable -apply" if values is None else
               f"s3.circuitBreaker -global -type Count -actions Read -values {values} -apply")
    shell = subprocess.run(
        [state["weed"], "shell", f"-master=127.0.0.1:{ports['master']}.{ports['master_grpc']}",
         f"-filer=127.0.0.1:{ports['filer']}.{ports['filer_grpc']}"],
        input=command + "\n", capture_output=True, text=True, timeout=60, cwd=bed.state)
    assert '"Read:Count"' in shell.stdout, shell.stdout + shell.stderr
    time.sleep(3)  # the S3 server reads the breaker's config from the filer


@pytest.fixture
def throttling(s3_bed):
    """The session bed with its breaker at 2 reads at once, for one test; off again after it."""
    _breaker(s3_bed, "2")
    try:
        yield s3_bed
    finally:
        _breaker(s3_bed, None)


def test_a_throttling_server_is_counted_and_the_epoch_completes(throttling, prefix: str, tmp_path: Path) -> None:
    """The breaker lets 2 reads at a time through and answers the rest 503: at 4 threads x 4 in flight each
    client's throttled answers (no retry of its own hides them) are retried by iobench after a pause, every object
    is read once, and the run says how many of its requests were throttled at how many in flight. The CRT client
    sends its 16 GETs from one native event loop: more than 2 reach the server at once, always. boto3's threads take
    ~5 ms of CPU per GET under the GIL, so on a slow host its GETs may never overlap at the server (none throttled:
    its 503s are counted in the test that throttles every read); s3torchconnector (16 threads x 1) retries once
    inside itself: what it surfaces is counted, perhaps none."""
    _, samples = _dataset(throttling, prefix)
    for client, threads, depth in (("crt", "4", "4"), ("boto3", "4", "4"), ("s3torchconnector", "16", "1")):
        out = tmp_path / client
        proc = iobench("run", "--url", f"s3://{throttling.bucket}/{prefix}", *SHAPE, "--no-fio", "--engine", "threads",
                       "--threads", threads, "--in-flight", depth, "--cache", "cold", "--epochs", "1", "--s3-client",
                       client, "--no-metadata", "--quiet", "--out", str(out), env=throttling.env(), cwd=tmp_path,
                       timeout=300)
        assert proc.returncode == 0, proc.stderr
        r = Result.load(out / "result.json")
        (run,) = r.runs
        assert run.complete and (run.samples, run.bytes) == (FILES, sum(samples.values()))
        assert run.in_flight == 16 and (run.throttled > 0 or client != "crt"), client
        assert r.verdict is not None
        if not run.throttled:
            continue
        words = (f"the server throttled {run.throttled:,} of {FILES + run.throttled:,} requests (503 SlowDown) at "
                 "16 in flight")
        assert words in r.verdict.text and "the server's limit under throttling" in r.verdict.text, r.verdict.text


def test_a_server_throttling_every_request_ends_the_run_in_one_line(s3_bed, prefix: str, tmp_path: Path) -> None:
    """Every read answered 503 once the first epoch is in (the breaker at 0): DataLoader workers at 4 GETs in flight
    each (boto3's pool: its 503s seen, not retried inside it) retry, make no progress, and the run ends within
    --io-timeout in one line naming the throttling (exit 3: the worker's error is the line, not torch's traceback),
    the epoch measured kept."""
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "iobench.cli", "run", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE, "--no-fio",
           "--engine", "dataloader", "--workers", "2", "--batch-size", "32", "--in-flight", "4", "--s3-client",
           "boto3", "--cache", "cold", "--epochs", "40", "--io-timeout", "4", "--no-metadata", "--out", str(out)]
    proc = _started_until_a_run(cmd, s3_bed, tmp_path, out)
    try:
        _breaker(s3_bed, "0")  # takes ~3 s to apply
        _, err = proc.communicate(timeout=60)
    finally:
        _breaker(s3_bed, None)
        if proc.poll() is None:
            proc.kill()
    lines = [x for x in err.strip().splitlines() if x.startswith("iobench: error:")]
    assert proc.returncode == 3 and "Traceback" not in err and len(lines) == 1, err
    assert "the server is throttling requests" in lines[0], err
    r = Result.load(out / "result.json")
    assert not r.complete and r.runs and r.runs[0].samples == FILES


@CRT_RUN
def test_the_metadata_phase_lists_heads_and_gets_a_first_byte(crt_run: tuple[Result, Path]) -> None:
    """LIST in pages of 1,000 keys, then HEAD and a first-byte GET of each object of the sample, one at a time;
    the report names them as requests, and the start-up for ImageNet's keys is predicted from the listing."""
    from iobench.store.s3 import OBJECT_SAMPLE

    r, folder = crt_run
    (m,) = r.metadata
    pages = -(-(FILES + 2) // 1000)
    assert (m.files, m.dirs) == (FILES + 2, pages)  # the samples, the manifest and the marker; pages of 1,000
    assert m.stat_files == m.open_close_files == min(FILES, OBJECT_SAMPLE)
    assert m.stat_per_s > 0 and m.open_close_per_s > 0
    assert m.stat_ms.p50 is not None and m.stat_ms.p50 * m.stat_per_s <= 1000 * 1.01  # one request at a time
    assert m.projected_list_s == pytest.approx(m.list_s * m.scale_files / m.files, rel=0.01)
    html = (folder / "report.html").read_text()
    assert f"{FILES + 2:,} keys in {pages} LIST requests" in html and "HEAD/s" in html
    assert "1,281,167 keys (1,282 LIST requests of 1,000)" in (folder / "report.md").read_text()


# ------------------------------------------------------------------ the raw baseline (fio's role on objects)


def test_the_raw_baseline_reads_every_key_once_per_depth_beside_the_loaders(s3_bed, prefix: str,
                                                                            tmp_path: Path) -> None:
    """`run --url` with its raw phase (on by default, as fio on files): the AWS CRT's native client GETs every key
    once per depth of the sweep; its points are where fio's go, the loaders' efficiency is against them, and the
    storage figure is the best of both, named by its tool in the verdict."""
    from iobench.answer.rules import raw_valid, storage_figure
    from iobench.s3.raw import version

    _, samples = _dataset(s3_bed, prefix)
    out = tmp_path / "r"
    proc = iobench("run", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE, "--engine", "threads",
                   "--threads", "1,4", "--in-flight", "1", "--cache", "cold", "--epochs", "1", "--no-metadata",
                   "--out", str(out), "--quiet", env=s3_bed.env(), cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    r = Result.load(out / "result.json")
    b = r.baseline
    assert b is not None and (b.tool, b.tool_version) == ("awscrt", version()), b
    assert [(p.concurrency, p.cache) for p in b.points] == [(1, "cold"), (4, "cold")]
    for p in b.points:
        assert (p.samples, p.bytes) == (len(samples), sum(samples.values()))  # every key once, whole
        assert p.json_file == f"awscrt/awscrt-{p.concurrency}inflight-cold.json"  # named by what ran
        assert p.cpu_us_per_sample and p.cpu_us_per_sample > 0 and p.latency_ms.p50 > 0
        assert (out / (p.json_file or "")).is_file() and "--in-flight" in p.program
    assert all(run.efficiency is not None for run in r.runs)
    fig = storage_figure(r)
    assert raw_valid(b.points[0]) and fig is not None  # one in flight lasts well over 0.5 s
    best = max([x.samples_per_s for x in r.runs] + [p.samples_per_s for p in b.points if raw_valid(p)])
    assert fig.samples_per_s == best and f"({fig.what}" in (r.verdict.text if r.verdict else "")
    md = (out / "report.md").read_text()
    assert "## raw baseline (awscrt)" in md and "| in flight | cache | objects/s |" in md
    text = (out / "result.json").read_text() + (out / "report.html").read_text() + md
    assert s3_bed.secret_key not in text and s3_bed.access_key not in text


def test_iobench_fio_url_runs_the_raw_baseline_alone(s3_bed, prefix: str, tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = iobench("fio", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE, "--threads", "1", "--cache", "cold",
                   "--out", str(out), env=s3_bed.env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = Result.load(out / "result.json")
    assert not r.runs and r.baseline is not None and [p.samples for p in r.baseline.points] == [FILES]
    assert r.verdict is not None and r.verdict.text.startswith("raw baseline (awscrt) only: ")
    assert "objects/s cold (awscrt, 1 in flight)" in r.verdict.text and "awscrt" in proc.stdout + proc.stderr


def test_a_frozen_server_ends_the_raw_baseline_within_its_io_timeout(s3_bed, prefix: str, tmp_path: Path) -> None:
    """The S3 server frozen (SIGSTOP) while the raw client reads: exit 3 in one line within --io-timeout, the
    client's process gone; no credential on its command line."""
    state = json.loads((s3_bed.state / "state.json").read_text())
    (pid,) = [p["pid"] for p in state["procs"] if p["what"] == "weed server"]
    cmd = [sys.executable, "-m", "iobench.cli", "fio", "--url", f"s3://{s3_bed.bucket}/{prefix}", *SHAPE,
           "--threads", "1", "--cache", "cold", "--io-timeout", "4", "--quiet", "--out", str(tmp_path / "r")]
    proc = subprocess.Popen(cmd, env=s3_bed.env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    def raw_client() -> tuple[int, str] | None:
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                try:
                    line = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                if "iobench.s3.raw" in line and s3_bed.endpoint in line:  # this bed's (a parallel worker has its own)
                    return int(p.name), line
        return None

    thaw = threading.Timer(30, lambda: os.kill(pid, signal.SIGCONT))  # whatever happens, it thaws
    try:
        deadline, found = time.monotonic() + 120, None
        while found is None:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
            found = raw_client()
            time.sleep(0.05)
        child, line = found
        assert s3_bed.secret_key not in line and s3_bed.access_key not in line, line
        time.sleep(0.3)  # its requests under way
        os.kill(pid, signal.SIGSTOP)
        frozen = time.monotonic()
        thaw.start()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - frozen
    finally:
        thaw.cancel()
        os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    assert "the storage stopped answering" in err and "awscrt ran its baseline" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert took < 4 + 10, took
    assert not Path(f"/proc/{child}").exists() or "iobench.s3.raw" not in Path(f"/proc/{child}/cmdline").read_text()
