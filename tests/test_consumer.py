import time

import pytest

from iobench.gpu.consumer import SleepConsumer


def test_au_is_one_when_batches_are_always_ready():
    c = SleepConsumer(rate=2_000)
    for _ in range(5):
        c(100)  # 50 ms of compute, no wait between steps
    assert c.au == pytest.approx(1.0, abs=0.05) and c.steps == 5


def test_au_counts_waiting_for_data_and_skips_the_first_step():
    c = SleepConsumer(rate=2_000)
    time.sleep(0.5)  # a slow first batch (worker start-up) does not count: AU starts after step 1
    c(100)
    for _ in range(4):
        time.sleep(0.05)  # waiting for data as long as computing
        c(100)
    assert c.au == pytest.approx(0.5, abs=0.05)


def test_au_needs_two_steps():
    c = SleepConsumer(rate=1000)
    c(1)
    assert c.au is None
    with pytest.raises(ValueError):
        SleepConsumer(0)
