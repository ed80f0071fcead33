"""`run --dataset TREE` reads nothing outside the tree unless asked: a real link to a file outside and a real link
to a folder outside are skipped and counted (--follow-links reads them, counted too), links inside the tree are
followed; and every file the scan lists has its first bytes checked to be an image's, on a cached listing too."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import iobench

from iobench.dataset.imagefolder import scan_tree
from iobench.errors import UserError

JPEG = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 16  # 4 KiB: the scan checks the first bytes only
RUN = ("--engine", "threads", "--threads", "1", "--no-fio", "--no-metadata", "--cache", "warm")


def _backdate(path: Path) -> None:
    """An atime older than the mtime: relatime then moves it on the next read (what a read of it would show)."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_mtime_ns - 3600 * 10**9, st.st_mtime_ns))


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    """TREE/a/ with 30 images, TREE/a/evil.jpg -> OUTSIDE/secret.jpg, TREE/b -> OUTSIDE/dir/ (5 images), and
    TREE/same -> a (a link inside the tree). Returns (tree, the secret file, the outside folder)."""
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / "a").mkdir(parents=True)
    (outside / "dir").mkdir(parents=True)
    for i in range(30):
        (tree / "a" / f"{i:02d}.jpg").write_bytes(JPEG)
    secret = outside / "secret.jpg"
    secret.write_bytes(JPEG + b"secret")
    for i in range(5):
        (outside / "dir" / f"{i}.jpg").write_bytes(JPEG)
    os.symlink("../../outside/secret.jpg", tree / "a" / "evil.jpg")  # relative, as a careless tree has them
    os.symlink(outside / "dir", tree / "b")
    os.symlink("a", tree / "same")
    for p in (secret, *sorted((outside / "dir").iterdir())):
        _backdate(p)
    return tree, secret, outside


def _state(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file's hash and atime: what a read (or a write) would change."""
    return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), os.stat(p).st_atime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _atimes(folder: Path) -> dict[str, int]:
    return {str(p): os.stat(p).st_atime_ns for p in sorted(folder.rglob("*")) if p.is_file()}


