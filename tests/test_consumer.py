import time

import pytest

from iobench.gpu.consumer import SleepConsumer


def test_au_is_one_when_batches_are_always_ready():
    """No wait between steps: AU is the steps' compute over their wall, the scheduler's oversleep (a busy host's
    10-20%: emulation error, not data waited for) the only gap, as timed beside them here."""
    c = SleepConsumer(rate=2_000)
    c(100)
    start = time.perf_counter()
    for _ in range(4):
        c(100)  # 50 ms of compute, no wait between steps
    wall = time.perf_counter() - start
    assert c.au == pytest.approx(4 * 0.05 / wall, abs=0.01) and c.au > 0.5 and c.steps == 5


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


def test_gpus_delivered_rate_is_all_their_samples_over_the_longest_window():
    """Two real consumers, one fed at twice the pace of the other (a saturated client serves one GPU first): the
    run delivered their samples over the longest window, not the sum of each one's rate, which no instant saw."""
    from iobench.phases.epoch import fed

    fast, slow = SleepConsumer(rate=20_000), SleepConsumer(rate=20_000)
    for _ in range(4):
        fast(100)  # 5 ms steps, back to back
    for _ in range(4):
        time.sleep(0.03)  # waits on its loader
        slow(100)
    got = fed([fast.au, slow.au], [fast.samples, slow.samples], [fast.window_s, slow.window_s])
    assert fast.window_s and slow.window_s and slow.window_s > 2 * fast.window_s
    assert got["delivered_per_s"] == pytest.approx(600 / slow.window_s, rel=0.01)
    assert got["delivered_per_s"] < fast.samples / fast.window_s + slow.samples / slow.window_s
