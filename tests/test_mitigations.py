"""Mitigations on real files: every variant reads the whole dataset; settings it changes are put back."""

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import iobench, make_dataset, needs_root

from iobench.phases.mitigations import read_ahead_kb, readahead_file, willneed_prefetch
from iobench.record.order import epoch_order
from iobench.record.recorder import EpochRecorder
from iobench.result import Result


def test_run_with_mitigations_measures_each_on_the_whole_dataset(tmp_path):
    out = tmp_path / "out"
    iobench("run", "--mount", str(tmp_path), "--files", "200", "--size-dist", "uniform:8kB-40kB", "--engine", "threads",
            "--threads", "2", "--cache", "cold", "--no-fio", "--no-metadata", "--mitigations", "--out", str(out),
            check=True)
    r = Result.load(out / "result.json")
    names = [m.name for m in r.mitigations]
    for name in ("baseline", "fadvise-random", "fadvise-willneed", "lmdb", "lmdb-noreadahead", "tar", "tar-stream",
                 "readers=8"):
        assert name in names
    assert r.mitigations[0].name == "baseline" and r.mitigations[0].speedup == 1.0
    runs = {x.mitigation: x for x in r.runs if x.mitigation}
    for m in r.mitigations:
        run = runs[m.name]
        assert run.samples == 200 and run.bytes == r.dataset.bytes and run.cache == "cold"  # every sample, once
        assert m.speedup == pytest.approx(run.samples_per_s / runs["baseline"].samples_per_s, abs=1e-3)
        assert (m.extra_bytes > 0) == (m.source in ("lmdb", "tar"))
    assert runs["tar-stream"].order == "shard-stream" and runs["lmdb"].source == "lmdb"
    assert runs["readers=8"].concurrency == 8


@pytest.mark.pagecache  # a cold run elsewhere (drop_caches, as root) empties the page cache under it
def test_willneed_prefetch_hints_ahead_of_the_readers(tmp_path):
    m = make_dataset(tmp_path, 120, "fixed:16kB", classes=1)
    from iobench.host import cache

    cache.evict(m.paths, drop_caches=False)
    order = epoch_order("shuffled", len(m), 0, 1)
    rec = EpochRecorder(len(m), 1)  # no reader moves: the prefetcher stops at depth files ahead
    with willneed_prefetch(m.paths, order, rec, depth=30):
        import time

        time.sleep(0.5)
    hinted = [cache.resident_fraction(m.paths[i]) for i in order[:30]]
    later = [cache.resident_fraction(m.paths[i]) for i in order[40:]]
    assert np.mean(hinted) > 0.9 and np.mean(later) < 0.1


@needs_root
def test_read_ahead_kb_is_restored_after_a_run_and_after_an_interruption(xfs_mount):
    bdi = f"{os.major(os.stat(xfs_mount).st_dev)}:{os.minor(os.stat(xfs_mount).st_dev)}"
    f = readahead_file(bdi)
    before = int(f.read_text())
    with read_ahead_kb(bdi, 2048) as old:
        assert old == before and int(f.read_text()) == 2048
    assert int(f.read_text()) == before
    with pytest.raises(KeyboardInterrupt), read_ahead_kb(bdi, 4096):
        assert int(f.read_text()) == 4096
        raise KeyboardInterrupt
    assert int(f.read_text()) == before


def test_pack_command_makes_and_reuses_packs(tmp_path):
    make_dataset(tmp_path, 60, "fixed:8kB", classes=1)  # `gen --files 60 --size-dist fixed:8kB`'s dataset
    first = iobench("pack", "--mount", str(tmp_path), "--files", "60", "--quiet", check=True).stdout
    assert "lmdb:" in first and "tar:" in first and "made in" in first
    again = iobench("pack", "--mount", str(tmp_path), "--files", "60", "--quiet", check=True).stdout
    assert again.count("reused") == 2
    assert any(Path(tmp_path).glob("iobench-data/*/packed/lmdb/data.mdb"))
