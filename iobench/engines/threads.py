"""Thread-pool engine: N threads each take the next position of the epoch's order and read it,
prefetching ahead of the consumer as a training input pipeline does. This is the hot path: per
sample it does the read, four clock reads and three numpy stores, nothing else."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from time import perf_counter_ns

import numpy as np

from iobench.measure import EpochRecorder
from iobench.sources import Source

TICK_S = 0.2  # how often the main thread samples progress (live display and the timeline)


class ThreadEngine:
    name = "threads"

    def __init__(self, concurrency: int):
        self.concurrency = concurrency
        self._stop = False
        self._error: BaseException | None = None

    def epoch(self, source: Source, order: np.ndarray, rec: EpochRecorder,
              on_tick: Callable[[int], None] | None = None) -> None:
        """Read every sample of `order` once; returns when done. Ctrl-C stops the workers and
        re-raises, leaving in `rec` what was read so far."""
        self._stop = False
        self._error = None
        positions = itertools.count()
        order_list = order.tolist()  # Python ints index a list faster than numpy scalars
        threads = [threading.Thread(target=self._work, args=(w, source, order_list, positions.__next__, rec),
                                    name=f"iobench-reader-{w}", daemon=True)
                   for w in range(self.concurrency)]
        rec.start()
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(TICK_S)
                    done = rec.tick()
                    if on_tick:
                        on_tick(done)
        except BaseException:
            self._stop = True
            for t in threads:
                t.join()
            raise
        finally:
            rec.stop()
        if self._error is not None:
            raise self._error

    def _work(self, w: int, source: Source, order: list[int], take: Callable[[], int],
              rec: EpochRecorder) -> None:
        reader = source.reader()
        read = reader.read
        total, opened, nbytes, done = rec.total_ns, rec.open_ns, rec.nbytes, rec.done
        n = len(order)
        clock = perf_counter_ns
        try:
            while not self._stop:
                p = take()
                if p >= n:
                    return
                t0 = clock()
                k = read(order[p])
                total[p] = clock() - t0
                opened[p] = reader.open_ns
                nbytes[p] = k
                done[w] += 1
        except BaseException as exc:  # the main thread re-raises it; the other workers stop
            self._error = exc
            self._stop = True
