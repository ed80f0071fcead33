"""Which dataset a run takes under --mount: a plain run always the workload's own (made or reused), the
others named in one note and never a refusal; `--files N` with several of N files the one nearest the workload's
shape, said which; `pack` the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import iobench, make_dataset

from iobench import session
from iobench.cli.app import cli
from iobench.cli.options import DEFAULT_FILES, shape_of
from iobench.dataset import GenSpec
from iobench.dataset.sizes import parse_dist
from iobench.ui import UI
from iobench.workload import DEFAULT, load

QUICK = ("--no-fio", "--no-metadata", "--engine", "threads", "--threads", "1", "--cache", "warm")


class Making(Exception):
    """Raised in place of making a dataset: which one the run would have made."""


def _making(mount: Path, spec: GenSpec, ui: UI, threads: int | None = None,
            timeout_s: float | None = None) -> None:
    raise Making(spec)


def _plain(files: int | None = None, size_dist: str | None = None):
    return shape_of(files, size_dist, None, None, workload_shape=load(DEFAULT).merged(files=files).dataset)


@pytest.fixture
def strays(tmp_path: Path) -> Path:
    """A mount where two tries left datasets of their own (`run --files 100`, `gen --files 60 ...`)."""
    mount = tmp_path / "m"
    mount.mkdir()
    make_dataset(mount, 100, "imagenet", classes=1)
    make_dataset(mount, 60, "fixed:4kB", classes=1)
    return mount


@pytest.mark.parametrize("command", ["run", "fio"])
def test_a_plain_run_takes_the_workloads_own_dataset_whatever_else_is_there(
        command: str, strays: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(session, "make", _making)
    monkeypatch.setattr(session, "require_fio", lambda: None)
    monkeypatch.chdir(tmp_path)
    extra = QUICK[:2] if command == "run" else ()
    got = CliRunner().invoke(cli, [command, "--mount", str(strays), *extra, "--out", str(tmp_path / "o")])
    assert isinstance(got.exception, Making), got.output
    spec = got.exception.args[0]
    assert (spec.files, spec.dist.spec, spec.seed) == (DEFAULT_FILES, "imagenet", 0)
    notes = [line for line in got.output.splitlines() if "other shapes" in line]
    assert len(notes) == 1 and "fixed4000-60f-1c-s0, imagenet-100f-1c-s0" in notes[0], got.output
    assert not (tmp_path / "o").exists()  # nothing measured: no result folder left


def test_a_plain_run_reuses_its_own_dataset_and_names_the_others(strays: Path, capsys: pytest.CaptureFixture) -> None:
    """A plain run of a workload of 100 files: its own dataset is there (the first stray), reused."""
    shape = shape_of(None, None, None, None, workload_shape=load(DEFAULT).merged(files=100).dataset)
    assert not shape.asked and session.pick(strays, shape, UI()) == GenSpec(100, parse_dist("imagenet"), 1, 0)
    err = capsys.readouterr().err
    assert "other shapes" in err and "fixed4000-60f-1c-s0" in err and "using the dataset" not in err


def test_files_n_with_several_of_n_files_takes_the_one_nearest_the_workloads_shape(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    mount = tmp_path / "m"
    mount.mkdir()
    near = make_dataset(mount, 300, "imagenet", classes=3).root  # the workload's sizes, other folders
    far = make_dataset(mount, 300, "fixed:4kB", classes=1).root  # the full shape's folders, other sizes
    spec = session.pick(mount, _plain(300), UI())
    assert spec == GenSpec(300, parse_dist("imagenet"), 3, 0)
    err = capsys.readouterr().err
    assert f"using the dataset iobench made earlier: {near}" in err and "nearest the workload's shape" in err
    assert far.name in err and "other shapes" in err
    # end to end: the run reads it, and pack packs it
    proc = iobench("run", "--mount", str(mount), "--files", "300", *QUICK, "--json", "-", "--out",
                   str(tmp_path / "r"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["dataset"]["path"] == str(near.resolve())
    assert "nearest the workload's shape" in proc.stderr
    proc = iobench("pack", "--mount", str(mount), "--files", "300", "--format", "tar")
    assert proc.returncode == 0, proc.stderr
    assert str(near.resolve()) in proc.stdout and "nearest the workload's shape" in proc.stderr


def test_two_as_near_as_each_other_make_the_full_shape_never_one_by_chance(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    mount = tmp_path / "m"
    mount.mkdir()
    make_dataset(mount, 40, "fixed:4kB", classes=1)
    make_dataset(mount, 40, "fixed:8kB", classes=1)
    assert session.pick(mount, _plain(40), UI()) == _plain(40).spec  # imagenet, made
    err = capsys.readouterr().err
    assert "using the dataset" not in err and "fixed4000-40f-1c-s0, fixed8000-40f-1c-s0" in err


def test_one_dataset_of_n_files_is_taken_whatever_its_sizes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    mount = tmp_path / "m"
    mount.mkdir()
    only = make_dataset(mount, 40, "fixed:4kB", classes=1).root
    assert session.pick(mount, _plain(40), UI()).dist.spec == "fixed:4000"
    assert f"using the dataset iobench made earlier: {only}" in capsys.readouterr().err
