"""Scanning a tree iobench did not make (iobench/dataset/imagefolder.py): ImageFolder's order whatever the thread
timing, link loops skipped, progress, and the cached listing outside the tree (used while no folder changed, rebuilt
when one did)."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from iobench.dataset import imagefolder as scanning
from iobench.dataset import scan as dataset_scan
from iobench.dataset.folder import parse_manifest
from iobench.dataset.imagefolder import (
    Links,
    Walk,
    _is_image,
    _sorted_entries,
    _walk_parallel,
    cache_folder,
    image_size,
    scan_tree,
)
from iobench.dataset.paths import MANIFEST

JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 60


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch) -> Path:
    """Every test caches under its own folder, never in the home of whoever runs the tests."""
    home = tmp_path / "cache-home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


def jpeg(path: Path, extra: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(JPEG + b"\0" * extra)


def settle(root: Path) -> None:
    """Backdate every folder's mtime: a tree changed in the last seconds is (rightly) not cached."""
    old = time.time_ns() - 3600 * 10**9
    for d, _, _ in os.walk(root):
        os.utime(d, ns=(old, old))


def imagefolder(root: Path, classes: int = 4, per_class: int = 5) -> Path:
    for c in range(classes):
        for i in range(per_class):
            jpeg(root / f"n{c:04d}" / f"img {i}.JPEG", extra=c + i)
    settle(root)
    return root.resolve()


def nested(root: Path) -> Path:
    """Files and folders interleaved by name, nesting, a big folder, links (one back up), a FIFO and a non-image."""
    for top in ("a", "b", "c"):
        jpeg(root / top / "0.jpg")
        for sub in ("m", "x"):
            for i in range(3):
                jpeg(root / top / sub / f"{i}.png", extra=i)
            jpeg(root / top / sub / "deeper" / "z.jpg")
        jpeg(root / top / "n.jpg")  # sorts between the sub-folders m/ and x/
        jpeg(root / top / "zz.webp")
    for i in range(40):  # more than STAT_CHUNK (set low by the test): stat-ed in chunks by the pool
        jpeg(root / "big" / f"{i:03d}.jpg", extra=i)
    (root / "a" / "m" / "up").symlink_to("../..")  # a loop: never entered
    (root / "b" / "also_c").symlink_to("../c")  # a link to a sibling: followed, as ImageFolder does
    os.mkfifo(root / "c" / "fifo.jpg")  # not a regular file: skipped, never opened
    (root / "c" / "notes.txt").write_text("not an image")
    jpeg(root / "top.jpg")
    return root.resolve()


def _walk_images(root: Path) -> Walk:
    """The oracle: the tree walked on one thread, recursively (ImageFolder's order: depth first, names sorted, links
    followed inside the tree, never into a folder that is its own ancestor)."""
    walk = Walk(Links(str(root)))

    def enter(path: str, st: os.stat_result, ancestors: frozenset) -> None:
        walk.folders.append(path)
        walk.mtimes.append(st.st_mtime_ns)
        for e in _sorted_entries(path):
            if e.is_dir() and walk.links.allow(e):
                sub = e.stat()
                if (sub.st_dev, sub.st_ino) not in ancestors:
                    enter(e.path, sub, ancestors | {(sub.st_dev, sub.st_ino)})
            elif _is_image(e) and walk.links.allow(e):
                walk.sizes.append(image_size(e.path, walk.bad))
                walk.paths.append(e.path)

    top = os.stat(root)
    enter(str(root), top, frozenset({(top.st_dev, top.st_ino)}))
    return walk


