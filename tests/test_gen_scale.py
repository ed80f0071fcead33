"""`gen` at scale: ImageNet-sized class folders at any dataset size, writers and checkers that take a folder each,
the reuse check's two ways of stat-ing, and an interrupted gen completed by the next. No timing here: speed
figures come from scripts/bench (`--gen-only --gen-files 1000000 --gen-size 4KiB`)."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from iobench import dataset, store
from iobench.dataset import (
    DATA_ROOT,
    MARKER,
    GenSpec,
    default_classes,
    folder,
    gen,
    generate,
    plan,
)
from iobench.dataset.folder import inspect_files
from iobench.dataset.gen import FILES_PER_CLASS
from iobench.dataset.jpeg import MAX_SEGMENT_PAYLOAD, JpegPool
from iobench.dataset.sizes import parse_dist
from iobench.errors import UserError
from iobench.safefs import open_tree


def _folder(mount: Path, spec: GenSpec) -> Path:
    return mount / DATA_ROOT / spec.name


def _sizes_on_disk(folder: Path, rel: list[str]) -> np.ndarray:
    return np.array([os.lstat(folder / p).st_size if os.path.lexists(folder / p) else -1 for p in rel])


@pytest.mark.parametrize("files", [1, 5, 1_921, 1_922, 10_000, 1_281_167, 2_000_000, 10_000_000, 123_456_789])
def test_default_classes_keep_imagenet_folder_sizes_with_no_cap(files):
    classes = default_classes(files)
    assert classes >= 1
    per_class = math.ceil(files / classes)  # what plan() puts in a folder
    assert per_class <= 1.5 * FILES_PER_CLASS + 1
    if files >= FILES_PER_CLASS:
        assert per_class >= FILES_PER_CLASS / 1.5


def test_default_classes_of_imagenet_and_beyond():
    assert default_classes(1_281_167) == 1000  # ImageNet-1k itself
    assert default_classes(10_000_000) == 7806  # no longer capped at 1,000 (10,000 files a folder)
    assert default_classes(2_000_000) == 1561


def test_class_count_names_the_dataset_folder():
    # an explicit --classes still names (and so finds) the folder a dataset made earlier got
    dist = parse_dist("imagenet")
    assert GenSpec(2_000_000, dist, 1000, 0).name == "imagenet-2000000f-1000c-s0"
    assert GenSpec(2_000_000, dist, default_classes(2_000_000), 0).name == "imagenet-2000000f-1561c-s0"


def test_plan_bounds_every_folder():
    spec = GenSpec(200_000, parse_dist("fixed:4KiB"), default_classes(200_000), 0)
    rel, sizes = plan(spec)
    per_folder: dict[str, int] = {}
    for p in rel:
        d = p.rpartition("/")[0]
        per_folder[d] = per_folder.get(d, 0) + 1
    assert len(per_folder) == spec.classes == 156
    assert max(per_folder.values()) <= 1.5 * FILES_PER_CLASS
    assert len(sizes) == 200_000 and (sizes == 4096).all()


def test_generated_folders_are_bounded_and_complete(tmp_path):
    spec = GenSpec(3_000, parse_dist("fixed:2kB"), default_classes(3_000), 0)
    seen: list[int] = []
    rep = generate(store.open(tmp_path), spec, threads=3, progress=lambda n, b: seen.append(n))
    assert rep.written == 3_000 and rep.written_bytes == 6_000_000
    train = _folder(tmp_path, spec) / "train"
    counts = sorted(len(os.listdir(train / d)) for d in os.listdir(train))
    assert len(counts) == spec.classes == 2 and counts == [1_500, 1_500]
    assert seen == sorted(seen) and seen[-1] == 3_000  # progress only goes up, and ends at every file


def test_runs_take_whole_folders_and_cover_every_file_once():
    rel = [f"train/c{c}/f{i}" for c in range(50) for i in range(100)]
    ids = list(range(len(rel)))
    items = folder._runs(rel, ids, threads=4)
    assert len(items) == 50  # 50 folders keep 4 threads busy: a folder each
    covered = [k for _, lo, hi in items for k in range(lo, hi)]
    assert sorted(covered) == ids
    assert all(rel[ids[k]].startswith(d + "/") for d, lo, hi in items for k in range(lo, hi))


def test_runs_cut_few_folders_and_deal_the_pieces_across_them():
    rel = [f"train/c{c}/f{i}" for c in range(2) for i in range(1_000)]
    todo = list(range(0, 2_000, 2))  # a resumed gen: every other file left to write
    items = folder._runs(rel, todo, threads=8)
    assert sorted(k for _, lo, hi in items for k in range(lo, hi)) == list(range(len(todo)))
    assert all(hi - lo >= folder.CHUNK or hi == len(todo) or todo[hi] // 1_000 != todo[lo] // 1_000
               for _, lo, hi in items)
    assert len(items) >= 8  # work for every thread
    # consecutive items (taken at the same time by different threads) are in different folders
    assert all(a[0] != b[0] for a, b in zip(items, items[1:], strict=False))


def test_default_threads_by_file_system(tmp_path, monkeypatch):
    from iobench.host import mounts

    local = dataset.default_threads(tmp_path)
    assert 2 <= local <= gen.LOCAL_THREADS
    assert local == min(gen.LOCAL_THREADS, max(2, 2 * int(mounts.usable_cpus())))
    monkeypatch.setattr(gen, "_local", lambda path: False)
    assert dataset.default_threads(tmp_path) == gen.NETWORK_THREADS


@pytest.mark.parametrize("listing", [False, True])
def test_reuse_check_finds_the_same_damage_listing_or_not(tmp_path, monkeypatch, listing):
    spec = GenSpec(600, parse_dist("fixed:3kB"), 3, 0)
    generate(store.open(tmp_path), spec, threads=2)
    folder = _folder(tmp_path, spec)
    rel, sizes = plan(spec)
    os.unlink(folder / rel[5])
    os.truncate(folder / rel[250], 10)
    (folder / rel[599]).unlink()
    monkeypatch.setattr(dataset.folder, "_local", lambda path: not listing)  # each folder listed off a local disk
    fd = open_tree(tmp_path, (DATA_ROOT, spec.name), create=False)
    assert fd is not None
    try:
        found = inspect_files(fd, folder, rel, threads=3)
        expected = sizes.copy()
        expected[[5, 599]] = -1
        expected[250] = 10
        assert (found == expected).all()
        assert (found == _sizes_on_disk(folder, rel)).all()
        # a link where a file should be is named, never followed
        (folder / rel[7]).unlink()
        os.symlink("/etc/passwd", folder / rel[7])
        with pytest.raises(UserError, match="symbolic link"):
            inspect_files(fd, folder, rel, threads=3)
    finally:
        os.close(fd)


def test_a_missing_class_folder_is_made_again_by_the_writers(tmp_path):
    spec = GenSpec(400, parse_dist("fixed:2kB"), 4, 0)
    generate(store.open(tmp_path), spec, threads=2)
    folder = _folder(tmp_path, spec)
    victim = folder / "train" / "n00000002"
    for f in os.listdir(victim):
        os.unlink(victim / f)
    os.rmdir(victim)
    warned: list[str] = []
    rep = generate(store.open(tmp_path), spec, threads=2, warn=warned.append)
    assert rep.written == 100 and len(warned) == 1 and "missing" in warned[0]
    rel, sizes = plan(spec)
    assert (_sizes_on_disk(folder, rel) == sizes).all()


def test_one_comment_segment_and_several_make_the_same_kind_of_file():
    # the padding's fast path (one COM segment) ends where a second segment begins: both sides exact and decodable
    pool = JpegPool.build(200_000, seed=1)
    base = len(pool.images[0])
    for pad in (MAX_SEGMENT_PAYLOAD + 3, MAX_SEGMENT_PAYLOAD + 4, MAX_SEGMENT_PAYLOAD + 5):
        size = base + pad
        data = b"".join(bytes(p) for p in pool.parts(9, size, 0))
        assert len(data) == size and data[:2] == b"\xff\xd8" and b"iobench" in data[:24]
        with Image.open(io.BytesIO(data)) as im:
            im.load()


def test_an_interrupted_gen_is_completed_by_the_next(tmp_path):
    """Ctrl-C (SIGINT) in the middle of writing: exit 130, the marker says incomplete; the next gen writes the rest
    and every file then has its size."""
    args = [sys.executable, "-m", "iobench.cli", "gen", "--mount", str(tmp_path), "--files", "30000",
            "--size-dist", "fixed:2kB", "--threads", "2", "--quiet"]
    spec = GenSpec(30_000, parse_dist("fixed:2kB"), default_classes(30_000), 0)
    first_class = _folder(tmp_path, spec) / "train" / "n00000000"
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            with_files = first_class.is_dir() and len(os.listdir(first_class)) > 0
            if with_files:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    folder = _folder(tmp_path, spec)
    assert json.loads((folder / MARKER).read_text())["status"] == "incomplete"
    rel, sizes = plan(spec)
    assert (_sizes_on_disk(folder, rel) != sizes).any()  # stopped before the end

    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads((folder / MARKER).read_text())["status"] == "complete"
    assert (_sizes_on_disk(folder, rel) == sizes).all()
