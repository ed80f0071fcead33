"""The replay core on real files: every sample once per epoch, counted bytes, honest cache states."""

import mmap
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import make_dataset, needs_root

from iobench.dataset import Manifest
from iobench.engines.threads import ThreadEngine
from iobench.host import cache
from iobench.phases.epoch import EpochSpec, measure_epoch
from iobench.record.order import epoch_order
from iobench.record.recorder import EpochRecorder
from iobench.sources.files import FileSource
from iobench.ui import UI


class CountingSource(FileSource):
    """Real file reads, plus a tally of which samples were read (the test's independent witness), in shared memory:
    the engine's threads read in a child process."""

    def __init__(self, manifest: Manifest):
        super().__init__(manifest)
        self.counts = np.frombuffer(mmap.mmap(-1, 8 * len(manifest)), dtype=np.int64)
        self.lock = threading.Lock()

    def reader(self):
        inner = super().reader()
        outer = self

        class Counting:
            buffer = inner.buffer

            @property
            def open_ns(self):
                return inner.open_ns

            @property
            def total_ns(self):
                return inner.total_ns

            def read(self, index: int) -> int:
                with outer.lock:
                    outer.counts[index] += 1
                return inner.read(index)

        return Counting()


@pytest.mark.parametrize("threads", [1, 7])
def test_epoch_reads_every_sample_once_and_counts_real_bytes(small_dataset, threads):
    src = CountingSource(small_dataset)
    rec = EpochRecorder(len(small_dataset), threads)
    ThreadEngine(threads).epoch(src, epoch_order("shuffled", len(small_dataset), 0, 1), rec)
    assert np.all(src.counts == 1)
    assert rec.completed() == len(small_dataset)
    assert int(rec.nbytes.sum()) == small_dataset.total_bytes == sum(os.path.getsize(p) for p in small_dataset.paths)
    assert np.all(rec.total_ns > 0) and np.all(rec.open_ns <= rec.total_ns)


def test_bytes_are_counted_not_taken_from_the_manifest(small_dataset, tmp_path):
    # a manifest that lies about sizes: the figure follows what read() returned
    lying = Manifest(small_dataset.root, small_dataset.paths[:20], small_dataset.sizes[:20] // 2)
    rec = EpochRecorder(20, 2)
    ThreadEngine(2).epoch(FileSource(lying), np.arange(20), rec)
    assert int(rec.nbytes.sum()) == int(small_dataset.sizes[:20].sum())


def test_shuffles_differ_per_epoch_and_repeat_with_the_seed():
    a1, a2 = epoch_order("shuffled", 1000, 7, 1), epoch_order("shuffled", 1000, 7, 2)
    assert not np.array_equal(a1, a2)
    assert np.array_equal(a1, epoch_order("shuffled", 1000, 7, 1))
    assert not np.array_equal(a1, epoch_order("shuffled", 1000, 8, 1))
    assert sorted(a1.tolist()) == list(range(1000))
    assert np.array_equal(epoch_order("sequential", 5, 7, 3), np.arange(5))


def test_read_error_stops_the_epoch_and_is_raised(small_dataset, tmp_path):
    paths = list(small_dataset.paths[:10]) + [str(tmp_path / "gone.JPEG")]
    m = Manifest(small_dataset.root, paths, np.ones(11, dtype=np.int64))
    rec = EpochRecorder(11, 2)
    with pytest.raises(FileNotFoundError):
        ThreadEngine(2).epoch(FileSource(m), np.arange(11), rec)


def test_file_bigger_than_expected_is_read_whole(tmp_path):
    big = tmp_path / "big.jpg"
    big.write_bytes(os.urandom(300_000))
    m = Manifest(tmp_path, [str(big)], np.array([1000]))
    reader = FileSource(m).reader()
    n = reader.read(0)
    assert n == 300_000 and bytes(reader.buffer[:n]) == big.read_bytes()


@needs_root
@pytest.mark.pagecache  # a cold run elsewhere (drop_caches, as root) empties the page cache under it
def test_cold_starts_uncached_and_is_slower_than_warm(tmp_path):
    m = make_dataset(tmp_path, 1500, "fixed:110KiB", classes=2)
    src, ui = FileSource(m), UI(quiet=True)
    run_cold, _ = measure_epoch(ThreadEngine(1), src, m, EpochSpec("shuffled", "cold", 1, 0, None, True), ui)
    run_warm, _ = measure_epoch(ThreadEngine(1), src, m, EpochSpec("shuffled", "warm", 2, 0, None, True), ui)
    assert run_cold.eviction == "drop_caches"
    assert run_cold.resident_before is not None and run_cold.resident_before < 0.05
    assert run_cold.measures == "storage"
    assert run_warm.resident_before is not None and run_warm.resident_before > 0.9
    assert run_warm.measures == "page-cache"
    assert run_cold.samples == 1500 and run_warm.samples == 1500 * run_warm.passes  # a short warm epoch: passes
    assert run_cold.bytes == m.total_bytes and run_warm.bytes == m.total_bytes * run_warm.passes
    assert run_cold.samples_per_s < run_warm.samples_per_s


@pytest.mark.pagecache  # a cold run elsewhere (drop_caches, as root) empties the page cache under it
def test_fadvise_eviction_empties_the_cache_without_root(small_dataset):
    for p in small_dataset.paths:
        Path(p).read_bytes()
    assert cache.resident_sample(small_dataset.paths) > 0.9
    assert cache.evict(small_dataset.paths, drop_caches=False) == "fadvise_dontneed"
    assert cache.resident_sample(small_dataset.paths) < 0.05
