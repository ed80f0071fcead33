"""Nothing measured is lost, nothing is left changed: a result folder per run, one run per dataset, device settings
put back after a SIGKILL, bad options refused before any work, and unfinished results named as such. All on real
files and real processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import iobench, make_dataset, needs_root

from iobench.phases.mitigations import journal_path, readahead_file, restore_left_settings
from iobench.result import Result

FAST = ("--files", "200", "--size-dist", "fixed:8kB", "--engine", "threads", "--threads", "1", "--no-fio",
        "--no-metadata")
DATASET = "fixed8000-200f-1c-s0"  # the folder FAST's dataset gets under MOUNT/iobench-data


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "iobench.cli", *args]


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.splitlines()
    assert lines and lines[-1].startswith("iobench: error:") and "Traceback" not in proc.stderr, proc.stderr
    return lines[-1]


def _gen(mount: Path) -> None:
    """FAST's dataset (DATASET), as `gen --mount MOUNT --files 200 --size-dist fixed:8kB` makes it: by the same
    function, in this process (a setup, not what is judged: an `iobench gen` process more costs ~1 CPU-s)."""
    make_dataset(mount, 200, "fixed:8kB", classes=1)
    assert (mount / "iobench-data" / DATASET).is_dir()


def _result_line(stdout: str) -> Path:
    return Path(next(line for line in stdout.splitlines() if line.startswith("result: ")).split(" ", 1)[1])


# ---------------------------------------------------------------------------------------------- 1. result folders


def test_two_runs_started_in_the_same_second_keep_both_results(tmp_path):
    for name in ("a", "b"):  # two datasets: one run may hold a dataset at a time
        (tmp_path / name).mkdir()
        _gen(tmp_path / name)
    for _ in range(3):  # until both start in the same second (the default folder is named to the second)
        time.sleep(1 - time.time() % 1)  # start at the top of a second: both reach the naming well within it
        procs = [subprocess.Popen(_cli("run", "--mount", str(tmp_path / name), *FAST, "--cache", "cold"),
                                  cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for name in ("a", "b")]
        outs = [p.communicate(timeout=300) for p in procs]
        for p, (_, err) in zip(procs, outs, strict=True):
            assert p.returncode == 0, err
        paths = [tmp_path / _result_line(out) for out, _ in outs]
        # the folder is named to the second the run started (its `created` is when measuring began, later)
        stamps = {p.parent.name[:len("20261204-184440")] for p in paths}
        if len(stamps) == 1:
            break
    assert len(stamps) == 1, f"the two runs never started in the same second: {paths}"
    assert paths[0].parent != paths[1].parent
    assert sorted(p.parent.name for p in paths)[1] == sorted(p.parent.name for p in paths)[0] + "-2"
    for p, name in zip(paths, ("a", "b"), strict=True):  # each folder holds its own run's result, and its reports
        assert Result.load(p).dataset.path == str((tmp_path / name / "iobench-data" / DATASET).resolve())
        assert (p.parent / "report.html").is_file()


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One finished FAST cold run (its mount and its result folder), read by the tests below; a test that changes
    the folder works on a copy."""
    mount = tmp_path_factory.mktemp("finished")
    out = mount / "done"
    iobench("run", "--mount", str(mount), *FAST, "--cache", "cold", "--out", str(out), "--quiet", check=True)
    return mount, out