def test_parallel_walk_gives_the_sequential_order_whatever_the_timing(tmp_path, monkeypatch):
    root = nested(tmp_path / "tree")
    want = _walk_images(root)
    assert want.paths[:2] == [str(root / "a" / "0.jpg"), str(root / "a" / "m" / "0.png")]
    assert str(root / "b" / "also_c" / "x" / "deeper" / "z.jpg") in want.paths
    assert not any("up" in Path(p).relative_to(root).parts or "fifo" in p for p in want.paths)
    monkeypatch.setattr(scanning, "STAT_CHUNK", 8)
    fast = _walk_parallel(root, 8)
    assert not fast.parallel and fast == want  # a local disk lists faster alone: the pool is never started
    monkeypatch.setattr(scanning, "PROBE_S", 0.0)  # as on a network file system: the pool after the first listing
    monkeypatch.setattr(scanning, "FAST_ENTRY_S", 0.0)
    listing = scanning._sorted_entries
    rng = random.Random(1)

    def jittered(d: str) -> list[os.DirEntry]:
        time.sleep(rng.random() * 0.003)  # folders finish in an order of their own
        return listing(d)

    monkeypatch.setattr(scanning, "_sorted_entries", jittered)
    for threads in (2, 8, 16):
        got = _walk_parallel(root, threads)
        assert got.parallel and got.paths == want.paths and got.sizes == want.sizes
        assert got.folders == want.folders and got.mtimes == want.mtimes
    assert want.sizes[want.paths.index(str(root / "big" / "039.jpg"))] == len(JPEG) + 39


def test_a_link_loop_is_skipped_and_a_scan_ends(tmp_path):
    root = tmp_path / "loops"
    jpeg(root / "a" / "b" / "x.jpg")
    (root / "a" / "b" / "back").symlink_to("..")
    (root / "a" / "top").symlink_to(root)
    (root / "self").symlink_to(".")
    m = dataset_scan(root, threads=4)
    assert list(m.paths) == [str(root.resolve() / "a" / "b" / "x.jpg")]


def test_progress_is_called_with_files_and_folders(tmp_path, monkeypatch):
    root = imagefolder(tmp_path / "tree", classes=3, per_class=4)
    monkeypatch.setattr(scanning, "FAST_ENTRY_S", 0.0)
    for probe in (1.0, 0.0):  # listed alone, and by the pool after the first listing
        monkeypatch.setattr(scanning, "PROBE_S", probe)
        calls: list[tuple[int, int]] = []
        walk = _walk_parallel(root, 4, lambda files, folders, calls=calls: calls.append((files, folders)))
        assert walk.parallel == (probe == 0)
        assert calls and calls[-1] == (12, 4)  # the last call has the totals; the root counts as a folder
        assert all(a <= b for a, b in zip(calls, calls[1:], strict=False))


def test_the_second_scan_uses_the_cache_and_lists_no_folder(tmp_path, monkeypatch, cache_home):
    root = imagefolder(tmp_path / "tree")
    said: list[str] = []
    first = scan_tree(root, threads=4, say=said.append)
    assert said[-1].startswith("scanned 20 files in ")
    assert not any(tmp_path.joinpath("tree").rglob("*.tsv"))  # nothing written into the user's tree
    folder = cache_folder(root)
    assert folder.parent == cache_home / "iobench" / "scans"
    rel, sizes = parse_manifest(folder / MANIFEST)
    assert [str(root / p) for p in rel] == list(first.paths) and sizes.tolist() == first.sizes.tolist()

    def no_listing(path):
        raise AssertionError(f"listed {path}: the cache should have been used")

    monkeypatch.setattr(scanning.os, "scandir", no_listing)
    second = scan_tree(root, threads=4, say=said.append)
    assert said[-1].startswith(f"using the cached listing of {root} (20 files, cached ")
    assert list(second.paths) == list(first.paths) and second.sizes.tolist() == first.sizes.tolist()


@pytest.mark.parametrize("change", ["add a file", "remove a file", "rename a folder"])
def test_the_cache_is_rebuilt_when_a_folder_changed(tmp_path, change):
    root = imagefolder(tmp_path / "tree")
    said: list[str] = []
    scan_tree(root, threads=4, say=said.append)
    if change == "add a file":
        jpeg(root / "n0002" / "new.JPEG")
        want, changed = 21, root / "n0002"
    elif change == "remove a file":
        (root / "n0001" / "img 3.JPEG").unlink()
        want, changed = 19, root / "n0001"
    else:
        (root / "n0003").rename(root / "n0009")
        want, changed = 20, root
    m = scan_tree(root, threads=4, say=said.append)
    assert said[-1].startswith(f"scanned {want} files in ")
    assert f"the cached listing was out of date: {changed} changed" in said[-1]
    assert "not cached: the tree changed in the last seconds" in said[-1]  # its mtime is within the clock's tick
    assert len(m) == want and list(m.paths) == _walk_images(root).paths
    settle(root)
    scan_tree(root, threads=4, say=said.append)
    again = scan_tree(root, threads=4, say=said.append)
    assert said[-1].startswith(f"using the cached listing of {root} ({want} files")
    assert list(again.paths) == list(m.paths)


