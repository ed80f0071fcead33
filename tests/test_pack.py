"""Packs (LMDB, tar shards) and their sources on real JPEG datasets: every sample read back byte-identical
through the real engine, WebDataset-style stream orders, and packs that are idempotent and never delete
what iobench did not make."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import make_dataset

from iobench.dataset import Manifest
from iobench.engines.threads import ThreadEngine
from iobench.errors import UserError
from iobench.record.order import epoch_order
from iobench.record.recorder import EpochRecorder
from iobench.sources import lmdb as lmdb_source
from iobench.sources import pack_folder
from iobench.sources import pack_lmdb as pack_lmdb_module
from iobench.sources.lmdb import LmdbSource
from iobench.sources.pack_folder import PACK_MARKER
from iobench.sources.pack_lmdb import pack_lmdb
from iobench.sources.pack_tar import pack_tar, plan_tar
from iobench.sources.tar import (
    TarSource,
    shard_read_order,
)

SHARD = 2 * 2**20  # ~18 samples a shard: the 300-file dataset spreads over ~17 shards


def file_bytes(m: Manifest, i: int) -> bytes:
    with open(m.paths[i], "rb") as f:
        return f.read()


def mtimes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


@pytest.fixture(scope="module")
def lmdb_pack(small_dataset, tmp_path_factory):
    calls = []
    dest = tmp_path_factory.mktemp("packs") / "lmdb"
    report = pack_lmdb(small_dataset, dest, progress=lambda n, b: calls.append((n, b)))
    return report, calls


@pytest.fixture(scope="module")
def tar_pack(small_dataset, tmp_path_factory):
    dest = tmp_path_factory.mktemp("packs") / "tar"
    return pack_tar(small_dataset, dest, shard_size=SHARD)


@pytest.fixture(scope="module")
def own_dataset(tmp_path_factory) -> Manifest:
    """A small dataset these tests may write packs into (beside it, the default place)."""
    return make_dataset(tmp_path_factory.mktemp("own"), 150, dist="fixed:20KiB", classes=2, seed=3)


def check_epochs(source, m: Manifest, epochs: int = 2, threads: int = 4) -> None:
    """Every sample once per epoch through the real engine, with the right byte counts, then every
    sample's content through a reader."""
    n = len(m)
    for epoch in range(epochs):
        order = epoch_order("shuffled", n, 0, epoch)
        rec = EpochRecorder(n, threads)
        ThreadEngine(threads).epoch(source, order, rec)
        assert rec.completed() == n
        np.testing.assert_array_equal(rec.nbytes, m.sizes[order])
        assert np.all(rec.open_ns <= rec.total_ns)
    reader = source.reader()
    for i in np.random.default_rng(1).permutation(n).tolist():
        k = reader.read(i)
        assert bytes(reader.buffer[:k]) == file_bytes(m, i), f"sample {i} differs"


# ---- LMDB --------------------------------------------------------------------------------------

def test_lmdb_pack_report_and_layout(small_dataset, lmdb_pack):
    report, calls = lmdb_pack
    assert not report.reused and report.format == "lmdb" and report.samples == len(small_dataset)
    assert report.data_bytes == small_dataset.total_bytes
    assert small_dataset.total_bytes <= report.bytes < 1.3 * small_dataset.total_bytes + 2**20
    assert report.seconds > 0 and report.files == 2  # data.mdb, sizes.npy (lock=False: no lock.mdb)
    assert sorted(p.name for p in report.path.iterdir()) == ["data.mdb", PACK_MARKER, "sizes.npy"]
    assert calls[-1] == (len(small_dataset), small_dataset.total_bytes)
    assert all(a[0] < b[0] for a, b in zip(calls, calls[1:], strict=False))
    marker = json.loads((report.path / PACK_MARKER).read_text())
    assert marker["status"] == "complete" and marker["map_size"] >= pack_lmdb_module.lmdb_map_size(small_dataset.sizes)

    import lmdb  # keys: index as 8-byte big-endian, in manifest order; values: the files

    with lmdb.open(str(report.path), readonly=True, lock=False) as env, env.begin() as txn:
        keys = [k for k, _ in txn.cursor()]
        assert keys == [i.to_bytes(8, "big") for i in range(len(small_dataset))]
        assert txn.get((7).to_bytes(8, "big")) == file_bytes(small_dataset, 7)


