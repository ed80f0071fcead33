"""An error from the operating system names what iobench was doing, the path and the reason: never an
empty part ("stopped:: no space left"), and the path is the file being written or read, or the output being saved.
Real faults: a full tmpfs, a folder where a dataset file should be, an XFS shut down under a writer (real EIO)."""

from __future__ import annotations

import ctypes
import errno
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import first_epoch_kept, iobench, make_dataset, needs_root

from iobench import dataset, store
from iobench.dataset import GenSpec, generate
from iobench.dataset.sizes import parse_dist
from iobench.errors import EnvironmentRefused, UserError, explain_oserror

EXAMPLE = Path(__file__).resolve().parent.parent / "reports" / "example" / "local" / "result.json"
FAST = ("--files", "200", "--size-dist", "fixed:8kB", "--engine", "threads", "--threads", "1", "--no-fio",
        "--no-metadata")


def _last_error(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, proc.stderr
    line = proc.stderr.splitlines()[-1]
    assert line.startswith("iobench: error: ") and "Traceback" not in proc.stderr, proc.stderr
    assert "::" not in line and ": :" not in line, line
    return line


def test_an_error_without_a_file_name_has_no_empty_part():
    """The formatting alone, through the code that formats every such error: with the path, without it, and with
    the path said already by what iobench was doing."""
    full = explain_oserror(OSError(errno.ENOSPC, "No space left on device"), "stopped")
    assert str(full) == "stopped: no space left on the device" and isinstance(full, EnvironmentRefused)
    named = explain_oserror(OSError(errno.EIO, "Input/output error", "/mnt/x/a.JPEG"), "gen stopped after 3 of 9 files")
    assert str(named) == "gen stopped after 3 of 9 files: /mnt/x/a.JPEG: I/O error from the storage"
    assert type(named) is UserError
    said = explain_oserror(OSError(errno.EACCES, "Permission denied", "/r/o.md"), "cannot write the report /r/o.md")
    assert str(said) == "cannot write the report /r/o.md: permission denied"
    as_bytes = explain_oserror(OSError(errno.EISDIR, "Is a directory", b"/d/b.JPEG"), "reading the dataset /d failed")
    assert str(as_bytes) == "reading the dataset /d failed: /d/b.JPEG: a directory where a file should be"


# ------------------------------------------------------------------------------------------------ a full file system

@pytest.fixture
def full_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs filled to its last block."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with open(mnt / "fill", "wb", buffering=0) as f, pytest.raises(OSError) as e:
            while True:
                f.write(b"\0" * 4096)
        assert e.value.errno == errno.ENOSPC
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@needs_root
def test_a_full_disk_under_the_result_and_the_report_names_them(tmp_path, full_tmpfs):
    out = full_tmpfs / "res"
    line = _last_error(iobench("run", "--mount", str(tmp_path), *FAST, "--cache", "warm", "--out", str(out)), 3)
    assert line == f"iobench: error: cannot write the result {out / 'result.json'}: no space left on the device"
    md = full_tmpfs / "r.md"
    line = _last_error(iobench("report", str(EXAMPLE), "--md", str(md), "--html", str(tmp_path / "r.html")), 3)
    assert line == f"iobench: error: cannot write the report {md}: no space left on the device"
    assert sorted(p.name for p in full_tmpfs.iterdir()) == ["fill", "res"]  # no temporary file left behind


@needs_root
def test_gen_on_a_disk_that_fills_names_the_file_it_was_writing(tmp_path, full_tmpfs, monkeypatch):
    os.unlink(full_tmpfs / "fill")
    monkeypatch.setattr(store.folder.shutil, "disk_usage", lambda p: SimpleNamespace(free=10**12))  # past the check
    spec = GenSpec(40, parse_dist("fixed:100kB"), 1, 0)
    with pytest.raises(EnvironmentRefused) as e:
        generate(store.open(full_tmpfs), spec, threads=1)
    folder = full_tmpfs / dataset.DATA_ROOT / spec.name
    m = re.fullmatch(rf"gen stopped after (\d+) of 40 files: ({re.escape(str(folder))}/train/\S+\.JPEG): no space "
                     "left on the device", str(e.value))
    assert m, str(e.value)
    assert int(m[1]) < 3 and os.path.exists(m[2])  # the file it was writing when the disk filled


# ------------------------------------------------------------------------------- a real EIO: XFS shut down mid-gen

@pytest.fixture
def own_xfs(tmp_path: Path) -> Iterator[Path]:
    """A loop-device XFS of our own (shutting one down spoils it: not the shared test bed)."""
    img, mnt = tmp_path / "xfs.img", tmp_path / "xfs"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(320 << 20)  # sparse; mkfs.xfs wants >= 300 MB
    loop = subprocess.run(["losetup", "--find", "--show", str(img)], capture_output=True, text=True)
    if loop.returncode != 0:
        pytest.skip(f"no loop device: {loop.stderr.strip()}")
    dev = loop.stdout.strip()
    try:
        subprocess.run(["mkfs.xfs", "-q", "-f", dev], check=True)
        subprocess.run(["mount", dev, str(mnt)], check=True)
        try:
            yield mnt
        finally:
            subprocess.run(["umount", str(mnt)], check=True)
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)


