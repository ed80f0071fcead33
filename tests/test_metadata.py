import os

import numpy as np
import pytest
from conftest import needs_root

from iobench.store.metadata import list_tree, metadata_phase


def test_metadata_counts_every_file(small_dataset):
    m = metadata_phase(small_dataset, "warm", scale_files=1_281_167)
    assert m.files == len(small_dataset) == 300
    assert m.dirs == len({os.path.dirname(p) for p in small_dataset.paths}) == 4
    assert m.stat_files == m.open_close_files == 300
    assert m.stat_per_s > 0 and m.open_close_per_s > 0
    assert 0 < m.stat_ms.p50 <= m.stat_ms.p99 <= m.stat_ms.max
    assert m.projected_list_s == pytest.approx(m.list_s * 1_281_167 / 300, rel=1e-3)
    assert m.eviction is None


def test_listing_counts_only_regular_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jpg").write_bytes(b"1")
    (tmp_path / "a" / "sub").mkdir()
    folders = np.zeros(1)
    assert list_tree([str(tmp_path / "a")], folders) == 1 and folders[0] == 1


@needs_root
def test_cold_metadata_drops_dentries_and_inodes(small_dataset):
    cold = metadata_phase(small_dataset, "cold", scale_files=1000)
    assert cold.eviction == "drop_caches" and cold.files == 300