@pytest.mark.parametrize("readahead", [True, False])
def test_lmdb_reads_every_sample_back_identical(small_dataset, lmdb_pack, readahead):
    src = LmdbSource(lmdb_pack[0].path, len(small_dataset), readahead=readahead)
    assert src.name == "lmdb" and len(src) == len(small_dataset)
    np.testing.assert_array_equal(src.sizes, small_dataset.sizes)
    assert src.readahead is readahead and src.costs()[0] == lmdb_pack[0].bytes
    check_epochs(src, small_dataset)
    reader = src.reader()
    reader.read(3)
    assert reader.open_ns == 0  # no per-sample open: lookup and data both happen in txn.get
    with pytest.raises(IndexError):
        reader.read(len(small_dataset))


def test_lmdb_source_without_iobench_sizes_grows_its_buffer(lmdb_pack, tmp_path, small_dataset):
    import lmdb

    dest = tmp_path / "bare"
    with lmdb.open(str(dest), map_size=2**24, lock=False) as env, env.begin(write=True) as txn:
        for i in range(5):
            txn.put(i.to_bytes(8, "big"), file_bytes(small_dataset, i)[:1000 + i])
    src = LmdbSource(dest, 5)
    assert len(src) == 5 and src.sizes is None
    reader = src.reader()  # buffer grows on demand when sizes are unknown
    assert [reader.read(i) for i in range(5)] == [1000 + i for i in range(5)]
    assert bytes(reader.buffer[:1004]) == file_bytes(small_dataset, 4)[:1004]
    src.close()


def test_lmdb_through_a_torch_dataloader_after_fork(small_dataset, lmdb_pack):
    torch = pytest.importorskip("torch")
    import hashlib

    src = LmdbSource(lmdb_pack[0].path, len(small_dataset))
    src.reader().read(0)  # the parent has the env open when the workers fork

    class Samples(torch.utils.data.Dataset):
        def __init__(self, source):
            self.source = source
            self.reader = None

        def __len__(self):
            return len(self.source)

        def __getitem__(self, i):
            if self.reader is None:  # per worker, after fork
                self.reader = self.source.reader()
            n = self.reader.read(i)
            env_owner = lmdb_source._envs[str(self.source.path)][0]  # the pid that opened the env in use
            assert env_owner == os.getpid(), "a worker is using an env opened before fork"
            return i, n, hashlib.sha1(self.reader.buffer[:n]).hexdigest(), os.getpid()

    loader = torch.utils.data.DataLoader(Samples(src), batch_size=None, shuffle=True, num_workers=2,
                                         multiprocessing_context="fork")
    seen = {}
    pids = set()
    for i, n, digest, pid in loader:
        seen[int(i)] = (int(n), digest)
        pids.add(pid)
    assert len(seen) == len(small_dataset) and os.getpid() not in pids and len(pids) == 2
    for i, (n, digest) in seen.items():
        data = file_bytes(small_dataset, i)
        assert n == len(data) and digest == hashlib.sha1(data).hexdigest()
    src.reader().read(1)  # the parent's env still works after its children closed their copies


# ---- tar ---------------------------------------------------------------------------------------

def test_tar_pack_layout_matches_tarfile(small_dataset, tar_pack):
    report = tar_pack
    index = np.load(report.path / "index.npy")
    assert index.shape == (len(small_dataset), 3) and report.shards == index[:, 0].max() + 1 > 5
    np.testing.assert_array_equal(index[:, 2], small_dataset.sizes)
    shards = sorted(report.path.glob("shard-*.tar"))
    assert [p.name for p in shards] == [f"shard-{s:06d}.tar" for s in range(report.shards)]
    assert report.files == report.shards + 1
    assert report.bytes >= sum(p.stat().st_size for p in shards) > small_dataset.total_bytes
    for s, shard in enumerate(shards):
        assert shard.stat().st_size <= SHARD
        with tarfile.open(shard) as tf:
            members = tf.getmembers()
        mine = np.flatnonzero(index[:, 0] == s)
        assert [m.name for m in members] == [f"{i:08d}.jpg" for i in mine]
        assert [m.offset_data for m in members] == index[mine, 1].tolist()
        assert [m.size for m in members] == index[mine, 2].tolist()
    with tarfile.open(shards[1]) as tf:
        first = tf.getmembers()[0]
        i = int(first.name.split(".")[0])
        assert tf.extractfile(first).read() == file_bytes(small_dataset, i)