def test_an_out_folder_that_holds_a_result_is_refused_before_measuring(finished, tmp_path):
    mount, done = finished
    out = tmp_path / "out"
    shutil.copytree(done, out)  # the run's folder as it wrote it: result.json and its reports
    kept = (out / "result.json").read_bytes()
    proc = iobench("run", "--mount", str(mount), *FAST, "--cache", "cold", "--out", str(out))
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert "already holds a result" in _one_line_error(proc) and str(out) in proc.stderr
    assert (out / "result.json").read_bytes() == kept
    (out / "result.json").write_bytes(b"")  # emptied: the folder still holds what iobench wrote (its reports)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    proc = iobench("run", "--mount", str(mount), *FAST, "--cache", "cold", "--out", str(out))
    assert proc.returncode == 2 and "already holds a result" in _one_line_error(proc)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_run_that_measures_nothing_leaves_no_result_folder(tmp_path):
    from iobench.dataset import GenSpec
    from iobench.dataset.sizes import parse_dist

    # the folder of the shape asked for holds something iobench did not make: run cannot use it
    mine = tmp_path / "m" / "iobench-data" / GenSpec(10, parse_dist("fixed:8kB"), 1, 0).name
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine\n")
    proc = iobench("run", "--mount", str(tmp_path / "m"), "--files", "10", "--size-dist", "fixed:8kB", "--no-fio",
                   "--no-metadata", "--engine", "threads", "--threads", "1", cwd=tmp_path)
    assert proc.returncode == 2 and "was not made by iobench" in _one_line_error(proc), proc.stderr
    assert not (tmp_path / "reports").exists() and (mine / "notes.txt").read_text() == "mine\n"


# ---------------------------------------------------------------------------------------------- 2. one run per dataset