@needs_root
def test_gen_on_a_storage_that_fails_names_the_file_it_was_writing(own_xfs):
    """`xfs_io -x -c shutdown` makes every later IO of that XFS fail with a real EIO: done from gen's first progress
    report, the writer's next file fails."""
    spec = GenSpec(600, parse_dist("fixed:8kB"), 2, 0)
    down = threading.Event()

    def progress(files: int, nbytes: int) -> None:
        if not down.is_set():
            down.set()
            subprocess.run(["xfs_io", "-x", "-c", "shutdown", str(own_xfs)], check=True)

    with pytest.raises(UserError) as e:
        generate(store.open(own_xfs), spec, threads=1, progress=progress)
    assert down.is_set()
    folder = own_xfs / dataset.DATA_ROOT / spec.name
    m = re.fullmatch(rf"gen stopped after (\d+) of 600 files: ({re.escape(str(folder))}/train/\S+): I/O error from "
                     "the storage", str(e.value))
    assert m, str(e.value)
    assert type(e.value) is UserError  # EIO is not a refusal: exit code 2


# --------------------------------------------------------------------------- a folder where a dataset file should be

def _exchange(a: Path, b: Path) -> None:
    """renameat2(RENAME_EXCHANGE): `a` and `b` swap names in one step."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, bytes(a), -100, bytes(b), 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
        raise OSError(ctypes.get_errno(), "renameat2", str(b))


def test_a_folder_in_place_of_a_dataset_file_during_a_run_names_the_dataset(tmp_path):
    """A file of the dataset replaced by a folder once the run has begun (after the dataset was checked): open()
    succeeds, read() fails with EISDIR, which names no file."""
    make_dataset(tmp_path, 200, "fixed:8kB", classes=1)  # `gen` with FAST's shape, in this process
    root = tmp_path / "iobench-data" / "fixed8000-200f-1c-s0"
    victim = sorted((root / "train").rglob("*.JPEG"))[7]
    out = tmp_path / "res"
    proc = subprocess.Popen(["python3", "-m", "iobench.cli", "run", "--mount", str(tmp_path), *FAST, "--cache", "warm",
                             "--epochs", "200", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        first_epoch_kept(out, proc)
        swap = victim.with_name("swap")
        swap.mkdir()
        _exchange(swap, victim)  # at once: an unlink then a mkdir left a reader a window of "no such file"
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    line = _last_error(SimpleNamespace(returncode=proc.returncode, stderr=err), 2)
    m = re.fullmatch(rf"iobench: error: reading the dataset {re.escape(str(root))} failed \(kept (\d+) measured "
                     rf"epochs? (?:and the partial one it stopped in \(complete: false\) )?in "
                     rf"{re.escape(str(out / 'result.json'))}\): (.+)", line)
    assert m, line
    # read() fails with EISDIR, naming no file; a reader that refuses what is not a regular file names the sample
    assert m[2] == "a directory where a file should be" or m[2].startswith(f"{victim}: is a folder"), line
