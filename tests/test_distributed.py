"""Distributed runs: real ranks launched by torchrun's machinery (`iobench run --ranks P` and the
`torchrun ... -m iobench run` form), gloo over loopback, real DataLoaders reading a real dataset on local disk.
Each epoch every sample is read exactly once across the ranks, the split changes between epochs, the gathered
figures add up, and a rank killed mid-run ends the run within the timeout, named, with nothing left running.
~10 s a launch on a 2-core VM (each rank imports torch)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from conftest import iobench, make_dataset

from iobench.distributed.epochs import coverage, digest, read_once, steps_per_rank
from iobench.record.order import epoch_order, shard
from iobench.result import Result

FILES = 1200
BATCH = 16
COMMON = ["--files", str(FILES), "--batch-size", str(BATCH), "--workers", "1", "--cache", "cold", "--rate", "400"]


@pytest.fixture(scope="module")
def mount(tmp_path_factory: pytest.TempPathFactory) -> Path:
    m = tmp_path_factory.mktemp("dist")
    make_dataset(m, FILES)
    return m


def _result(out: Path) -> Result:
    return Result.load(out / "result.json")


# -- the split, without processes -----------------------------------------------------------------------------
def test_shares_cover_every_sample_once_and_change_each_epoch() -> None:
    n, world = 1003, 4
    per_epoch = []
    for epoch in (1, 2):
        order = epoch_order("shuffled", n, 7, epoch)
        shares = [shard(order, r, world) for r in range(world)]
        assert sorted(np.concatenate(shares).tolist()) == list(range(n))
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        assert read_once([coverage(s) for s in shares], n)
        per_epoch.append([digest(s) for s in shares])
    assert all(a != b for a, b in zip(*per_epoch, strict=True))
    assert steps_per_rank(n, world, 16) == 16  # ceil(251 / 16): every rank joins as many steps as the largest share


def test_read_once_catches_a_duplicate_and_a_miss() -> None:
    n = 100
    a, b = np.arange(0, 50), np.arange(50, 100)
    assert read_once([coverage(a), coverage(b)], n)
    b_dup = b.copy()
    b_dup[0] = 49  # sample 49 twice, sample 50 never
    assert not read_once([coverage(a), coverage(b_dup)], n)
    assert not read_once([coverage(a)], n)


# -- real ranks -----------------------------------------------------------------------------------------------
def _check_job(res: Result, world: int, epochs: int) -> None:
    d = res.distributed
    assert d is not None and d.world_size == world and d.nodes == 1 and d.ranks_per_node == {os.uname().nodename: world}
    assert res.complete and len(res.ranks) == world
    runs = [r for r in res.runs if r.ranks]
    assert len(runs) == epochs
    for run in runs:
        mine = [e for rank in res.ranks for e in rank.epochs if e.epoch == run.epoch]
        assert len(mine) == world
        assert run.read_once is True
        # the gathered figures add up: samples and bytes per rank to the epoch's, and to the dataset's (each once)
        assert sum(e.samples for e in mine) == run.samples == res.dataset.files
        assert sum(e.bytes for e in mine) == run.bytes == res.dataset.bytes
        assert run.seconds == pytest.approx(max(e.seconds for e in mine), abs=1e-5)
        # a training run's one throughput: what its GPUs consumed over AU's window (each rank's first step left
        # out), so never much under the epoch's samples / seconds
        assert run.samples_per_s == run.delivered_per_s and run.samples_per_s >= 0.9 * run.samples / run.seconds
        # merged latencies: between the ranks' own percentiles, not their average by construction
        p50s = [e.latency_ms.p50 for e in mine]
        assert min(p50s) * 0.99 <= run.latency_ms.p50 <= max(p50s) * 1.01
        assert run.latency_ms.max == pytest.approx(max(e.latency_ms.max for e in mine), rel=2e-3)
        assert sorted(e.steps for e in mine) == sorted(-(-len(shard(np.arange(FILES), r, world)) // BATCH)
                                                      for r in range(world))
        aus = [e.au for e in mine if e.au is not None]
        assert run.au_min == pytest.approx(min(aus), abs=1e-4)
    for rank in res.ranks:  # a fresh global shuffle: every rank reads a different share each epoch
        digests = [e.shard_digest for e in rank.epochs]
        assert len(set(digests)) == len(digests) == epochs
    assert res.verdict is not None and res.verdict.gpus_asked == world
    assert res.verdict.answer.startswith(("Yes:", "No:"))


@pytest.fixture(scope="module")
def job2(mount: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """One `iobench run --ranks 2` of 2 epochs, shared by the tests that read its result."""
    out = tmp_path_factory.mktemp("job2") / "out"
    proc = iobench("run", "--ranks", "2", "--mount", str(mount), *COMMON, "--epochs", "2", "--out", str(out),
                   "--no-fio", "--no-metadata", timeout=240)  # switches that turn a phase off are never refused
    assert proc.returncode == 0, proc.stderr
    return proc, out


def test_ranks_2_launches_one_job_with_one_result(job2) -> None:
    proc, out = job2
    res = _result(out)
    _check_job(res, 2, 2)
    assert res.distributed.launcher == "iobench --ranks"
    assert "verdict:" in proc.stdout and proc.stdout.count("verdict:") == 1  # one rank speaks
    assert "Traceback" not in proc.stderr
    # the report shows each rank's figures, as the result holds them
    md = (out / "report.md").read_text()
    assert "## Ranks (distributed run)" in md
    for rank in res.ranks:
        for e in rank.epochs:
            assert f"| {rank.rank} | {rank.host} | {e.epoch} | {e.cache} | {e.samples:,} |" in md


def test_plan_reads_the_job_per_node_and_how_it_scaled(job2) -> None:
    """plan --result with a distributed result: the job's rate (all ranks together) and per node, not one
    client's; with a second result at more nodes, the scaling table (here a copy of the real result as if measured
    on 2 nodes at 1.5x the rate: the arithmetic, not a measurement)."""
    from iobench.answer.plan import format_plan, plan

    _, out = job2
    res = _result(out)
    run = min((r for r in res.runs if r.ranks and r.valid), key=lambda r: r.samples_per_s)
    p = plan("h200", 8, "resnet50", result=res)
    m = p.measured
    assert m is not None and m.samples_per_s == run.samples_per_s and m.nodes_measured == 1
    assert m.per_node_samples_per_s == run.samples_per_s and m.concurrency_whatif == []
    text = format_plan(p)
    assert "per client node (1 measured at once)" in text and "measured from one client" not in text
    assert res.distributed is not None
    two = res.model_copy(update={
        "distributed": res.distributed.model_copy(update={"nodes": 2, "world_size": 4}),
        "runs": [r.model_copy(update={"samples_per_s": 1.5 * r.samples_per_s}) for r in res.runs]})
    p2 = plan("h200", 8, "resnet50", result=two, series=[res, two])
    pts = p2.measured.scaling
    assert [pt.nodes for pt in pts] == [1, 2]
    assert pts[1].per_node_vs_fewest == pytest.approx(0.75, rel=1e-6)
    assert "scaled less than linearly" in (p2.measured.scaling_note or "")
    proc = iobench("plan", "--gpu", "h200", "--gpus", "8", "--model", "resnet50", "--result", str(out),
                   "--result", str(out), timeout=60)
    assert proc.returncode == 0 and "per client node" in proc.stdout


def test_no_valid_epoch_gives_no_answer_and_the_size_that_would(job2) -> None:
    """Epochs too short to count (here the real result with its runs marked so): no GPU count, and the --files that
    gives each rank 11 batches and epochs of 0.5 s at the rate measured."""
    from iobench.answer.client import verdict

    _, out = job2
    res = _result(out)
    short = res.model_copy(update={"runs": [r.model_copy(update={"valid": False, "invalid_reason": "too short"})
                                            for r in res.runs]})
    v = verdict(short)
    assert v.gpus_fed is None and v.limit is None
    assert v.answer.startswith("No valid distributed epoch (too short)")
    advised = int(v.answer.split("--files ")[1].split(" ")[0].replace(",", ""))
    fastest = max(r.samples_per_s for r in res.runs)  # the advice meets both rules at the rate measured
    assert advised >= 11 * BATCH * 2 and advised / fastest >= 2 * 0.5


@pytest.mark.quiet  # the advice's --files comes from a rate measured, its run judged by how long it lasts
def test_the_advice_for_epochs_too_short_makes_a_job_that_counts(tmp_path: Path) -> None:
    """Two ranks over 400 files: 12 steps each (enough), but an epoch of ~0.1-0.3 s at the rate they read (too
    short). The --files the verdict advises, from the rate measured, gives epochs that count."""
    common = ["--batch-size", str(BATCH), "--workers", "1", "--cache", "warm", "--rate", "100000",
              "--size-dist", "fixed:8kB"]
    out = tmp_path / "short"
    proc = iobench("run", "--ranks", "2", "--mount", str(tmp_path), "--files", "400", *common, "--out", str(out),
                   timeout=240)
    assert proc.returncode == 0, proc.stderr
    v = _result(out).verdict
    assert v is not None and v.answer.startswith("No valid distributed epoch"), v.text if v else None
    advised = v.answer.split("--files ")[1].split(" ")[0].replace(",", "")
    again = tmp_path / "again"
    proc = iobench("run", "--ranks", "2", "--mount", str(tmp_path), "--files", advised, *common, "--out", str(again),
                   timeout=240)
    assert proc.returncode == 0, proc.stderr
    res = _result(again)
    assert res.runs and all(r.valid for r in res.runs if r.ranks), [r.invalid_reason for r in res.runs]


def test_rank_0_failing_before_the_dataset_ends_every_rank(tmp_path: Path) -> None:
    """Rank 0 cannot make the dataset: it says why, and the rank waiting for it says rank 0 failed (not a hang)."""
    t0 = time.monotonic()
    proc = iobench("run", "--ranks", "2", "--mount", str(tmp_path / "missing"), "--rate", "100", "--timeout", "30",
                   timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 3, proc.stderr
    # rank 0 says why in one line; rank 1's own line ("rank 0 ... failed while waiting for rank 0 to make or check
    # the dataset") is held by the launcher: rank 0 spoke for the job
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith("iobench: ")] == [
        f"iobench: error: mount {tmp_path / 'missing'} does not exist"], proc.stderr
    assert "Traceback" not in proc.stderr and took < 30


# 2 ranks: the --ranks 2 job above. 3, not 4: a world past 2 (shares of a third each) is what this adds, and each
# rank more is one more process importing torch (~4 CPU-s)
@pytest.mark.parametrize("world", [3])
def test_torchrun_form(mount: Path, tmp_path: Path, world: int) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world), "-m",
           "iobench", "run", "--mount", str(mount), *COMMON, "--epochs", "2", "--out", str(out), "--no-fio",
           "--no-metadata"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = _result(out)
    _check_job(res, world, 2)
    assert res.distributed.launcher == "torchrun" and res.distributed.shared_page_cache
    assert any("share a host" in w for w in res.warnings)


def test_options_that_do_not_apply_are_refused_before_launch(mount: Path) -> None:
    for extra, words in ((["--threads", "4"], "--threads"), (["--mitigations"], "--mitigations"), (["--fio"], "--fio"),
                         (["--metadata"], "--metadata"),
                         (["--workers", "1,2"], "one --workers"), (["--order", "sequential"], "shuffled")):
        proc = iobench("run", "--ranks", "2", "--mount", str(mount), *extra, "--rate", "100", timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = iobench("run", "--mount", str(mount), "--timeout", "5", timeout=60)
    assert proc.returncode == 2 and "--timeout applies to a distributed run" in proc.stderr


def _ranks_of(marker: str) -> dict[int, psutil.Process]:
    """The rank processes whose command line holds `marker`: torchrun's environment, a parent without it (their
    DataLoader workers inherit it from the rank)."""
    found = {}
    for p in psutil.process_iter(["cmdline"]):
        try:
            if marker not in " ".join(p.info["cmdline"] or []):
                continue
            env, parent = p.environ(), p.parent()
            if "RANK" in env and parent is not None and "RANK" not in parent.environ():
                found[int(env["RANK"])] = p
        except psutil.Error:
            continue
    return found


def _alive(marker: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if marker in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _left_after(marker: str, grace: float) -> list[psutil.Process]:
    """The run's processes still there `grace` seconds on (looked at every 0.1 s: none left ends the wait)."""
    deadline = time.monotonic() + grace
    while (alive := _alive(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def _start_and_wait_for_epoch_1(out: Path, mount: Path, timeout: int, io_timeout: int = 60) -> subprocess.Popen:
    """A 2-rank run of 2 epochs (~4 s each at 150 samples/s per GPU), returned once the first epoch is in the
    result: what follows lands in the second."""
    cmd = [sys.executable, "-m", "iobench", "run", "--ranks", "2", "--mount", str(mount), "--files", str(FILES),
           "--batch-size", str(BATCH), "--workers", "1", "--cache", "cold", "--rate", "150", "--epochs", "2",
           "--timeout", str(timeout), "--io-timeout", str(io_timeout), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (out / "result.json").exists() and json.loads((out / "result.json").read_text())["runs"]:
            return proc
        time.sleep(0.2)
    proc.kill()
    pytest.fail("the first epoch never reached the result")


def test_a_frozen_rank_ends_the_run_within_its_timeout(mount: Path, tmp_path: Path) -> None:
    """SIGSTOP on rank 1: its heartbeat stops, rank 0's allreduce times out after --timeout, rank 0 names it, says
    how long it has been silent (the allreduce's wait and the 3 s watching the heartbeats: not those 3 s alone, as
    before) and keeps what was gathered; the launcher then stops the frozen rank (SIGTERM, SIGCONT). Measured:
    ~10-14 s with --timeout 5."""
    out = tmp_path / "frozen-run"
    proc = _start_and_wait_for_epoch_1(out, mount, timeout=5)
    try:
        ranks = _ranks_of(str(out))
        victim = ranks[1].pid
        frozen = time.monotonic()
        os.kill(victim, signal.SIGSTOP)
        _, err = proc.communicate(timeout=90)
        took = time.monotonic() - frozen
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    assert f"rank 1 on {os.uname().nodename} (pid {victim}) stopped answering (no heartbeat for " in err, err
    silent = int(err.split("(no heartbeat for ", 1)[1].split(" s)")[0])
    assert 5 + 3 - 1 <= silent <= took + 1, (silent, took, err)
    assert took < 2 * 5 + 3 + 10, f"the run took {took:.1f} s to end after the freeze"
    assert "Traceback" not in err, err
    res = _result(out)
    assert not res.complete and any("stopped at epoch 2" in w for w in res.warnings)
    assert _left_after(str(out), 1.0) == [], "processes of the run were left behind"


def test_a_rank_killed_mid_run_ends_the_run_named_and_leaves_nothing(mount: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed-run"
    proc = _start_and_wait_for_epoch_1(out, mount, timeout=20)
    try:
        ranks = _ranks_of(str(out))
        assert set(ranks) == {0, 1}
        # started by torch's own launcher (its agent gives each rank an error file and its run id), in this process
        assert all("TORCHELASTIC_ERROR_FILE" in p.environ() and p.ppid() == proc.pid for p in ranks.values())
        victim = ranks[1].pid
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 20 + 10, f"the run took {took:.1f} s to end after the kill"
    assert proc.returncode == 3, err
    assert f"rank 1 on {os.uname().nodename} (pid {victim}) was killed by SIGKILL" in err
    assert "Traceback" not in err, err
    res = _result(out)
    assert not res.complete and len([r for r in res.runs if r.ranks]) >= 1  # what was gathered is kept
    assert _left_after(str(out), 1.0) == [], "processes of the run were left behind"
