"""The manifest at any size (iobench/dataset/paths.py): manifest.tsv parsed with numpy gives exactly what a line-by-line
reading gives, every malformed line is named as before, and manifest.index (memory-mapped) is derived beside it,
used while it matches, and rebuilt when manifest.tsv changes."""

from __future__ import annotations

import mmap
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import make_dataset, needs_root

from iobench import store
from iobench.dataset import Manifest
from iobench.dataset import paths as mf
from iobench.dataset.folder import parse_manifest
from iobench.dataset.paths import INDEX, MANIFEST, PathTable, parse_tsv
from iobench.errors import UserError


def reference(text: str) -> tuple[list[str], list[int]]:
    """manifest.tsv read line by line, as the format says (no validation: the inputs here are valid)."""
    rel, sizes = [], []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for line in lines:
        if not line.startswith("#"):
            p, _, size = line.rpartition("\t")
            rel.append(p)
            sizes.append(int(size))
    return rel, sizes


def parsed(data: bytes) -> tuple[list[str], list[int]]:
    blocks, offsets, sizes = parse_tsv(data, Path("m.tsv"))
    table = PathTable(b"", b"".join(blocks), offsets)
    return [table.rel(i) for i in range(len(table))], sizes.tolist()


TRICKY = ("# a comment\n"
          "train/a b/x 1.JPEG\t1\n"          # spaces
          "train/ünï/çödé.jpg\t123456789012345678\n"  # UTF-8, 18 digits
          "#train/not/this.JPEG\t5\n"
          "a\tb/with\ttabs.png\t7\n"          # tabs in the path: the size is after the last tab
          ".hidden/..x/x..\t0\n"               # dots that are not "." or ".." components
          "last/without/newline.JPEG\t42")


@pytest.mark.parametrize("chunk", [1 << 25, 7, 40])
def test_the_parse_gives_what_a_line_by_line_reading_gives(monkeypatch, tmp_path, chunk):
    monkeypatch.setattr(mf, "CHUNK_BYTES", chunk)  # small chunks: lines cut across chunk boundaries
    assert parsed(TRICKY.encode()) == reference(TRICKY)
    m = make_dataset(tmp_path, 300, classes=3)
    text = (m.root / MANIFEST).read_text()
    assert parsed(text.encode()) == reference(text)
    assert parsed(b"") == ([], [])


@pytest.mark.parametrize("line, says", [
    ("train/x.JPEG 12", "line 3: no tab between path and size"),
    ("", "line 3: no tab between path and size"),
    ("train/x.JPEG\t12a", "line 3: size '12a' is not a whole number of bytes"),
    ("train/x.JPEG\t", "line 3: size '' is not a whole number of bytes"),
    ("train/x.JPEG\t1234567890123456789", "is not a whole number of bytes"),
    ("train/x.JPEG\t-5", "is not a whole number of bytes"),
    ("/etc/passwd\t5", "line 3: '/etc/passwd' is not a relative path inside the dataset"),
    ("train/../../x\t5", "line 3: 'train/../../x' is not a relative path"),
    ("../x\t5", "is not a relative path"),
    ("train/..\t5", "is not a relative path"),
    ("./x\t5", "is not a relative path"),
    ("..\t5", "is not a relative path"),
    ("train//x\t5", "is not a relative path"),
    ("train/\t5", "is not a relative path"),
    ("\t5", "is not a relative path"),
    ("train/a\0b\t5", "is not a relative path"),
])
@pytest.mark.parametrize("chunk", [1 << 25, 16])
def test_each_malformed_line_is_named(monkeypatch, line, says, chunk):
    monkeypatch.setattr(mf, "CHUNK_BYTES", chunk)
    data = f"# iobench manifest v1\ntrain/ok.JPEG\t10\n{line}\ntrain/ok2.JPEG\t11\n".encode()
    with pytest.raises(UserError) as info:
        parse_tsv(data, Path("/d/manifest.tsv"))
    assert str(info.value).startswith("/d/manifest.tsv ") and says in str(info.value), str(info.value)


def test_a_manifest_that_is_not_utf8_is_named():
    with pytest.raises(UserError, match="not UTF-8 text"):
        parse_tsv(b"train/\xff.JPEG\t5\n", Path("m.tsv"))


