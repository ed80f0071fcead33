"""Nothing of the user's is touched by what iobench writes (issue 25, item 1): results, reports, CSV and JSON go
through one writer (iobench.safefs.write_file) that makes a temporary file of a random name exclusively beside the
target, never through a link, renames it into place, and removes it on failure."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import iobench, needs_root

from iobench.safefs import write_file

EXAMPLE = Path(__file__).resolve().parent.parent / "reports" / "example" / "local" / "result.json"


def test_a_users_file_at_the_old_temporary_name_is_left_alone(tmp_path: Path) -> None:
    dl = tmp_path / "dl"
    dl.mkdir()
    mine = dl / "mine.md.tmp"
    mine.write_text("my notes\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (dl / "s.md.tmp").symlink_to(victim)
    for md in ("mine.md", "s.md"):
        iobench("report", str(EXAMPLE), "--md", str(dl / md), check=True)
        assert (dl / md).read_text().startswith("#")
    assert mine.read_text() == "my notes\n" and victim.read_text() == "keep me\n"
    assert (dl / "s.md.tmp").is_symlink()
    assert sorted(p.name for p in dl.iterdir()) == ["mine.md", "mine.md.tmp", "s.md", "s.md.tmp"]


@pytest.mark.parametrize("option", ["--md", "--csv"])
def test_a_link_at_the_output_is_refused_in_one_line(tmp_path: Path, option: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    out = tmp_path / "out"
    out.symlink_to(victim)
    other = [] if option == "--md" else ["--md", str(tmp_path / "r.md")]  # no report beside the shipped example
    proc = iobench("report", str(EXAMPLE), option, str(out), *other)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"iobench: error: {out} is a symbolic link, where iobench expects a regular file: iobench does not follow, "
        "open or remove it; move it away"]
    assert victim.read_text() == "keep me\n" and out.is_symlink()


def test_json_to_a_special_file_is_refused_before_measuring(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = iobench("workloads", "--json", str(fifo), timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"iobench: error: --json {fifo}: is a FIFO, not a regular file; give a file name "
                                   "(or - for stdout)")


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    def parts():
        yield b"half"
        raise OSError(5, "Input/output error")

    with pytest.raises(OSError):
        write_file(tmp_path / "r.json", parts())
    assert list(tmp_path.iterdir()) == []


@needs_root
def test_a_full_file_system_leaves_no_temporary_file(tmp_path: Path) -> None:
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "testbed-tmpfs", str(mnt)], check=True)
    try:
        (mnt / "r.md").write_text("the old report\n")
        with pytest.raises(OSError) as exc:
            write_file(mnt / "r.md", b"x" * (1 << 20))
        assert exc.value.errno == 28  # ENOSPC
        assert [p.name for p in mnt.iterdir()] == ["r.md"]
        assert (mnt / "r.md").read_text() == "the old report\n"  # a failed write keeps the old file whole
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