def test_links_out_of_the_tree_are_skipped_counted_and_said(tmp_path: Path) -> None:
    tree, secret, outside = _tree(tmp_path)
    before = _atimes(outside)
    out = tmp_path / "out"
    proc = iobench("run", "--dataset", str(tree), *RUN, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    scanned = next(ln for ln in proc.stderr.splitlines() if ln.startswith("scanned "))
    # evil.jpg and the folder b/, then evil.jpg again through the link same/ -> a/ (each path the walk met)
    assert scanned.endswith("3 links out of the tree skipped (--follow-links reads them)"), scanned
    assert _atimes(outside) == before  # nothing outside was opened: not the header check, not a reader
    r = json.loads((out / "result.json").read_text())
    assert (r["dataset"]["files"], r["dataset"]["bytes"]) == (60, 60 * len(JPEG))  # a/ and same/ only
    assert (r["dataset"]["links_skipped"], r["dataset"]["links_followed"]) == (3, 0)
    assert r["settings"]["follow_links"] is False
    assert ("Dataset: 3 links out of the tree skipped, not read (--follow-links reads them); the figures are of "
            "the 60 files read.") in r["verdict"]["evidence"]


def test_follow_links_reads_through_them_and_counts_them(tmp_path: Path) -> None:
    tree, secret, outside = _tree(tmp_path)
    out = tmp_path / "out"
    proc = iobench("run", "--dataset", str(tree), *RUN, "--follow-links", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    r = json.loads((out / "result.json").read_text())
    assert r["dataset"]["files"] == 60 + 2 + 5  # + evil.jpg twice, + b/'s 5
    assert r["dataset"]["bytes"] == 67 * len(JPEG) + 2 * len(b"secret")
    assert (r["dataset"]["links_skipped"], r["dataset"]["links_followed"]) == (0, 3)
    assert any(e.startswith("Dataset: 3 links out of the tree followed and read (--follow-links)")
               for e in r["verdict"]["evidence"])
    assert os.stat(secret).st_atime_ns > os.stat(secret).st_mtime_ns - 3600 * 10**9  # it was read, as asked


def test_a_link_to_a_system_file_is_never_read_as_a_sample(tmp_path: Path) -> None:
    """TREE/a/passwd.jpg -> a text file outside (a stand-in for /etc/passwd, whose atime is the host's): skipped by
    default; with --follow-links, read and refused in one line as not an image."""
    tree, secret, outside = _tree(tmp_path)
    passwd = outside / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    _backdate(passwd)
    os.symlink(passwd, tree / "a" / "passwd.jpg")
    before = _state(outside)
    proc = iobench("run", "--dataset", str(tree), *RUN, "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert _state(outside) == before
    assert json.loads((tmp_path / "out" / "result.json").read_text())["dataset"]["links_skipped"] == 5

    proc = iobench("run", "--dataset", str(tree), *RUN, "--follow-links", "--out", str(tmp_path / "out2"))
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("iobench:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"iobench: error: 2 of the 69 files under {tree} are not images (their first bytes "
                               f"checked): {tree}/a/passwd.jpg (first bytes b'root'); {tree}/same/passwd.jpg"), lines
    assert not (tmp_path / "out2").exists()


def test_follow_links_without_a_dataset_is_refused(tmp_path: Path) -> None:
    proc = iobench("run", "--mount", str(tmp_path), "--follow-links")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("iobench: error: --follow-links applies to a tree read with --dataset: a dataset "
                                   "iobench made holds no links")
    assert list(tmp_path.iterdir()) == []


def _settle(root: Path) -> None:
    old = time.time_ns() - 3600 * 10**9
    for d, _, _ in os.walk(root):
        os.utime(d, ns=(old, old))


def test_every_file_is_checked_not_a_sample_and_on_a_cached_listing_too(tmp_path: Path) -> None:
    """One non-image among 2,000 (a 32-file sample misses it 98% of the time): named at the walk; then a file
    rewritten in place at the same size (its folder's mtime kept), named on the cached listing."""
    root = tmp_path / "tree"
    for c in range(10):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(200):
            (root / f"c{c}" / f"{i:03d}.jpg").write_bytes(JPEG)
    (root / "c7" / "123.jpg").write_bytes(b"GIF89a" + JPEG[6:])  # a GIF: not one of the formats read
    _settle(root)
    root = root.resolve()
    with pytest.raises(UserError, match=r"^1 of the 2,000 files under .* is not an image .*c7/123.jpg "
                                        r"\(first bytes b'GIF8'\)"):
        scan_tree(root, threads=1)
    (root / "c7" / "123.jpg").write_bytes(JPEG)
    _settle(root)
    said: list[str] = []
    assert len(scan_tree(root, threads=4, say=said.append)) == 2000 and said[-1].startswith("scanned 2,000 files")
    with open(root / "c3" / "050.jpg", "r+b") as f:  # in place: no folder's mtime moves, the size stays
        f.write(b"\0\0\0\0")
    with pytest.raises(UserError, match=r"^1 of the 2,000 files .*/c3/050.jpg \(first bytes b'\\x00\\x00"):
        scan_tree(root, threads=4, say=said.append)


def test_a_cached_listing_is_used_only_with_the_same_links_setting(tmp_path: Path) -> None:
    tree, secret, outside = _tree(tmp_path)
    _settle(tmp_path)  # the folders outside too: the walk records those it enters through a link
    tree = tree.resolve()
    said: list[str] = []
    assert len(scan_tree(tree, threads=1, say=said.append)) == 60
    assert len(scan_tree(tree, threads=1, say=said.append, follow_links=True)) == 67
    assert said[-1].startswith("scanned 67 files")  # not the listing cached without the links
    again = scan_tree(tree, threads=1, say=said.append, follow_links=True)
    assert said[-1].startswith("using the cached listing") and said[-1].endswith("3 links out of the tree followed")
    assert (len(again), again.links_followed, again.links_skipped) == (67, 3, 0)
    shutil.rmtree(outside / "dir")  # a folder reached through a link changed: seen as the walk saw it
    assert len(scan_tree(tree, threads=1, say=said.append, follow_links=True)) == 62