def test_a_cache_that_cannot_be_written_is_no_error(tmp_path, monkeypatch):
    root = imagefolder(tmp_path / "tree")
    (tmp_path / "file").write_text("in the way")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file" / "cache"))  # even root cannot write there
    said: list[str] = []
    for _ in range(2):
        assert len(scan_tree(root, threads=4, say=said.append)) == 20
        assert said[-1].startswith("scanned 20 files")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    monkeypatch.setenv("XDG_CACHE_HOME", str(ro))
    assert len(scan_tree(root, threads=4, say=said.append)) == 20  # not root: EACCES; root: written


def test_a_link_in_the_cache_is_not_followed(tmp_path):
    root = imagefolder(tmp_path / "tree")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = cache_folder(root)
    folder.parent.mkdir(parents=True)
    folder.symlink_to(elsewhere)
    said: list[str] = []
    assert len(scan_tree(root, threads=4, say=said.append)) == 20 and said[-1].startswith("scanned 20 files")
    assert list(elsewhere.iterdir()) == [] and folder.is_symlink()


def test_a_damaged_cache_is_scanned_again(tmp_path):
    root = imagefolder(tmp_path / "tree")
    said: list[str] = []
    scan_tree(root, threads=4, say=said.append)
    manifest = cache_folder(root) / MANIFEST
    manifest.write_text(manifest.read_text().replace("\t", " ", 1))  # a line without a tab: it does not parse
    assert len(scan_tree(root, threads=4, say=said.append)) == 20 and said[-1].startswith("scanned 20 files")
    assert said[-1].endswith(" s (each file's first bytes checked)")  # not stale, not racy: just no usable cache
    assert len(scan_tree(root, threads=4, say=said.append)) == 20 and said[-1].startswith("using the cached listing")


def test_the_cli_says_which_happened_on_stderr_only(tmp_path, capsys):
    from iobench.session import scan_dataset
    from iobench.ui import UI

    root = imagefolder(tmp_path / "tree", classes=2, per_class=3)
    ui = UI(stdout_free=True)
    assert len(scan_dataset(root, ui)) == 6
    assert len(scan_dataset(root, ui)) == 6
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 2
    assert lines[0].startswith("scanned 6 files in ") and lines[1].startswith(f"using the cached listing of {root}")


@pytest.mark.parametrize("change", ["truncate", "grow"])
def test_a_file_resized_in_place_is_never_served_from_the_cache(tmp_path, change):
    """A file truncated (or appended to) in place keeps its folder's mtime; its cached size must not
    survive into the manifest (dataset.bytes, fio's file sizes). A real tree on the local disk."""
    root = imagefolder(tmp_path / "tree")
    said: list[str] = []
    first = scan_tree(root, threads=4, say=said.append)
    victim = root / "n0002" / "img 3.JPEG"
    before = {d: os.stat(d).st_mtime_ns for d in (root, victim.parent)}
    if change == "truncate":
        os.truncate(victim, 10)
    else:
        with open(victim, "ab") as f:
            f.write(b"\0" * 5000)
    assert {d: os.stat(d).st_mtime_ns for d in before} == before  # no folder tells
    want = first.total_bytes - first.sizes[list(first.paths).index(str(victim))] + victim.stat().st_size
    m = scan_tree(root, threads=4, say=said.append)
    assert said[-1].startswith("scanned 20 files in ")
    assert f"the cached listing was out of date: {victim} changed" in said[-1]
    assert m.total_bytes == want and m.sizes.tolist() == [os.stat(p).st_size for p in m.paths]
    again = scan_tree(root, threads=4, say=said.append)  # cached anew, with the new size
    assert said[-1].startswith("using the cached listing") and again.total_bytes == want
