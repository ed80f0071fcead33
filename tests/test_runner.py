"""The one phase runner (phases/runner.py) on real reads of real files (cold: an epoch is never lengthened into
passes): an epoch recorded and saved as it ends, a read that fails, a stall outside the epochs and Ctrl-C each
ending the run with what was measured kept; and the one stall watchdog (host/stall.Watch) on any mark of progress."""

import os
import time
from pathlib import Path

import pytest
from conftest import make_dataset

from iobench.dataset import Manifest
from iobench.engines.threads import ThreadEngine
from iobench.errors import Interrupted, UserError
from iobench.host.bounded import in_child
from iobench.host.stall import StorageStalled, Watch
from iobench.phases.epoch import EpochSpec
from iobench.phases.runner import RunContext, epoch, run_phases
from iobench.progress import Plan, Step
from iobench.result import Result, Run, Settings
from iobench.sources.files import FileSource
from iobench.ui import UI

GOLDEN = Path(__file__).resolve().parent / "data" / "golden" / "local.json"


def _context(manifest: Manifest, folder: Path) -> RunContext:
    result = Result.load(GOLDEN)
    result.runs = []
    settings = Settings(orders=["shuffled"], concurrency=[2], cache=["cold"], epochs=1, seed=0, engine="threads")
    return RunContext(manifest, settings, result, folder / "result.json", UI(quiet=True))


def _epoch(ctx: RunContext) -> Run:
    spec = EpochSpec("shuffled", "cold", 1, 0, None, True, io_timeout_s=30)
    return epoch(ctx, Step("replay", "cold, 2 threads", len(ctx.manifest), "replay cold"), ThreadEngine(2),
                 FileSource(ctx.manifest), spec)


def test_an_epoch_is_recorded_and_saved_as_it_ends(small_dataset: Manifest, tmp_path: Path) -> None:
    ctx = _context(small_dataset, tmp_path)
    sizes: list[int] = []
    run_phases(ctx, Plan([]), [lambda c: sizes.append(os.path.getsize(c.path) if _epoch(c) else 0)])
    assert sizes[0] > 0  # saved before the phase went on
    saved = Result.load(ctx.path)
    assert [(r.samples, r.bytes, r.complete) for r in saved.runs] == [(len(small_dataset), small_dataset.total_bytes,
                                                                       True)]


def test_a_stall_outside_the_epochs_keeps_the_epoch_read_before(small_dataset: Manifest, tmp_path: Path) -> None:
    ctx = _context(small_dataset, tmp_path)

    def phase(c: RunContext) -> None:
        _epoch(c)
        in_child(lambda beat: time.sleep(60), 0.5, "listing the dataset")  # a child that makes no progress

    with pytest.raises(StorageStalled) as info:
        run_phases(ctx, Plan([]), [phase])
    assert str(info.value) == ("the storage stopped answering: no answer for 0.5 s while listing the dataset; kept "
                               f"what was measured in {ctx.path}")
    assert [r.samples for r in Result.load(ctx.path).runs] == [len(small_dataset)]


def test_ctrl_c_keeps_what_was_measured(small_dataset: Manifest, tmp_path: Path) -> None:
    ctx = _context(small_dataset, tmp_path)

    def phase(c: RunContext) -> None:
        _epoch(c)
        raise KeyboardInterrupt

    with pytest.raises(Interrupted) as info:
        run_phases(ctx, Plan([]), [phase])
    assert str(info.value) == f"interrupted: kept 1 measured epoch in {ctx.path}"
    assert len(Result.load(ctx.path).runs) == 1


def test_a_read_that_fails_keeps_the_partial_epoch_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    manifest = make_dataset(tmp_path / "mnt", 40)
    os.unlink(manifest.paths[7])  # gone between the listing and the read
    ctx = _context(manifest, tmp_path)
    with pytest.raises(UserError) as info:
        run_phases(ctx, Plan([]), [_epoch])
    assert str(info.value).startswith(f"reading the dataset {manifest.root} failed (kept the partial epoch it stopped "
                                      f"in (complete: false) in {ctx.path}): {manifest.paths[7]}")
    runs = Result.load(ctx.path).runs
    assert len(runs) == 1 and not runs[0].complete and runs[0].samples < len(manifest)


def test_the_watch_judges_any_mark_of_progress() -> None:
    """The one watchdog: a mark that changes is progress, one that does not for timeout_s is a stall (samples
    counted, a child's beat as bytes, a tool's counters as a tuple)."""
    for first, same in ((3, 3), (b"\x00\x01", b"\x00\x01"), (((1, "2"),), ((1, "2"),))):
        watch = Watch(0.0)
        watch.check(first)
        with pytest.raises(StorageStalled, match="1 read pending for 0 s"):
            watch.check(same)
    patient = Watch(60.0)
    for mark in (1, 1, 2, 2):
        patient.check(mark)
