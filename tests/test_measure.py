"""The epoch recorder's timeline stays small however long the run (a 10 M-sample run's result)."""

from __future__ import annotations

from iobench.record.recorder import TIMELINE_POINTS, EpochRecorder


def test_a_long_timeline_is_thinned_evenly_and_keeps_its_ends():
    rec = EpochRecorder(10, 1)
    rec.start()
    for k in range(1, 20_001):  # 20,000 ticks: ~67 minutes at one tick per 0.2 s
        rec.done[0] = k
        rec.tick()
    rec.stop()
    points = rec.timeline
    assert len(points) < TIMELINE_POINTS + 1
    assert points[0] == (0.0, 0) and points[-1][1] == 20_000
    counts = [n for _, n in points[:-1]]
    steps = {b - a for a, b in zip(counts, counts[1:], strict=False)}
    assert len(steps) == 1 and steps.pop() >= 20_000 // TIMELINE_POINTS  # evenly spaced, every k-th tick
    assert all(t1 <= t2 for (t1, _), (t2, _) in zip(points, points[1:], strict=False))


def test_a_short_timeline_keeps_every_tick():
    rec = EpochRecorder(10, 1)
    rec.start()
    for k in range(1, 51):
        rec.done[0] = k
        rec.tick()
    rec.stop()
    assert [n for _, n in rec.timeline] == [0, *range(1, 51), 50]
