"""iobench.phases.fio: the real fio binary reads exactly the given files, and its JSON is parsed right."""

from __future__ import annotations

import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

import iobench.phases.fio as fio
from iobench.host.stall import StorageStalled
from iobench.phases import fio_json
from iobench.phases.fio import FioMissing, fio_version, run_fio
from iobench.phases.fio_job import PRERUN_DROP, FioJob, build_job
from iobench.phases.fio_json import FioError, parse_fio_output

needs_fio = pytest.mark.skipif(fio_version() is None, reason="fio is not installed (apt-get install -y fio)")


def parse_fio_json(text: str) -> dict:
    """fio's ``--output-format=json`` document, any lines around it skipped."""
    return parse_fio_output(text)[0]


def iolog(job: FioJob, j: int) -> str:
    """Job *j*'s iolog as text."""
    buf = io.StringIO()
    job.write_iolog(j, buf)
    return buf.getvalue()


def _reads(job: FioJob) -> Counter[tuple[str, int]]:
    """(path, length) of every read line in all of a job's iologs."""
    seen: Counter[tuple[str, int]] = Counter()
    for j in range(job.concurrency):
        for line in iolog(job, j).splitlines()[1:]:
            parts = line.split(" ")
            if parts[1] == "read":
                assert parts[2] == "0"
                seen[(parts[0], int(parts[3]))] += 1
    return seen


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[int]]:
    """300 files of random sizes 4-200 KiB (random bytes) in 10 folders."""
    root = tmp_path_factory.mktemp("fio")
    rng = random.Random(7)
    paths, sizes = [], []
    for i in range(300):
        d = root / f"class{i % 10:02d}"
        d.mkdir(exist_ok=True)
        size = rng.randint(4 * 1024, 200 * 1024)
        p = d / f"img{i:04d}.bin"
        p.write_bytes(os.urandom(size))
        paths.append(str(p))
        sizes.append(size)
    return paths, sizes


def test_build_job_reads_every_file_once_per_loop_in_total(dataset: tuple[list[str], list[int]]) -> None:
    paths, sizes = dataset
    job = build_job(paths, 4, loops=3, seed=1)
    assert job.concurrency == 4
    assert "numjobs=4" in job.job and "ioengine=psync" in job.job and "invalidate=0" in job.job
    assert "read_iolog=iobench.0.iolog:iobench.1.iolog:iobench.2.iolog:iobench.3.iolog" in job.job
    assert _reads(job) == Counter({(p, s): 3 for p, s in zip(paths, sizes, strict=True)})
    shares = [set(order) for order in job.orders]
    assert sum(len(s) for s in shares) == len(paths)  # disjoint shares: no file read by two jobs
    assert all(len(order) == 3 * len(share) for order, share in zip(job.orders, shares, strict=True))
    assert job.ios == 3 * len(paths) and job.bytes == 3 * sum(sizes)
    # a new random order each loop, and the same job again for the same seed
    first = job.orders[0]
    n = len(shares[0])
    assert first[:n] != first[n:2 * n]
    assert build_job(paths, 4, loops=3, seed=1) == job


def test_build_job_rejects_what_fio_cannot_replay(tmp_path: Path) -> None:
    ok = tmp_path / "a.bin"
    ok.write_bytes(b"x" * 10)
    with pytest.raises(ValueError, match="white space"):
        build_job([str(tmp_path / "a b.bin")], 1, sizes=[1])
    with pytest.raises(ValueError, match="256"):
        build_job(["/" + "d" * 300], 1, sizes=[1])
    with pytest.raises(ValueError, match="concurrency"):
        build_job([str(ok)], 2)


def test_parse_fio_json_skips_warning_lines() -> None:
    text = 'fio: this platform does not support {something}\nnote: x\n{\n "jobs": [1]\n}\nfio: trailing\n'
    assert parse_fio_json(text) == {"jobs": [1]}
    assert fio_json.parse_fio_output(text)[1] == '{\n "jobs": [1]\n}'  # the document as printed, nothing around it


@needs_fio
@pytest.mark.parametrize("concurrency", [1, 4])
def test_run_fio_counts_real_files_and_bytes(dataset: tuple[list[str], list[int]], concurrency: int,
                                             tmp_path: Path) -> None:
    paths, sizes = dataset
    res = run_fio(build_job(paths, concurrency, loops=2, seed=3), save_to=tmp_path)
    assert res.ios == 2 * len(paths)
    assert res.bytes == 2 * sum(sizes)
    assert res.seconds > 0
    assert res.files_per_s == pytest.approx(res.ios / res.seconds)
    assert res.mb_per_s == pytest.approx(res.bytes / res.seconds / 1e6)
    lat = res.latency_ms
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    assert res.repeats == 1 and res.runs_files_per_s == (round(res.files_per_s, 2),)
    assert f"numjobs={concurrency}" in res.job
    # what fio ran is kept in save_to: the job file and one iolog per job naming every file
    assert (tmp_path / "iobench.fio").read_text() == res.job
    logged = "".join((tmp_path / f"iobench.{j}.iolog").read_text() for j in range(concurrency))
    assert all(f"{p} read 0 {s}\n" in logged for p, s in zip(paths, sizes, strict=True))
    assert os.path.getsize(paths[0]) == sizes[0]  # --readonly: nothing was written


