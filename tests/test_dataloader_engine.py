"""The DataLoader engine with real torch DataLoader worker processes over real generated JPEGs."""

from __future__ import annotations

import errno
import os
import time
import zlib
from pathlib import Path

import numpy as np
import psutil
import pytest

torch = pytest.importorskip("torch")

from conftest import make_dataset  # noqa: E402

from iobench.engines.dataloader import DataLoaderEngine  # noqa: E402
from iobench.record.order import epoch_order  # noqa: E402
from iobench.record.recorder import EpochRecorder  # noqa: E402
from iobench.sources.files import FileSource  # noqa: E402


def file_sizes(manifest) -> np.ndarray:
    return np.array([os.path.getsize(p) for p in manifest.paths], dtype=np.int64)


def children_gone(timeout: float = 10.0) -> list[psutil.Process]:
    """This process's live children after waiting up to `timeout` for them to exit."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [c for c in psutil.Process().children(recursive=True)
                 if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


class Collect:
    """on_batch: the positions and a few sample bytes of every batch, as the main process got them, and the pids of
    the processes that delivered them."""

    def __init__(self):
        self.positions: list[np.ndarray] = []
        self.samples: dict[int, bytes] = {}
        self.shapes: list[tuple[int, ...]] = []
        self.pids: set[int] = set()

    def __call__(self, batch) -> None:
        self.pids.add(batch.pid)
        pos = batch.positions.copy()
        self.positions.append(pos)
        self.shapes.append(tuple(batch.data.shape))
        if batch.data.dim() == 1:  # raw: keep the first sample's bytes to check the offsets
            self.samples[int(pos[0])] = bytes(batch.sample(0))
            self.samples[int(pos[-1])] = bytes(batch.sample(len(pos) - 1))

    def covered(self) -> np.ndarray:
        return np.sort(np.concatenate(self.positions))


def test_two_workers_read_every_sample_once_per_epoch_and_persist(small_dataset):
    manifest = small_dataset
    n = len(manifest)
    sizes = file_sizes(manifest)
    source = FileSource(manifest)
    pids = []
    with DataLoaderEngine(workers=2, batch_size=32) as engine:
        orders = [epoch_order("shuffled", n, 7, e) for e in (1, 2)]
        assert not np.array_equal(orders[0], orders[1])
        for order in orders:
            rec, seen, ticks = EpochRecorder(n, 2), Collect(), []
            engine.epoch(source, order, rec, ticks.append, on_batch=seen)
            # every position filled with the size of the file it names: the records landed at position p
            assert np.array_equal(rec.nbytes, sizes[order])
            assert int(rec.nbytes.sum()) == int(sizes.sum()) == manifest.total_bytes
            # independently: the batches that crossed cover positions 0..n-1 exactly once
            assert np.array_equal(seen.covered(), np.arange(n))
            for p, data in seen.samples.items():  # bytes and offsets of the one-tensor batch are right
                with open(manifest.paths[order[p]], "rb") as f:
                    assert data == f.read()
            assert (rec.total_ns > 0).all() and (rec.open_ns > 0).all() and (rec.open_ns <= rec.total_ns).all()
            assert rec.completed() == n and ticks[-1] == n and rec.timeline[-1][1] == n
            assert all(d > 0 for d in rec.done[:2])  # both workers delivered batches
            pids.append(seen.pids)
        assert len(pids[0]) == 2 and os.getpid() not in pids[0]
        assert pids[0] == pids[1]  # persistent workers: the same processes served both epochs
        assert {c.pid for c in psutil.Process().children()} >= pids[0]
    assert children_gone() == []  # leaving the block closed the loader


def test_workers_zero_reads_in_the_main_process(small_dataset):
    manifest = small_dataset
    n = len(manifest)
    order = epoch_order("shuffled", n, 0, 3)
    rec = EpochRecorder(n, 0)  # no worker slots: the engine makes the one it needs
    with DataLoaderEngine(workers=0, batch_size=64) as engine:
        engine.epoch(FileSource(manifest), order, rec, on_batch=(seen := Collect()))
        assert seen.pids == {os.getpid()}
    assert np.array_equal(rec.nbytes, file_sizes(manifest)[order])
    assert rec.completed() == n


def test_decode_times_each_sample_and_sends_decoded_batches(small_dataset):
    manifest = small_dataset
    order = epoch_order("shuffled", len(manifest), 1, 1)[:48]
    rec, seen = EpochRecorder(len(order), 2), Collect()
    with DataLoaderEngine(workers=2, batch_size=16, decode=True) as engine:
        engine.epoch(FileSource(manifest), order, rec, on_batch=seen)
    assert (rec.decode_ns > 0).all() and (rec.total_ns > 0).all()
    assert np.array_equal(rec.nbytes, file_sizes(manifest)[order])
    assert seen.shapes == [(16, 3, 224, 224)] * 3
    assert np.array_equal(seen.covered(), np.arange(len(order)))


def test_missing_file_raises_oserror_from_a_worker(tmp_path):
    manifest = make_dataset(tmp_path, 40, dist="fixed:8KiB")
    order = np.arange(40, dtype=np.int64)
    gone = 25
    sizes = file_sizes(manifest)
    os.unlink(manifest.paths[gone])
    rec = EpochRecorder(40, 2)
    engine = DataLoaderEngine(workers=2, batch_size=8)
    with pytest.raises(FileNotFoundError) as info:
        engine.epoch(FileSource(manifest), order, rec)
    assert info.value.errno == errno.ENOENT and info.value.filename == manifest.paths[gone]
    assert rec.nbytes[gone] == -1
    assert np.array_equal(rec.nbytes[:gone], sizes[:gone])  # batches before it, and its batch up to it, were kept
    assert children_gone() == []  # the engine shut its workers down on the error
    engine.close()


def test_ctrl_c_stops_the_workers_and_keeps_what_was_read(small_dataset):
    manifest = small_dataset
    n = len(manifest)
    order = epoch_order("shuffled", n, 5, 1)
    rec = EpochRecorder(n, 2)

    def interrupt(batch):
        raise KeyboardInterrupt

    engine = DataLoaderEngine(workers=2, batch_size=32)
    with pytest.raises(KeyboardInterrupt):
        engine.epoch(FileSource(manifest), order, rec, on_batch=interrupt)
    read = rec.nbytes >= 0
    assert 32 <= read.sum() < n and rec.t_end >= rec.t_start
    assert np.array_equal(rec.nbytes[read], file_sizes(manifest)[order][read])
    assert children_gone() == []
    engine.epoch(FileSource(manifest), order, rec := EpochRecorder(n, 2))  # usable again: a new loader
    assert rec.completed() == n
    engine.close()
    assert children_gone() == []


def test_raw_batches_hold_every_file_byte_for_byte(small_dataset):
    """The one-copy path (each file read straight into the batch's shared buffer): every sample of every batch, as
    the main process gets it, is its file's bytes."""
    manifest = small_dataset
    n = len(manifest)
    order = epoch_order("shuffled", n, 3, 1)
    want = {p: zlib.crc32(Path(manifest.paths[order[p]]).read_bytes()) for p in range(n)}
    got: dict[int, int] = {}

    def check(batch) -> None:
        for i, p in enumerate(batch.positions.tolist()):
            got[p] = zlib.crc32(batch.sample(i))

    with DataLoaderEngine(workers=2, batch_size=32) as engine:
        engine.epoch(FileSource(manifest), order, EpochRecorder(n, 2), on_batch=check)
    assert got == want


def test_a_batch_bigger_than_its_estimate_keeps_every_byte(small_dataset):
    """The rare path: the batch's buffer is sized from a short estimate, so samples land past its end (read into
    the reader's own buffer and copied, the batch grown); the bytes and times are those of the files."""
    from iobench.engines.batches import META_ROWS, NBYTES, OFFSET, OPEN_NS, TOTAL_NS, SourceDataset

    manifest = small_dataset
    ds = SourceDataset(FileSource(manifest), False, torch.zeros((1, 4), dtype=torch.int32))
    ds._avg = 1  # the estimate: far too small for any sample
    indices = np.arange(40, dtype=np.int64)
    buf, k, done, used, _worker, _pid, _slot, error = ds.__getitems__((0, indices))
    assert error is None and k == done == 40 and buf is not None
    hdr = META_ROWS * k * 8
    meta = buf[:hdr].numpy().view(np.int64).reshape(META_ROWS, k)
    data = buf[hdr:used].numpy().tobytes()
    for i in range(k):
        with open(manifest.paths[i], "rb") as f:
            assert data[meta[OFFSET, i]:meta[OFFSET, i] + meta[NBYTES, i]] == f.read()
    assert (meta[TOTAL_NS] >= meta[OPEN_NS]).all() and (meta[OPEN_NS] > 0).all()
