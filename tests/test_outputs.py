"""Nothing of the user's is touched by what iobench writes: results, reports, CSV and JSON go
through one writer (iobench.safefs.write_file) that makes a temporary file of a random name exclusively beside the
target, never through a link, renames it into place, and removes it on failure. Where they go is checked first
(iobench.output): no output is an input, an --out that exists is empty, nothing goes inside a dataset."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import iobench, make_dataset, needs_root, tree_hashes

from iobench.safefs import write_file

EXAMPLES = Path(__file__).resolve().parent.parent / "reports" / "example"
EXAMPLE = EXAMPLES / "local" / "result.json"
WORKLOAD = Path(__file__).resolve().parent.parent / "workloads" / "small-files-4k.toml"
RUN = ["--files", "40", "--size-dist", "fixed:4kB", "--engine", "threads", "--threads", "1", "--cache", "warm",
       "--no-fio", "--no-metadata"]


def _refused(proc: subprocess.CompletedProcess, needle: str) -> str:
    """A refusal: exit 2, one line, nothing printed on stdout."""
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    line = proc.stderr.strip()
    assert line.startswith("iobench: error: ") and needle in line, line
    return line


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


@pytest.mark.parametrize("command, option", [("report", "--md"), ("report", "--csv"), ("compare", "--html")])
def test_a_link_at_the_output_is_refused_in_one_line(tmp_path: Path, command: str, option: str) -> None:
    """A link to another file of the user's, in one wording for every output file, before anything is read."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    out = tmp_path / "out"
    out.symlink_to(victim)
    other = [] if option == "--md" else ["--md", str(tmp_path / "r.md")]  # no report beside the shipped example
    inputs = [str(EXAMPLE)] if command == "report" else [str(EXAMPLE), str(EXAMPLES / "sshfs" / "result.json")]
    proc = iobench(command, *inputs, option, str(out), *other)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"iobench: error: {option} {out} is a symbolic link, where iobench expects a regular file: iobench does not "
        "follow, open or remove it; give another file name"]
    assert victim.read_text() == "keep me\n" and out.is_symlink()


def test_json_to_a_special_file_is_refused_before_measuring(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = iobench("workloads", "--json", str(fifo), timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"iobench: error: --json {fifo} is a FIFO, where iobench expects a regular file: "
                                   "iobench does not follow, open or remove it; give another file name (or - for "
                                   "stdout)")


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


def _inputs(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """Two results, a link to the first, and a workload file: the user's, to be read and never written."""
    a, b, w = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "w.toml"
    a.write_bytes(EXAMPLE.read_bytes())
    b.write_bytes((EXAMPLES / "sshfs" / "result.json").read_bytes())
    w.write_bytes(WORKLOAD.read_bytes())
    (tmp_path / "link.json").symlink_to(a)
    return a, b, w, tmp_path / "link.json"


@pytest.mark.parametrize("argv, named", [
    (["report", "a.json", "--html", "a.json"], "--html a.json is the input a.json"),
    (["report", "link.json", "--md", "a.json"], "--md a.json is the input link.json"),  # the same file by a link
    (["report", "a.json", "--csv", "./link.json"], "--csv link.json is the input a.json"),
    (["compare", "a.json", "b.json", "--json", "a.json"], "--json a.json is the input a.json"),
    (["compare", "a.json", "b.json", "--html", "x.html", "--csv", "b.json"], "--csv b.json is the input b.json"),
    (["compare", "a.json", "b.json", "--json", "link.json"], "--json link.json is the input a.json"),  # not "a link"
    (["plan", "--gpu", "h200", "--gpus", "8", "--model", "resnet50", "--result", "a.json", "--json", "a.json"],
     "--json a.json is the input a.json"),
    (["run", "--mount", ".", *RUN, "--workload", "./w.toml", "--json", "w.toml"], "--json w.toml is the input w.toml"),
], ids=["report-html", "report-md-link", "report-csv", "compare-json", "compare-csv", "compare-json-link",
       "plan-json", "run-json"])
def test_no_output_is_an_input(tmp_path: Path, argv: list[str], named: str) -> None:
    _inputs(tmp_path)
    before = tree_hashes(tmp_path)
    line = _refused(iobench(*argv, cwd=tmp_path, timeout=60), named)
    assert line.endswith("iobench never writes over what it reads; give another file name")
    assert tree_hashes(tmp_path) == before  # the inputs by hash, and nothing made (no dataset, no reports)


def _users_folder(tmp_path: Path) -> Path:
    mine = tmp_path / "mine"
    (mine / "fio").mkdir(parents=True)
    (mine / "report.html").write_text("<p>my own report</p>\n")
    (mine / "report.md").write_text("# my notes\n")
    (mine / "fio" / "c1-cold.json").write_text('{"mine": true}\n')
    return mine


def test_an_out_folder_iobench_did_not_make_is_refused(tmp_path: Path) -> None:
    mine = _users_folder(tmp_path)
    before = tree_hashes(tmp_path)
    line = _refused(iobench("run", "--mount", str(tmp_path), *RUN, "--out", str(mine), timeout=60), "is not empty")
    assert line == (f"iobench: error: --out {mine} is not empty (fio, report.html, report.md) and holds no result of "
                    "iobench's: iobench writes result.json, report.html, report.md and the raw baseline's fio/ or "
                    "awscrt/ there and overwrites nothing; give a new or empty folder")
    assert tree_hashes(tmp_path) == before  # every byte of the user's, and no dataset made first
    empty = tmp_path / "empty"
    empty.mkdir()
    iobench("run", "--mount", str(tmp_path), *RUN, "--out", str(empty), "--quiet", check=True, timeout=120)
    assert {p.name for p in empty.iterdir()} == {"result.json", "report.html", "report.md"}
    assert {k: v for k, v in tree_hashes(tmp_path).items() if k in before} == before


def test_no_output_goes_inside_a_dataset(tmp_path: Path) -> None:
    """The user's tree (--dataset), or MOUNT/iobench-data, which `clean` empties: --out, --json and the default
    ./reports are refused there, naming why."""
    users = tmp_path / "photos"
    users.mkdir()
    made = make_dataset(tmp_path, 40, "fixed:4kB", classes=1)
    for p in made.paths[:20]:
        (users / Path(p).name).write_bytes(Path(p).read_bytes())
    before = tree_hashes(tmp_path)
    tail = "iobench writes nothing among your files (a later scan would list it too); give --out a path outside it"
    line = _refused(iobench("run", "--dataset", str(users), *RUN[4:], "--out", str(users / "results")), "inside")
    assert line == f"iobench: error: --out {users / 'results'} is inside the dataset {users}: {tail}"
    _refused(iobench("run", "--dataset", str(users), *RUN[4:], "--json", str(users / "r.json")),
             "give --json a path outside it")
    line = _refused(iobench("run", "--dataset", ".", *RUN[4:], cwd=users), "the result folder reports is inside")
    assert line.endswith("give --out a path outside it")
    data = tmp_path / "iobench-data"
    for out in (made.root / "results", data / "results"):
        line = _refused(iobench("run", "--mount", str(tmp_path), *RUN, "--out", str(out)), "inside")
        assert line == (f"iobench: error: --out {out} is inside {data}, where iobench keeps the datasets it makes: "
                        "`iobench clean` would delete it with them; give --out a path outside it")
    assert tree_hashes(tmp_path) == before