def test_a_second_run_or_pack_on_a_dataset_in_use_is_refused_naming_the_first(tmp_path):
    mount = tmp_path / "m"
    mount.mkdir()
    _gen(mount)
    first = subprocess.Popen(_cli("run", "--mount", str(mount), *FAST, "--cache", "warm", "--epochs", "100000",
                                  "--out", str(tmp_path / "first"), "--quiet"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lock = mount / "iobench-data" / f"{DATASET}.lock"
    try:
        deadline = time.time() + 60
        while time.time() < deadline and first.poll() is None:
            try:
                if json.loads(lock.read_text())["pid"] == first.pid:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        assert first.poll() is None, "the first run ended early"
        for argv in (["run", "--mount", str(mount), *FAST, "--cache", "cold", "--out", str(tmp_path / "second")],
                     ["pack", "--mount", str(mount), *FAST[:4], "--format", "tar"]):
            t0 = time.monotonic()
            proc = iobench(*argv, cwd=tmp_path)
            line = _one_line_error(proc)
            assert proc.returncode == 3 and proc.stderr.count("\n") == 1, proc.stderr
            assert f"pid {first.pid}" in line and "iobench run --mount" in line and "in use" in line, line
            assert time.monotonic() - t0 < 30  # refused at once, not after the first one ends
        assert not (tmp_path / "second").exists() and not (tmp_path / "reports").exists()
        assert not (mount / "iobench-data" / DATASET / "packed").exists()
    finally:
        first.kill()  # SIGKILL: the kernel releases its flock
        first.wait()
    out = iobench("pack", "--mount", str(mount), *FAST[:4], "--format", "tar", "--quiet", check=True).stdout
    assert "tar:" in out
    assert not lock.exists()  # removed on release


# ---------------------------------------------------------------------------------------------- 3. settings put back

_HOLD_READAHEAD = """
import sys, time
from iobench.phases.mitigations import read_ahead_kb
with read_ahead_kb(sys.argv[1], 1024):
    print("set", flush=True)
    time.sleep(600)
"""


def _killed_while_readahead_set(bdi: str, env: dict) -> int:
    """A process that enters read_ahead_kb(bdi, 1024), SIGKILLed there (no finally runs); its pid."""
    child = subprocess.Popen([sys.executable, "-c", _HOLD_READAHEAD, bdi], stdout=subprocess.PIPE, text=True,
                             env=env)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "set"
        assert int(readahead_file(bdi).read_text()) == 1024
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert int(readahead_file(bdi).read_text()) == 1024  # left changed
    return child.pid


@needs_root
def test_a_readahead_left_by_a_killed_run_is_put_back_and_said(xfs_mount, tmp_path, monkeypatch):
    monkeypatch.setenv("IOBENCH_STATE_DIR", str(tmp_path / "state"))
    env = {**os.environ, "IOBENCH_STATE_DIR": str(tmp_path / "state")}
    st = os.stat(xfs_mount)
    bdi = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    f = readahead_file(bdi)
    original = int(f.read_text())
    before = 128 if original == 1024 else original
    f.write_text(str(before))
    try:
        pid = _killed_while_readahead_set(bdi, env)
        said = f"restored read_ahead_kb of {bdi} to {before}, left at 1024 by a killed run (pid {pid})"
        assert json.loads(journal_path().read_text())[0]["old"] == before
        assert restore_left_settings() == [said]
        assert int(f.read_text()) == before and json.loads(journal_path().read_text()) == []
        assert restore_left_settings() == []  # once

        # a real run puts it back before it records the mount's settings, and says so in one warning line
        pid = _killed_while_readahead_set(bdi, env)
        mount = xfs_mount / "results-kept"
        mount.mkdir(exist_ok=True)
        out = tmp_path / "out"
        proc = iobench("run", "--mount", str(mount), *FAST, "--cache", "cold", "--out", str(out), env=env)
        assert proc.returncode == 0, proc.stderr
        warned = [line for line in proc.stderr.splitlines() if "restored read_ahead_kb" in line]
        assert warned == [f"warning: restored read_ahead_kb of {bdi} to {before}, left at 1024 by a killed run "
                          f"(pid {pid})"], proc.stderr
        assert int(f.read_text()) == before
        r = Result.load(out / "result.json")
        assert r.mount.bdi == bdi and r.mount.read_ahead_kb == before  # the device's own value, not 1024
    finally:
        f.write_text(str(original))


# ---------------------------------------------------------------------------------------------- 4. errors in time


def test_pack_refuses_a_bad_shard_size_before_packing(tmp_path):
    make_dataset(tmp_path, 40, "fixed:8kB", classes=1)  # `gen --files 40 --size-dist fixed:8kB`'s dataset
    proc = iobench("pack", "--mount", str(tmp_path), "--shard-size", "lots")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--shard-size" in _one_line_error(proc) and "'lots'" in proc.stderr
    assert not list(tmp_path.glob("iobench-data/*/packed"))  # no LMDB was built first
    proc = iobench("pack", "--mount", str(tmp_path), "--shard-size", "0MiB")
    assert proc.returncode == 2 and "--shard-size" in _one_line_error(proc)


def test_a_decode_failure_names_the_file_and_the_decoders_error(tmp_path):
    pytest.importorskip("torch")
    m = make_dataset(tmp_path, 80, "fixed:8kB", classes=1)  # 10 batches of 8 for the one worker: a run that counts
    bad = Path(m.paths[7])
    bad.write_bytes(b"not a jpeg".ljust(bad.stat().st_size, b"\0"))  # same size: the dataset still checks out
    proc = iobench("run", "--dataset", str(m.root), "--engine", "dataloader", "--workers", "1", "--batch-size", "8",
                   "--decode", "--no-fio", "--no-metadata", "--cache", "warm", "--out", str(tmp_path / "out"))
    line = _one_line_error(proc)
    assert proc.returncode != 0
    assert str(bad) in line and "cannot decode the image (UnidentifiedImageError: cannot identify image file)" in line
    assert "Success" not in line and "BytesIO" not in line


# ---------------------------------------------------------------------------------------------- 5. unfinished results


def test_plan_and_compare_warn_about_an_unfinished_result(finished, tmp_path):
    _, out = finished  # read, not changed
    r = Result.load(out / "result.json")
    # another run, stopped before its end (a copy of the same run would be refused by compare as the same result)
    r.complete, r.verdict, r.finished = False, None, None
    r.created = "2026-01-01T00:00:00+0000"
    partial = tmp_path / "partial" / "result.json"
    partial.parent.mkdir()
    partial.write_text(r.model_dump_json(indent=1, by_alias=True))
    says = (f"iobench: warning: {partial} is an unfinished run (complete: false): its figures cover only what was "
            "measured before it stopped")
    for argv in (["plan", "--gpu", "h200", "--gpus", "8", "--model", "resnet50", "--result", str(partial)],
                 ["compare", str(out / "result.json"), str(partial)]):
        proc = iobench(*argv, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert [line for line in proc.stderr.splitlines() if "unfinished" in line] == [says], proc.stderr
    finished = iobench("plan", "--gpu", "h200", "--gpus", "8", "--model", "resnet50", "--result", str(out),
                       cwd=tmp_path, check=True)
    assert "unfinished" not in finished.stderr + finished.stdout