def test_the_index_gives_exactly_the_paths_and_sizes_of_manifest_tsv(tmp_path):
    made = make_dataset(tmp_path, 500, classes=4)
    root = made.root
    (root / INDEX).unlink(missing_ok=True)
    rel, sizes = parse_manifest(root / MANIFEST)
    first = Manifest.load(root)  # derives manifest.index
    assert (root / INDEX).is_file()
    again = Manifest.load(root)  # maps it
    assert isinstance(again.paths._block, mmap.mmap)
    for m in (first, again):
        assert list(m.paths) == [os.path.join(root, p) for p in rel] == list(made.paths)
        assert np.array_equal(m.sizes, sizes) and m.sizes.dtype == np.int64
        assert [m.paths.rel(i) for i in range(len(m))] == rel
        assert m.paths.raw(7) == os.fsencode(os.path.join(root, rel[7])) and m.paths[-1] == m.paths[len(m) - 1]


def test_a_stale_index_is_rebuilt(tmp_path):
    root = make_dataset(tmp_path, 60, "fixed:8KiB", classes=2).root
    Manifest.load(root)
    stamp = (root / INDEX).stat().st_mtime_ns
    lines = (root / MANIFEST).read_text().splitlines(keepends=True)
    (root / MANIFEST).write_text("".join(lines[:-10]).replace("\t8192", "\t8000"))  # edited: fewer, other sizes
    m = Manifest.load(root)
    assert len(m) == 50 and set(m.sizes.tolist()) == {8000}
    assert (root / INDEX).stat().st_mtime_ns != stamp
    assert isinstance(Manifest.load(root).paths._block, mmap.mmap)


def test_an_index_that_is_not_one_is_derived_again(tmp_path):
    root = make_dataset(tmp_path, 60, "fixed:8KiB", classes=2).root
    Manifest.load(root)
    (root / INDEX).write_bytes(b"garbage" * 100)
    assert len(Manifest.load(root)) == 60
    link = root / INDEX
    link.unlink()
    link.symlink_to("/etc/passwd")  # a link where iobench's file should be: named, never followed nor removed
    with pytest.raises(UserError, match="manifest.index is a symbolic link"):
        Manifest.load(root)
    assert link.is_symlink()


@needs_root
def test_a_read_only_dataset_keeps_its_index_in_memory(tmp_path):
    (tmp_path / "src").mkdir()
    root = make_dataset(tmp_path / "src", 60, "fixed:8KiB", classes=2).root
    (root / INDEX).unlink(missing_ok=True)
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "--bind", str(root), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        m = Manifest.load(ro)
        assert len(m) == 60 and not (ro / INDEX).exists() and m.paths[0].startswith(str(ro) + "/")
        assert Path(m.paths[5]).stat().st_size == 8192
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_a_table_of_paths_outside_the_root_keeps_them_whole(tmp_path):
    t = PathTable.of(tmp_path, [str(tmp_path / "a"), "/elsewhere/b"])
    assert list(t) == [str(tmp_path / "a"), "/elsewhere/b"] and t.prefix == b""
    t = PathTable.of(tmp_path, [str(tmp_path / "a"), str(tmp_path / "c/d")])
    assert t.prefix == os.fsencode(str(tmp_path) + "/") and t.rel(1) == "c/d" and t[0:2] == list(t)


def test_an_inode_number_over_2_to_the_63_is_kept(tmp_path):
    """GlusterFS's FUSE inode numbers use all 64 bits: the index records them (unsigned)."""
    from types import SimpleNamespace

    from iobench.dataset.paths import index_bytes, map_index

    tsv = SimpleNamespace(st_size=31, st_mtime_ns=1_700_000_000_000_000_000, st_ino=2**64 - 3)
    blocks, offsets, sizes = parse_tsv(b"train/a.JPEG\t5\ntrain/bb.JPEG\t7\n", Path("m.tsv"))
    (tmp_path / INDEX).write_bytes(b"".join(index_bytes(blocks, offsets, sizes, tsv)))  # type: ignore[arg-type]
    fd = os.open(tmp_path / INDEX, os.O_RDONLY)
    try:
        table, got = map_index(fd, tsv, tmp_path)  # type: ignore[arg-type, misc]
        assert list(table) == [f"{tmp_path}/train/a.JPEG", f"{tmp_path}/train/bb.JPEG"] and got.tolist() == [5, 7]
        assert map_index(fd, SimpleNamespace(st_size=31, st_mtime_ns=tsv.st_mtime_ns, st_ino=5), tmp_path) is None
    finally:
        os.close(fd)