@needs_fio
def test_run_fio_path_with_colon(tmp_path: Path) -> None:
    d = tmp_path / "a:b"
    d.mkdir()
    files = [d / "x:1.bin", d / "y.bin", tmp_path / "z.bin"]
    for i, f in enumerate(files):
        f.write_bytes(os.urandom(5000 + 1000 * i))
    res = run_fio(build_job([str(f) for f in files], 2))
    assert res.ios == 3 and res.bytes == 5000 + 6000 + 7000


@needs_fio
def test_run_fio_reports_fio_errors(tmp_path: Path) -> None:
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 4096)
    with pytest.raises(FioError, match="No such file"):
        run_fio(build_job([str(tmp_path / "missing.bin")], 1, sizes=[4096]))
    with pytest.raises(FioError, match="No such file"):  # fio cuts its error line at 128 characters: errno spelled
        run_fio(build_job([str(tmp_path / ("d" * 80) / "missing.bin")], 1, sizes=[4096]))
    with pytest.raises(FioError, match="fio failed"):  # a read past the end: fio's "full resid"
        run_fio(build_job([str(f)], 1, sizes=[8192]))


def test_missing_fio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    f = tmp_path / "a.bin"
    f.write_bytes(b"x")
    monkeypatch.setenv("PATH", str(empty))
    assert fio_version() is None
    with pytest.raises(FioMissing, match="apt-get install"):
        run_fio(build_job([str(f)], 1))


def test_build_job_options_keep_fio_at_its_best(dataset: tuple[list[str], list[int]]) -> None:
    """No fadvise hint (fio's default advises SEQUENTIAL on every open, a loader none), no invalidate, its buffer on
    a page (malloc's address is 16 bytes past one: iobench/sources/buffers.py); the cold run's extra drop writes
    dirty pages back first, as iobench's own eviction does."""
    paths, _ = dataset
    cold = build_job(paths[:10], 1, drop_caches=True).job
    options = [line for line in cold.splitlines() if line and not line.startswith(";")]
    assert {"ioengine=psync", "rw=read", "fadvise_hint=0", "invalidate=0", "iomem_align=4k"} <= set(options)
    assert "exec_prerun=sh -c 'sync && echo 3 > /proc/sys/vm/drop_caches'" in options
    assert f"exec_prerun={PRERUN_DROP}" in options
    assert not any(o.startswith("exec_prerun") for o in build_job(paths[:10], 1).job.splitlines())


def _strace_wrapper(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in fio binary that runs the real one under strace (one log per process)."""
    logs = tmp_path / "strace"
    logs.mkdir()
    wrapper = tmp_path / "fio"
    wrapper.write_text(f"""#!/bin/sh
case "$1" in --version) exec {shutil.which("fio")} "$@";; esac
exec strace -f -ff -qq -s 0 -o {logs}/trace -e trace=openat,open,read,pread64,readv,preadv,preadv2,fadvise64,close \
    {shutil.which("fio")} "$@"
""")
    wrapper.chmod(0o755)
    return wrapper, logs


@needs_fio
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (apt-get install -y strace)")
def test_run_fio_reads_like_a_python_loop(dataset: tuple[list[str], list[int]], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The syscalls fio makes on the data files are a loader's: per file one open, one pread of the whole
    file, one close; no posix_fadvise, no other reads."""
    paths, sizes = dataset
    wrapper, logs = _strace_wrapper(tmp_path)
    monkeypatch.setattr(fio, "_fio_binary", lambda: str(wrapper))
    res = run_fio(build_job(paths[:40], 2, sizes=sizes[:40], seed=5))
    assert res.ios == 40
    size_of = dict(zip(paths[:40], sizes[:40], strict=True))
    opens: Counter[str] = Counter()
    preads: Counter[tuple[str, int, int]] = Counter()
    fadvised, other_reads = [], []
    for log in logs.iterdir():
        fds: dict[int, str] = {}
        for line in log.read_text(errors="replace").splitlines():
            if m := re.match(r'open(?:at)?\((?:AT_FDCWD, )?"([^"]+)", ([A-Z_|]+).*\) +=\s+(\d+)$', line):
                if m[1] in size_of:
                    assert "O_DIRECT" not in m[2]
                    opens[m[1]] += 1
                    fds[int(m[3])] = m[1]
            elif m := re.match(r"close\((\d+)\)", line):
                fds.pop(int(m[1]), None)
            elif m := re.match(r"pread64\((\d+), .*, (\d+), (\d+)\) +=\s+(\d+)$", line):
                if int(m[1]) in fds:
                    preads[(fds[int(m[1])], int(m[2]), int(m[3]))] += 1
                    assert m[4] == m[2]
            elif (m := re.match(r"(fadvise64|read|readv|preadv|preadv2)\((\d+),", line)) and int(m[2]) in fds:
                (fadvised if m[1] == "fadvise64" else other_reads).append(line)
    assert opens == Counter({p: 1 for p in size_of})
    assert preads == Counter({(p, s, 0): 1 for p, s in size_of.items()})
    assert fadvised == [] and other_reads == []


