"""`compare` and `clean` as a person runs them: compare prints its side-by-side table (with each result's
date, mount, iobench version and the settings that differ), `--json -` writes the JSON alone, a result compared
with itself is refused; clean lists what it would remove with its size and asks, and from a non-terminal without
--yes removes nothing and says how."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import iobench, make_dataset

from iobench.result import Result

GOLDEN = Path(__file__).parent / "data" / "golden"
LOCAL, SSHFS = GOLDEN / "local.json", GOLDEN / "sshfs.json"


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("iobench: error:"), proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_compare_prints_its_table(tmp_path: Path) -> None:
    raw = json.loads(SSHFS.read_text())
    other = tmp_path / "sshfs.json"  # the sshfs run, as if at another batch size and a sweep of its own
    other.write_text(json.dumps({**raw, "settings": {**raw["settings"], "batch_size": 128, "concurrency": [8]}}))
    proc = iobench("compare", str(LOCAL), str(other), "--name", "local", "--name", "sshfs", "--md",
                   str(tmp_path / "c.md"), "--html", str(tmp_path / "c.html"), cwd=tmp_path, check=True)
    local, sshfs = Result.load(LOCAL), Result.load(other)
    rows = {line.split("│")[1].strip(): line for line in proc.stdout.splitlines() if line.count("│") >= 3}
    assert "storage, cold samples/s" in rows and "GPUs the storage feeds (one client)" in rows
    assert local.created.replace("T", " ") in rows["run on"] and sshfs.created.replace("T", " ") in rows["run on"]
    assert local.mount.path in rows["mount"] and sshfs.mount.path in rows["mount"]
    assert local.host.iobench in rows["iobench version"]
    assert [k for k in rows if k.startswith("setting ")] == ["setting concurrency", "setting batch_size"]
    assert [c.strip() for c in rows["setting batch_size"].split("│")[2:4]] == [str(local.settings.batch_size), "128"]
    md = (tmp_path / "c.md").read_text()
    assert "| run on |" in md and "| iobench version |" in md
    assert f"md: {tmp_path / 'c.md'}" in proc.stdout
    assert not (tmp_path / "reports").exists()


def test_compare_json_to_stdout_writes_nothing_else(tmp_path: Path) -> None:
    proc = iobench("compare", str(LOCAL), str(SSHFS), "--json", "-", cwd=tmp_path, check=True)
    cmp = json.loads(proc.stdout)
    assert len(cmp["systems"]) == 2 and cmp["headline"]
    assert "run on" in proc.stderr  # the table went to stderr
    assert list(tmp_path.iterdir()) == []  # no reports/...-compare/ folder


def test_compare_without_options_writes_its_folder(tmp_path: Path) -> None:
    iobench("compare", str(LOCAL), str(SSHFS), cwd=tmp_path, check=True)
    (folder,) = (tmp_path / "reports").iterdir()
    assert folder.name.endswith("-compare")
    assert sorted(p.name for p in folder.iterdir()) == ["compare.csv", "compare.html", "compare.md"]


def test_a_result_compared_with_itself_is_refused(tmp_path: Path) -> None:
    _one_line_error(iobench("compare", str(LOCAL), str(LOCAL), "--json", "-", cwd=tmp_path),
                    "the same result", "compare two different results")
    copy = tmp_path / "copy" / "result.json"
    copy.parent.mkdir()
    copy.write_bytes(LOCAL.read_bytes())
    _one_line_error(iobench("compare", str(copy.parent), str(LOCAL), str(SSHFS), cwd=tmp_path), "the same result")
    assert not (tmp_path / "reports").exists()


@pytest.fixture
def mount(tmp_path: Path) -> Path:
    m = tmp_path / "m"
    m.mkdir()
    make_dataset(m, 30, "fixed:8kB", classes=2)
    return m


def test_clean_from_a_non_terminal_needs_yes(mount: Path) -> None:
    proc = iobench("clean", "--mount", str(mount), stdin=subprocess.DEVNULL)
    _one_line_error(proc, "nothing removed", "--yes", "not a terminal")
    root = next((mount / "iobench-data").iterdir())
    assert f"would remove dataset {root} (3" in proc.stdout and "kB)" in proc.stdout  # its files and size
    assert len(list(root.rglob("*.JPEG"))) == 30
    done = iobench("clean", "--mount", str(mount), "--yes", stdin=subprocess.DEVNULL, check=True)
    assert f"removed dataset {root}" in done.stdout and not root.exists()


def _in_a_terminal(mount: Path, answer: bytes) -> str:
    """`iobench clean` with its stdin a pseudo-terminal that answers `answer`."""
    main, tty = os.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "iobench.cli", "clean", "--mount", str(mount)], stdin=tty,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        os.close(tty)
        os.write(main, answer)
        out, _ = proc.communicate(timeout=120)
    finally:
        os.close(main)
    assert proc.returncode == 0, out
    return out.decode()


def test_clean_in_a_terminal_asks_first(mount: Path) -> None:
    root = next((mount / "iobench-data").iterdir())
    said = _in_a_terminal(mount, b"n\n")
    assert "remove 1 folder (" in said and "nothing removed" in said and root.is_dir()
    said = _in_a_terminal(mount, b"y\n")
    assert f"removed dataset {root}" in said and not root.exists()


def _on(path: Path, tmp_path: Path, mount: str, created: str) -> Path:
    raw = json.loads(path.read_text())
    out = tmp_path / f"{len(list(tmp_path.glob('*.json')))}.json"
    out.write_text(json.dumps({**raw, "created": created, "mount": {**raw["mount"], "path": mount}}))
    return out


def test_compare_labels_are_short_and_distinct(tmp_path: Path) -> None:
    """Without --name: each result by its mount's last folder and file system, not its whole scratch path; two on
    other mounts with the same last folder by their paths shortened in the middle; two on the same mount by date."""
    long_a = "/var/tmp/iobench-scratch-of-someone/testbed-sshfs/mnt"
    a = _on(SSHFS, tmp_path, long_a, "2026-11-30T18:08:19+0000")
    b = _on(LOCAL, tmp_path, "/", "2026-11-30T18:07:34+0000")
    proc = iobench("compare", str(a), str(b), "--json", "-", cwd=tmp_path, check=True)
    got = [s["label"] for s in json.loads(proc.stdout)["systems"]]
    assert got == ["mnt (fuse.sshfs)", "/ (ext4)"]
    c = _on(SSHFS, tmp_path, "/srv/other-scratch/nfs/mnt", "2026-11-30T18:08:19+0000")
    got = [s["label"] for s in json.loads(iobench("compare", str(a), str(c), "--json", "-", cwd=tmp_path,
                                                  check=True).stdout)["systems"]]
    assert got == ["/var/tmp/io…ed-sshfs/mnt (fuse.sshfs)", "/srv/other-…atch/nfs/mnt (fuse.sshfs)"], got
    assert all(len(x.split(" (")[0]) <= 24 for x in got)
    d = _on(SSHFS, tmp_path, long_a, "2026-12-01T09:30:00+0000")
    proc = iobench("compare", str(a), str(d), cwd=tmp_path, check=True)
    heads = next(line for line in proc.stdout.splitlines() if "metric" in line and "┃" in line)
    assert [c.strip() for c in heads.split("┃")[2:4]] == ["mnt (fuse.sshfs), 2026-11-30 18:08",
                                                            "mnt (fuse.sshfs), 2026-12-01 09:30"], heads