# -- manifest.index is trusted no further than manifest.tsv's rules -------------------------
def _forge_index(root: Path, rel: list[str], sizes: np.ndarray, offsets: np.ndarray | None = None) -> None:
    """Write a manifest.index of these entries whose header matches manifest.tsv, as a crafted one would."""
    enc = [os.fsencode(r) for r in rel]
    cut = np.concatenate(([0], np.cumsum([len(r) for r in enc]))).astype(np.int64)
    data = b"".join(mf.index_bytes([b"".join(enc)], cut if offsets is None else offsets, np.asarray(sizes),
                                   (root / MANIFEST).stat()))
    fd = os.open(root / INDEX, os.O_WRONLY | os.O_TRUNC)  # in place: manifest.tsv's stat (in the header) unchanged
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _entries(root: Path) -> tuple[list[str], np.ndarray]:
    return parse_manifest(root / MANIFEST)


@pytest.mark.parametrize("forgery", ["escape", "absolute", "offsets", "size"])
def test_an_index_breaking_a_manifest_rule_is_derived_again(tmp_path, forgery):
    root = make_dataset(tmp_path, 40, "fixed:8KiB", classes=2).root
    Manifest.load(root)
    rel, sizes = _entries(root)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"v" * 8192)
    bad_rel, bad_sizes, offsets = list(rel), sizes.copy(), None
    if forgery == "escape":
        bad_rel[0] = "../../../victim.txt"
    elif forgery == "absolute":
        bad_rel[3] = str(victim)
    elif forgery == "offsets":
        offsets = np.concatenate(([0], np.cumsum([len(r) for r in rel]))).astype(np.int64)
        offsets[5] = offsets[7] + 3  # cuts paths out of other paths' bytes
    else:
        bad_sizes[2] = 10**18  # over manifest.tsv's 18 digits
    _forge_index(root, bad_rel, bad_sizes, offsets)
    m = Manifest.load(root)
    assert [m.paths.rel(i) for i in range(len(m))] == rel and np.array_equal(m.sizes, sizes)
    assert all(p.startswith(str(root) + "/") for p in m.paths)
    again = Manifest.load(root)  # the index was written again, right, and is mapped from now on
    assert isinstance(again.paths._block, mmap.mmap) and list(again.paths) == list(m.paths)


@pytest.mark.parametrize("forgery", ["ones", "huge", "swapped"])
def test_a_reused_dataset_never_takes_sizes_or_paths_its_manifest_does_not_hold(tmp_path, forgery):
    """Sizes of 1 (a wrong dataset.bytes, silently), 10^15 (a MemoryError) or two paths swapped obey every rule: a
    dataset iobench made is checked against manifest.tsv and its files, and its index must hold the same."""
    from iobench.dataset import GenSpec, generate
    from iobench.dataset.sizes import parse_dist

    spec = GenSpec(40, parse_dist("fixed:8KiB"), 2, 0)
    root = generate(store.open(tmp_path), spec, threads=2).manifest.root
    rel, sizes = _entries(root)
    bad_rel, bad_sizes = list(rel), sizes.copy()
    if forgery == "ones":
        bad_sizes[:] = 1
    elif forgery == "huge":
        bad_sizes[0] = 10**15
    else:
        bad_rel[0], bad_rel[1] = rel[1], rel[0]
    _forge_index(root, bad_rel, bad_sizes)
    m = generate(store.open(tmp_path), spec, threads=2).manifest
    assert [m.paths.rel(i) for i in range(len(m))] == rel and np.array_equal(m.sizes, sizes)
    assert m.total_bytes == 40 * 8192


def test_the_index_rules_are_manifest_tsvs(tmp_path):
    """index_problem accepts exactly the paths parse_tsv accepts, over many random short paths of the characters
    that matter (dots, slashes, '#', tabs, newlines, NUL, a non-ASCII letter)."""
    import random

    rng = random.Random(25)
    for alphabet in ("ab./#", "./\t#", "a.\u00e9/", "./\0a", "./\n"):
        for _ in range(3000):
            paths = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 3))]
            try:
                _, _, got = parse_tsv("".join(f"{p}\t1\n" for p in paths).encode(), Path("m.tsv"))
                tsv_ok = len(got) == len(paths)  # a '#' line is a comment: that path is not in the manifest
            except UserError:
                tsv_ok = False
            table = PathTable.relative("", paths)
            block = b"HEAD" + table.block()
            problem = mf.index_problem(block, 4, table.offsets, np.ones(len(paths), dtype=np.int64))
            assert tsv_ok == (problem is None), (paths, problem)
