"""Issue 25's cases on a real file system and the real CLI: a dataset picked by its whole shape, a FIFO planted in
a dataset during a run, stdout closed under `--json -`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import iobench

from iobench.dataset import GenSpec
from iobench.sizes import parse_dist

QUICK = ("--no-fio", "--no-metadata", "--engine", "threads", "--threads", "1", "--cache", "warm", "--quiet")


def _gen(mount: Path, files: int, dist: str, seed: int = 0) -> Path:
    iobench("gen", "--mount", str(mount), "--files", str(files), "--size-dist", dist, "--seed", str(seed), "--quiet",
            check=True)
    return mount / "iobench-data" / GenSpec(files, parse_dist(dist), 1, seed).name


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
        assert proc.stderr.strip().splitlines() == [
            "iobench: error: --json -: stdout is closed: give a file name, or run with stdout open"], (args, proc.stderr)
    assert not (tmp_path / "iobench-data").exists() and not (tmp_path / "reports").exists()