@needs_fio
def test_run_fio_repeats_keeps_the_fastest(dataset: tuple[list[str], list[int]]) -> None:
    paths, sizes = dataset
    calls = []
    res = run_fio(build_job(paths[:60], 2, sizes=sizes[:60]), repeats=3, prepare=lambda: calls.append(1))
    assert len(calls) == 3  # before each run
    assert res.repeats == 3 and len(res.runs_files_per_s) == 3
    assert round(res.files_per_s, 2) == max(res.runs_files_per_s)
    assert res.ios == 60 and res.bytes == sum(sizes[:60])  # the kept run read every file once
    with pytest.raises(ValueError, match="repeats"):
        run_fio(build_job(paths[:2], 1), repeats=0)


def test_foreign_drops_and_caveats() -> None:
    # each of fio's own jobs drops once (3: page cache and slab); anything beyond is someone else's
    assert fio._foreign_drops((10, 10), (14, 14), 4) == 0
    assert fio._foreign_drops((10, 10), (15, 14), 4) == 1
    assert fio._foreign_drops((10, 10), (12, 13), 0) == 3
    assert fio._foreign_drops(None, (1, 1), 0) is None
    assert fio._caveats(0.5, 0) == () and fio._caveats(0.5, None) == ()
    (drop,) = fio._caveats(0.5, 2)
    assert "dropped the caches 2 time(s)" in drop
    (short,) = fio._caveats(0.04, 0)
    assert "40 ms" in short
    assert len(fio._caveats(0.04, 1)) == 2
    counts = fio._drop_counts()
    if Path("/proc/vmstat").exists() and "drop_pagecache" in Path("/proc/vmstat").read_text():
        assert counts is not None and min(counts) >= 0


