import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import make_dataset, needs_root
from PIL import Image

from iobench import dataset, store
from iobench.dataset import MARKER, GenSpec, generate, scan
from iobench.dataset.paths import MANIFEST
from iobench.dataset.sizes import parse_dist
from iobench.errors import UserError


def test_every_file_decodes_and_matches_the_manifest(small_dataset):
    m = small_dataset
    assert len(m) == 300
    for path, size in zip(m.paths, m.sizes.tolist(), strict=True):
        assert os.path.getsize(path) == size
        with Image.open(path) as im:
            im.load()
            assert im.format == "JPEG"
    # ImageNet layout: train/<class>/<file>.JPEG, 4 class folders
    classes = {Path(p).parent.name for p in m.paths}
    assert len(classes) == 4 and all(Path(p).parent.parent.name == "train" for p in m.paths)
    assert json.loads((m.root / MARKER).read_text())["status"] == "complete"


def test_rerun_reuses_without_writing(tmp_path):
    spec = GenSpec(50, parse_dist("fixed:20kB"), 2, 1)
    first = generate(store.open(tmp_path), spec)
    mtimes = [os.stat(p).st_mtime_ns for p in first.manifest.paths]
    again = generate(store.open(tmp_path), spec)
    assert again.reused and again.written == 0
    assert [os.stat(p).st_mtime_ns for p in again.manifest.paths] == mtimes


def test_half_written_dataset_is_completed_not_trusted(tmp_path):
    spec = GenSpec(80, parse_dist("uniform:4KiB-64KiB"), 2, 2)
    m = generate(store.open(tmp_path), spec).manifest
    # an interrupted gen: marker still "incomplete", some files missing, one cut short
    marker = json.loads((m.root / MARKER).read_text())
    (m.root / MARKER).write_text(json.dumps({**marker, "status": "incomplete"}))
    for p in m.paths[40:]:
        os.unlink(p)
    with open(m.paths[3], "r+b") as f:
        f.truncate(100)
    rep = generate(store.open(tmp_path), spec)
    assert not rep.reused and rep.written == 41
    assert [os.path.getsize(p) for p in rep.manifest.paths] == m.sizes.tolist()
    Image.open(m.paths[3]).load()


def test_complete_marker_with_missing_files_fails_the_cheap_check(tmp_path):
    spec = GenSpec(30, parse_dist("fixed:8kB"), 1, 0)
    m = generate(store.open(tmp_path), spec).manifest
    for p in m.paths:  # all gone: any sample of the cheap check notices
        os.unlink(p)
    rep = generate(store.open(tmp_path), spec)
    assert rep.written == 30 and all(os.path.exists(p) for p in m.paths)


def test_folder_not_made_by_iobench_is_left_alone(tmp_path):
    spec = GenSpec(10, parse_dist("fixed:8kB"), 1, 0)
    foreign = tmp_path / dataset.DATA_ROOT / spec.name
    foreign.mkdir(parents=True)
    (foreign / "precious.txt").write_text("not yours")
    with pytest.raises(UserError, match="not made by iobench"):
        generate(store.open(tmp_path), spec)
    assert (foreign / "precious.txt").read_text() == "not yours"


def test_not_enough_space_is_refused_before_writing(tmp_path, monkeypatch):
    spec = GenSpec(10, parse_dist("fixed:100kB"), 1, 0)
    monkeypatch.setattr(store.folder.shutil, "disk_usage", lambda p: SimpleNamespace(free=500_000))
    with pytest.raises(UserError, match="not enough space"):
        generate(store.open(tmp_path), spec)
    assert not (tmp_path / dataset.DATA_ROOT / spec.name / MARKER).exists()


@needs_root
def test_no_space_mid_write_stops_cleanly_and_resumes(tmp_path, monkeypatch):
    """A real ENOSPC from a 2 MB tmpfs (the free-space check is fooled to get there)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        monkeypatch.setattr(store.folder.shutil, "disk_usage", lambda p: SimpleNamespace(free=10**12))
        spec = GenSpec(40, parse_dist("fixed:100kB"), 1, 0)
        with pytest.raises(UserError, match="no space left"):
            generate(store.open(mnt), spec, threads=1)
        folder = mnt / dataset.DATA_ROOT / spec.name
        marker = json.loads((folder / MARKER).read_text())
        assert marker["status"] == "incomplete"  # never trusted as complete
        assert len((folder / MANIFEST).read_text().splitlines()) == 41  # header + every file
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_scan_foreign_tree_like_imagefolder(tmp_path, small_dataset):
    root = tmp_path / "imgs"
    for i, p in enumerate(small_dataset.paths[:12]):
        d = root / f"class{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:03d}.jpg").write_bytes(Path(p).read_bytes())
    (root / "class0" / "notes.txt").write_text("ignored: not an image extension")
    m = scan(root)
    assert len(m) == 12 and m.total_bytes == sum(small_dataset.sizes[:12].tolist())
    assert m.paths == sorted(m.paths)  # ImageFolder order: class folders, then files, sorted


def test_scan_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        scan(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no images"):
        scan(tmp_path / "empty")
    bad = tmp_path / "fake"
    bad.mkdir()
    (bad / "a.jpg").write_bytes(b"this is text, not a JPEG")
    with pytest.raises(UserError, match="1 of the 1 files under .* is not an image .*a.jpg .first bytes b.this.."):
        scan(bad)


def test_default_classes_follow_imagenet_folder_size():
    assert dataset.default_classes(1_281_167) == 1000
    assert dataset.default_classes(10_000) == 8
    assert dataset.default_classes(5) == 1


def test_sizes_within_one_percent_of_the_drawn_distribution(tmp_path):
    m = make_dataset(tmp_path, 200, "imagenet", classes=2, seed=5)
    planned = dataset.plan(GenSpec(200, parse_dist("imagenet"), 2, 5))[1]
    assert np.array_equal(m.sizes, planned)
    on_disk = np.array([os.path.getsize(p) for p in m.paths])
    assert np.all(np.abs(on_disk - planned) <= planned * 0.01)
