"""The Store interface on a real folder (store/folder.py): write, list, lock, clean, evict, describe. Real files on
the machine's own file system, no mocks."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from iobench import __version__, store
from iobench.dataset import MARKER
from iobench.dataset.paths import MANIFEST
from iobench.host.cache import resident_fraction
from iobench.host.mounts import mount_of
from iobench.store import Folder, Store
from iobench.store.lock import DatasetBusy

KEYS = [f"train/n{c:08d}/n{c:08d}_{i:08d}.JPEG" for c in range(2) for i in range(3)]
SIZES = np.array([1000 + 4096 * i for i in range(len(KEYS))], dtype=np.int64)


def _marker(status: str = "complete") -> dict:
    return {"iobench": __version__, "params": {"files": len(KEYS), "size_dist": "fixed:1KiB", "classes": 2, "seed": 0},
            "files": len(KEYS), "bytes": int(SIZES.sum()), "status": status}


def _write(where: Store, name: str = "tiny") -> None:
    """A dataset written through the interface alone: samples under their keys, the manifest, the marker."""
    home = where.open(name, create=True)
    assert home is not None
    lengths = SIZES.tolist()
    try:
        with home.writing():
            home.put_marker(_marker("incomplete"))
            home.put_manifest(KEYS, SIZES)
            seen: list[int] = []
            done = home.put_samples(KEYS, list(range(len(KEYS))), lengths,
                                    lambda k: [bytes([k]) * lengths[k]], 2, lambda n, b: seen.append(n),
                                    threading.Event())
            home.sync()
            home.put_marker(_marker())
    finally:
        home.close()
    assert done == (len(KEYS), int(SIZES.sum())) and seen[-1] == len(KEYS)


def test_open_gives_the_folder_store_and_touches_nothing(tmp_path):
    where = store.open(tmp_path / "not-yet")
    assert isinstance(where, Folder) and where.url == str(tmp_path / "not-yet")
    assert not (tmp_path / "not-yet").exists()


def test_write_then_list_keys_sizes_and_the_manifest(tmp_path):
    where = store.open(tmp_path)
    where.check(writable=True)
    assert where.names() == [] and where.open("tiny", create=False) is None
    _write(where)
    folder = tmp_path / "iobench-data" / "tiny"
    assert where.location("tiny") == folder and where.root() == folder.parent
    for key, size, k in zip(KEYS, SIZES.tolist(), range(len(KEYS)), strict=True):
        assert (folder / key).read_bytes() == bytes([k]) * size
    assert (folder / MARKER).is_file() and (folder / MANIFEST).is_file()
    (tmp_path / "iobench-data" / "not-ours").mkdir()  # no marker: not a dataset
    assert where.names() == ["tiny"]
    assert where.marker("tiny")["status"] == "complete"
    home = where.open("tiny", create=False)
    assert home is not None
    try:
        keys, sizes = home.entries()
        assert keys == KEYS and sizes.tolist() == SIZES.tolist()
        assert home.entry_line(2) == 4  # after the header line
        assert home.sizes(KEYS + ["train/missing.JPEG"], 2, threading.Event()).tolist() == [*SIZES.tolist(), -1]
        manifest = home.manifest(expect=(KEYS, SIZES))
        assert manifest.root == folder and list(manifest.paths) == [str(folder / k) for k in KEYS]
    finally:
        home.close()
    assert 0 < where.free_bytes() <= shutil.disk_usage(tmp_path).total
    assert where.writers() >= 1


def test_one_process_per_dataset(tmp_path):
    where = store.open(tmp_path)
    where.check(writable=True)
    _write(where)
    dataset = where.location("tiny")
    with where.lock(dataset):
        assert (tmp_path / "iobench-data" / "tiny.lock").is_file()
        with pytest.raises(DatasetBusy, match=f"the dataset {dataset} is in use by another iobench"), \
                where.lock(dataset):
            pass
    with where.lock(dataset):  # released: the next one gets it
        pass


def test_clean_removes_only_what_carries_the_marker(tmp_path):
    where = store.open(tmp_path)
    where.check(writable=True)
    _write(where)
    stray = tmp_path / "iobench-data" / "mine"
    (stray / "train").mkdir(parents=True)
    (stray / "train" / "a.JPEG").write_bytes(b"x" * 10)
    beside = tmp_path / "beside.txt"
    beside.write_text("not under iobench-data")
    listed = where.clean(dry_run=True)
    assert [(c.path.name, c.removed) for c in listed] == [("mine", False), ("tiny", True)]
    assert where.location("tiny").is_dir()  # a dry run removes nothing
    done = {c.path.name: c for c in where.clean(dry_run=False)}
    assert done["tiny"].removed and done["tiny"].files == len(KEYS) + 2  # the samples, manifest, marker
    assert not done["mine"].removed and "no iobench marker" in done["mine"].why
    assert not where.location("tiny").exists() and (stray / "train" / "a.JPEG").read_bytes() == b"x" * 10
    assert beside.read_text() == "not under iobench-data" and where.names() == []


@pytest.mark.pagecache  # a cold run elsewhere (drop_caches, as root) empties the page cache under it
def test_evict_empties_the_page_cache_of_the_files(tmp_path):
    where = store.open(tmp_path)
    where.check(writable=True)
    if mount_of(tmp_path).fstype in ("tmpfs", "ramfs", "overlay"):
        pytest.skip(f"{tmp_path} is in memory: there is no page cache to drop")
    _write(where)
    files = [str(where.location("tiny") / k) for k in KEYS]
    for f in files:  # read: cached
        Path(f).read_bytes()
    assert min(resident_fraction(f) or 0.0 for f in files) == 1.0
    assert where.resident(files, timeout_s=30) == 1.0
    how = where.evict(files, timeout_s=30)
    assert how in ("drop_caches", "fadvise_dontneed")
    assert max(resident_fraction(f) or 0.0 for f in files) == 0.0
    assert where.resident(files, timeout_s=30) == 0.0


def test_describe_names_the_real_mount(tmp_path):
    where = store.open(tmp_path)
    where.check(writable=True)
    _write(where)
    dataset = where.location("tiny")
    out = subprocess.run(["findmnt", "-n", "-o", "TARGET,FSTYPE", "-T", str(dataset)], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        pytest.skip("findmnt cannot tell the mount here")
    target, fstype = out.stdout.split()[:2]
    said = where.describe(dataset)
    assert (said["path"], said["fstype"]) == (target, fstype)
    assert said["family"] in ("local", "nfs", "lustre", "fuse", "network")
    assert said["bdi"] == f"{os.major(os.stat(dataset).st_dev)}:{os.minor(os.stat(dataset).st_dev)}"
    assert where.place(dataset) == (fstype, target)
    assert where.place(tmp_path / "iobench-data" / "not-made-yet") == (fstype, target)  # made or not


def test_one_interface_two_backends(tmp_path: Path) -> None:
    """The factory picks the backend by the location (a folder, a bucket's prefix from --url), and each backend has
    every operation and value of the Store protocol: nothing above the store asks which one it has. Making either
    touches nothing (the bucket's client is made at its first request)."""
    folder = store.open(store.at(tmp_path, None))
    bucket = store.open(store.at(None, "s3://bucket/prefix", endpoint_url="http://127.0.0.1:1"))
    ops = {n for n in vars(Store) if not n.startswith("_")} | set(Store.__annotations__)
    assert {"source", "metadata", "raw_command", "evict", "describe", "client_cache", "items"} <= ops
    for where in (folder, bucket):
        assert {n for n in ops if not hasattr(where, n)} == set(), type(where)
    said = [(w.items, w.raw, w.client_cache, w.entry) for w in (folder, bucket)]
    assert said == [("files", "fio", True, "folder"), ("objects", "awscrt", False, "dataset")]
    assert bucket.fuse_folders(bucket.root(), Path("/mnt")) == [Path("/mnt/prefix"), Path("/mnt/bucket/prefix")]
    assert folder.fuse_folders(folder.root(), Path("/mnt")) == []
    assert store.location(store.published(bucket.root())) == bucket.root()  # as rank 0 publishes it to the others
    assert store.location(store.published(tmp_path)) == tmp_path