def test_tar_reads_every_sample_back_identical(small_dataset, tar_pack):
    src = TarSource(tar_pack.path)
    assert src.name == "tar" and len(src) == len(small_dataset)
    np.testing.assert_array_equal(src.sizes, small_dataset.sizes)
    assert len(src.shard_files) == tar_pack.shards and src.marker["shard_size"] == SHARD
    assert src.costs()[0] == tar_pack.bytes
    check_epochs(src, small_dataset)
    fresh = TarSource(tar_pack.path)
    reader = fresh.reader()
    reader.read(0)
    first = reader.open_ns
    reader.read(1)  # same shard, already open
    assert first > 0 and reader.open_ns == 0
    fresh.close()


def test_tar_read_order_streams_whole_shards_in_a_per_epoch_order(small_dataset, tar_pack):
    """What storage sees of a WebDataset pipeline: each shard once per epoch, front to back, the shards in a
    fresh order each epoch; with workers, shards dealt out and batches interleaved; replayed through an engine."""
    index = np.load(tar_pack.path / "index.npy")
    n = len(index)
    r = shard_read_order(index, 0, 0)
    assert sorted(r.tolist()) == list(range(n))
    np.testing.assert_array_equal(r, shard_read_order(index, 0, 0))
    shard_seq = index[r, 0]
    runs = shard_seq[np.r_[0, np.flatnonzero(np.diff(shard_seq)) + 1]]
    assert sorted(runs.tolist()) == list(range(tar_pack.shards))  # each shard visited once
    assert np.all(np.diff(index[r, 1])[np.diff(shard_seq) == 0] > 0)  # forward within a shard
    other = [shard_read_order(index, seed, epoch) for seed, epoch in ((0, 1), (1, 0))]
    assert all(not np.array_equal(index[o, 0], shard_seq) for o in other)  # the shards' order moves

    w = shard_read_order(index, 0, 0, workers=3, batch=8)
    assert sorted(w.tolist()) == list(range(n))
    assert len({int(index[i, 0]) for i in w[:24]}) >= 3  # three workers' first batches

    src = TarSource(tar_pack.path)
    rec = EpochRecorder(len(src), 2)
    ThreadEngine(2).epoch(src, w, rec)
    np.testing.assert_array_equal(rec.nbytes, small_dataset.sizes[w])
    src.close()


def test_plan_tar_bounds_shards():
    sizes = np.array([100, 5000, 75_000, 100, 200_000, 3], dtype=np.int64)
    plan = plan_tar(sizes, 80 * 1024)
    assert plan.shard.tolist() == [0, 0, 1, 1, 2, 3]  # the 200 KB sample gets a shard of its own
    assert all(b % 10240 == 0 for b in plan.shard_bytes)
    assert plan.shard_bytes[2] > 80 * 1024 and max(plan.shard_bytes[:2] + plan.shard_bytes[3:]) <= 80 * 1024
    assert plan.offset.tolist()[:3] == [512, 512 + 512 + 512, 512]


# ---- idempotence and safety ------------------------------------------------------------------