@needs_fio
def test_run_fio_labels_a_run_another_process_disturbed(dataset: tuple[list[str], list[int]],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    paths, sizes = dataset
    counts = iter([(5, 5), (6, 6)])  # someone dropped the caches once while fio ran
    monkeypatch.setattr(fio, "_drop_counts", lambda: next(counts))
    res = run_fio(build_job(paths[:20], 1, sizes=sizes[:20], loops=20))
    assert not res.at_best
    assert any("dropped the caches 1 time(s)" in c for c in res.caveats)


@needs_fio
@pytest.mark.root
@pytest.mark.pagecache  # a cold run elsewhere (drop_caches, as root) is a foreign drop, which this run would report
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (drop_caches)")
def test_run_fio_drop_caches_after_setup(dataset: tuple[list[str], list[int]]) -> None:
    paths, sizes = dataset
    res = run_fio(build_job(paths[:50], 2, drop_caches=True))
    assert "exec_prerun=sh -c 'sync && echo 3 > /proc/sys/vm/drop_caches'" in res.job
    assert res.ios == 50 and res.bytes == sum(sizes[:50])
    assert not any("dropped the caches" in c for c in res.caveats)  # fio's own two drops are not someone else's


def test_drop_caches_needs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import iobench.phases.fio as fio

    monkeypatch.setattr(fio, "DROP_CACHES", str(tmp_path / "no" / "drop_caches"))
    monkeypatch.setattr(fio, "_fio_binary", lambda: "/bin/true")
    with pytest.raises(PermissionError, match="needs root"):
        fio.run_fio(build_job([str(tmp_path / "a.bin")], 1, sizes=[1], drop_caches=True))


@needs_fio
def test_run_fio_keeps_fios_own_json_of_the_run_kept(dataset: tuple[list[str], list[int]]) -> None:
    paths, sizes = dataset
    res = run_fio(build_job(paths[:60], 2, sizes=sizes[:60]), repeats=2)
    doc = json.loads(res.raw_json)  # fio's --output-format=json document, as fio printed it
    assert doc["fio version"] == f"fio-{fio_version()}"
    (job,) = doc["jobs"]
    assert job["read"]["io_bytes"] == res.bytes == sum(sizes[:60]) and job["read"]["total_ios"] == res.ios
    assert job["read"]["runtime"] / 1000 == res.seconds  # the kept (fastest) run's document
    assert "raw_json" not in repr(res)


@needs_fio
def test_run_fio_save_to_keeps_json_job_file_and_small_iologs(dataset: tuple[list[str], list[int]], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    paths, sizes = dataset
    keep = tmp_path / "keep"
    res = run_fio(build_job(paths[:60], 2, sizes=sizes[:60], name="pt"), save_to=keep)
    names = ["pt.json", "pt.fio", "pt.0.iolog", "pt.1.iolog"]
    assert sorted(p.name for p in keep.iterdir()) == sorted(names)  # no temporary file left
    assert (keep / "pt.json").read_text() == res.raw_json + "\n" and (keep / "pt.fio").read_text() == res.job
    assert "read_iolog=pt.0.iolog:pt.1.iolog" in res.job
    # what was kept reruns as is, from its folder
    rerun = subprocess.run(["fio", "--readonly", "--output-format=json", "pt.fio"], cwd=keep, capture_output=True,
                           text=True, timeout=120, check=True)
    assert parse_fio_json(rerun.stdout)["jobs"][0]["read"]["io_bytes"] == sum(sizes[:60])
    # iologs over the limit are not kept, and an earlier run's of the same name are removed (they would not match)
    monkeypatch.setattr(fio, "KEEP_IOLOGS_MAX", 100)
    res = run_fio(build_job(paths[:60], 1, sizes=sizes[:60], name="pt"), save_to=keep)
    assert sorted(p.name for p in keep.iterdir()) == ["pt.fio", "pt.json"]
    assert json.loads((keep / "pt.json").read_text())["jobs"][0]["job options"]["numjobs"] == "1"


def _files(tmp_path: Path, n: int) -> list[str]:
    """`n` files of 8 KiB in 10 folders."""
    out = []
    for i in range(n):
        d = tmp_path / f"c{i % 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:05d}.bin").write_bytes(b"x" * 8192)
        out.append(str(d / f"{i:05d}.bin"))
    return out


@needs_fio
def test_the_progress_of_a_2_job_fio_counts_its_jobs_and_grows(tmp_path: Path) -> None:
    """fio's job processes each call setsid (their own session and group, not the main process's): the progress
    the stall watch and the live bar read is theirs, and it grows while fio reads."""
    job = build_job(_files(tmp_path / "data", 3000), 2, loops=40, seed=0, name="probe")
    path = job.write(tmp_path / "job")
    proc = subprocess.Popen([shutil.which("fio") or "fio", "--readonly", "--output-format=json", "--eta=never",
                             path.name], cwd=path.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        seen: list[tuple] = []
        while proc.poll() is None and len(seen) < 6:
            time.sleep(0.3)
            jobs = [p for p in fio._descendants(proc.pid) if p != proc.pid]
            if len(jobs) == 2:
                sids = {p: os.getsid(p) for p in jobs}
                assert all(sid == p != proc.pid for p, sid in sids.items()), sids  # each its own session
                seen.append((fio._progress(proc.pid), fio._bytes_read(proc.pid), jobs))
        assert len(seen) >= 3, "fio ended before its jobs were seen reading"
        for progress, _, jobs in seen:
            assert sorted(item[0] for item in progress) == sorted(jobs)  # the jobs, not the main process
        rchar = [sum(int(item[1]) for item in progress) for progress, _, _ in seen]
        assert rchar[-1] > rchar[0] and len({p for p, _, _ in seen}) == len(seen), rchar  # each look moved on
        assert seen[-1][1] > seen[0][1]  # the live bar's bytes too
    finally:
        proc.kill()
        proc.wait()


@needs_fio
def test_a_fio_whose_jobs_stop_reading_is_stalled_and_stopped(tmp_path: Path) -> None:
    """Jobs that do nothing (here: stopped, as if blocked on storage that stopped answering) while the main process
    wakes up as ever: StorageStalled after io_timeout_s, and none of fio's processes is left."""
    files = _files(tmp_path / "data", 3000)
    me = psutil.Process()
    stopped: list[int] = []

    def stop_the_jobs() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not stopped:
            for p in me.children(recursive=True):
                if p.name() == "fio" and p.ppid() != me.pid and os.getsid(p.pid) == p.pid:
                    os.kill(p.pid, signal.SIGSTOP)
                    stopped.append(p.pid)
            time.sleep(0.01)

    t = threading.Thread(target=stop_the_jobs, daemon=True)
    t.start()
    t0 = time.monotonic()
    with pytest.raises(StorageStalled, match="while fio ran its baseline"):
        run_fio(build_job(files, 2, loops=200), io_timeout_s=2.0)
    t.join()
    assert stopped and time.monotonic() - t0 < 30
    assert not fio._alive(stopped)
