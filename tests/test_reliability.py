"""What must hold of a run whose dataset or output misbehaves, on a real file system and the real CLI: a dataset
picked by its whole shape, a FIFO planted in a dataset during a run, stdout closed under `--json -`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import first_epoch_kept, iobench, make_dataset

from iobench.dataset import GenSpec
from iobench.dataset.sizes import parse_dist

QUICK = ("--no-fio", "--no-metadata", "--engine", "threads", "--threads", "1", "--cache", "warm", "--quiet")


def _gen(mount: Path, files: int, dist: str, seed: int = 0) -> Path:
    """The dataset `gen --mount MOUNT --files FILES --size-dist DIST --seed SEED` makes (one class folder at these
    sizes), by the same function in this process: a setup, not what is judged (an `iobench gen` costs ~1 CPU-s)."""
    make_dataset(mount, files, dist, classes=1, seed=seed)
    folder = mount / "iobench-data" / GenSpec(files, parse_dist(dist), 1, seed).name
    assert folder.is_dir(), folder
    return folder


def test_a_dataset_is_picked_by_its_whole_shape_never_by_its_file_count(tmp_path: Path) -> None:
    mount = tmp_path / "m"
    mount.mkdir()
    small = _gen(mount, 100, "fixed:16KiB")
    ours = _gen(mount, 100, "imagenet")
    # the shape asked for exists nowhere: made, and the other shapes are named, not taken
    proc = iobench("run", "--mount", str(mount), "--files", "100", "--size-dist", "fixed:20KiB", "--seed", "5",
                   *QUICK[:-1], "--json", "-", "--out", str(tmp_path / "r1"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["dataset"]["params"] == {"files": 100, "size_dist": "fixed:20480", "classes": 1, "seed": 5}
    assert res["settings"]["seed"] == 5 and res["dataset"]["bytes"] == 100 * 20 * 1024
    assert small.name in proc.stderr and "other shapes" in proc.stderr
    # two datasets of 100 files: --files 100 takes the one of the workload's distribution (imagenet)
    proc = iobench("run", "--mount", str(mount), "--files", "100", *QUICK, "--json", "-", "--out",
                   str(tmp_path / "r2"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["dataset"]["path"] == str(ours.resolve())
    # pack takes the shape too
    proc = iobench("pack", "--mount", str(mount), "--files", "100", "--size-dist", "fixed:16KiB", "--format", "tar",
                   "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert str(small.resolve()) in proc.stdout


def test_json_to_a_closed_stdout_is_one_line(tmp_path: Path) -> None:
    """`--json -` with stdout closed (`>&-`): refused before anything is measured, in one line."""
    for args in (["workloads", "--json", "-"], ["gpus", "--json", "-"],
                 ["plan", "--gpu", "h200", "--gpus", "8", "--model", "resnet50", "--json", "-"],
                 ["run", "--mount", str(tmp_path), "--files", "50", *QUICK[:-1], "--json", "-"]):
        proc = subprocess.run([sys.executable, "-m", "iobench.cli", *args], stdout=None, stderr=subprocess.PIPE,
                              text=True, timeout=120, cwd=tmp_path, pass_fds=(), close_fds=True,
                              preexec_fn=lambda: os.close(1))
        assert proc.returncode == 2, (args, proc.stderr)
        want = "iobench: error: --json -: stdout is closed: give a file name, or run with stdout open"
        assert proc.stderr.strip().splitlines() == [want], (args, proc.stderr)
    assert not (tmp_path / "iobench-data").exists() and not (tmp_path / "reports").exists()


def _fifo_in_place_of(path: Path) -> None:
    tmp = path.with_name(path.name + ".fifo")
    os.mkfifo(tmp)
    os.replace(tmp, path)


def test_a_fifo_put_in_place_of_a_file_is_named_at_once_by_either_engine(tmp_path: Path) -> None:
    """FileReader opens without waiting for a writer; the epoch's size check names the FIFO (no 60 s stall)."""

    from iobench import engines, sources
    from iobench.phases.epoch import EpochSpec, measure_epoch
    from iobench.result import Settings
    from iobench.ui import UI

    m = make_dataset(tmp_path, 64, "fixed:8kB", classes=1)
    _fifo_in_place_of(Path(m.paths[10]))
    for engine in ("threads", "dataloader"):
        settings = Settings(engine=engine, batch_size=4, concurrency=[2], io_timeout_s=30, orders=["shuffled"],
                            cache=["warm"], epochs=1, seed=0)
        eng = engines.make(settings, 2)
        src = sources.open("files", m)
        t0 = time.monotonic()
        try:
            run, error = measure_epoch(eng, src, m, EpochSpec("shuffled", "warm", 1, 0, None, True, io_timeout_s=30),
                                       UI(quiet=True))
        finally:
            eng.close()
        assert time.monotonic() - t0 < 15
        assert isinstance(error, OSError) and error.filename == m.paths[10], (engine, error)
        assert error.strerror == "is now a FIFO, its manifest says 8,000 B: the dataset changed during the run"
        assert run.valid is False and run.invalid_reason == f"{m.paths[10]} {error.strerror}"


def test_a_fifo_planted_during_a_run_ends_it_in_one_line_keeping_what_was_measured(tmp_path: Path) -> None:
    from iobench.result import Result

    mount = tmp_path / "m"
    mount.mkdir()
    folder = _gen(mount, 300, "fixed:8kB")
    out = tmp_path / "out"
    run = subprocess.Popen([sys.executable, "-m", "iobench.cli", "run", "--mount", str(mount), "--files", "300",
                            "--size-dist", "fixed:8kB", *QUICK, "--epochs", "100000", "--out", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first_epoch_kept(out, run)
        victim = sorted((folder / "train").rglob("*.JPEG"))[7]
        _fifo_in_place_of(victim)
        planted = time.monotonic()
        _, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert time.monotonic() - planted < 20  # not the 60 s io-timeout
    assert run.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and f"{victim}: is now a FIFO" in lines[0], err
    assert "the dataset changed during the run" in lines[0] and str(out / "result.json") in lines[0]
    res = Result.load(out / "result.json")
    assert res.runs and not res.runs[-1].valid and "is now a FIFO" in (res.runs[-1].invalid_reason or "")