def test_packs_go_beside_the_dataset_and_are_reused(own_dataset):
    root = own_dataset.root
    a = pack_lmdb(own_dataset)
    b = pack_tar(own_dataset)
    assert a.path == root / "packed" / "lmdb" and b.path == root / "packed" / "tar-256MiB"
    assert b.shards == 1 and pack_folder.find_pack(own_dataset, "lmdb") == a.path
    before = {p: mtimes(p) for p in (a.path, b.path)}
    a2, b2 = pack_lmdb(own_dataset), pack_tar(own_dataset)
    assert a2.reused and b2.reused and a2.bytes == a.bytes and b2.seconds == b.seconds
    assert {p: mtimes(p) for p in (a.path, b.path)} == before  # nothing rewritten, not even the marker
    assert pack_tar(own_dataset, shard_size=64 * 1024).path == root / "packed" / "tar-64KiB"


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
def test_an_interrupted_pack_is_rebuilt_and_strangers_kept(own_dataset, tmp_path, fmt):
    dest = tmp_path / fmt
    do = (lambda **kw: pack_lmdb(own_dataset, dest, **kw)) if fmt == "lmdb" else \
        (lambda **kw: pack_tar(own_dataset, dest, shard_size=512 * 1024, **kw))

    def stop(n, _):
        if n >= 64:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        do(progress=stop)
    marker = json.loads((dest / PACK_MARKER).read_text())
    assert marker["status"] == "incomplete"
    (dest / "notes.txt").write_text("mine")  # not iobench's: must survive the rebuild
    report = do()
    assert not report.reused and (dest / "notes.txt").read_text() == "mine"
    src = LmdbSource(dest, len(own_dataset)) if fmt == "lmdb" else TarSource(dest)
    check_epochs(src, own_dataset, epochs=1, threads=2)
    src.close()

    # a marker made incomplete by hand (as if killed before the end) is rebuilt too
    marker = json.loads((dest / PACK_MARKER).read_text())
    (dest / PACK_MARKER).write_text(json.dumps({**marker, "status": "incomplete"}))
    again = do()
    assert not again.reused and do().reused


def test_a_folder_without_the_marker_is_never_touched(own_dataset, tmp_path):
    dest = tmp_path / "theirs"
    dest.mkdir()
    (dest / "data.mdb").write_bytes(b"not ours")
    for call in (lambda: pack_lmdb(own_dataset, dest), lambda: pack_tar(own_dataset, dest)):
        with pytest.raises(UserError, match="not made by iobench"):
            call()
    assert (dest / "data.mdb").read_bytes() == b"not ours" and len(list(dest.iterdir())) == 1
    other = tmp_path / "lmdb"
    pack_lmdb(own_dataset, other)
    with pytest.raises(UserError, match="lmdb pack, not tar"):
        pack_tar(own_dataset, other)


def test_no_space_is_one_line_and_writes_nothing(own_dataset, tmp_path, monkeypatch):
    full = SimpleNamespace(total=10**12, used=10**12, free=1000)
    monkeypatch.setattr(pack_folder.shutil, "disk_usage", lambda p: full)
    dest = tmp_path / "full"
    with pytest.raises(UserError, match="not enough space") as err:
        pack_tar(own_dataset, dest)
    assert "\n" not in str(err.value) and not dest.exists()


def test_read_only_destination_is_one_line(own_dataset, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:  # root ignores permissions: use a read-only mount
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], capture_output=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a read-only tmpfs: {r.stderr.decode().strip()}")
        match = "read-only"
    else:
        ro.chmod(0o555)
        match = "not writable"
    try:
        with pytest.raises(UserError, match=match) as err:
            pack_lmdb(own_dataset, ro / "lmdb")
        assert "\n" not in str(err.value)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(ro)], check=True)
        else:
            ro.chmod(0o755)


@pytest.mark.parametrize("fmt", ["lmdb", "tar"])
def test_packs_through_the_dataloader_engine_byte_identical_once_per_epoch(small_dataset, lmdb_pack, tar_pack, fmt):
    """Real DataLoader workers (the engine iobench runs), two epochs: every sample once, equal to its file."""
    pytest.importorskip("torch")
    from iobench.engines.dataloader import DataLoaderEngine

    src = LmdbSource(lmdb_pack[0].path, len(small_dataset)) if fmt == "lmdb" else TarSource(tar_pack.path)
    files = [Path(p).read_bytes() for p in small_dataset.paths]
    with DataLoaderEngine(2, batch_size=32) as engine:
        for epoch in (1, 2):
            order = epoch_order("shuffled", len(small_dataset), 0, epoch)
            seen = np.zeros(len(small_dataset), dtype=np.int64)

            def check(batch, order=order, seen=seen) -> None:
                for i, pos in enumerate(batch.positions.tolist()):
                    index = int(order[pos])
                    seen[index] += 1
                    assert bytes(batch.sample(i)) == files[index]

            rec = EpochRecorder(len(small_dataset), 2)
            engine.epoch(src, order, rec, on_batch=check)
            assert np.all(seen == 1) and int(rec.nbytes.sum()) == small_dataset.total_bytes
