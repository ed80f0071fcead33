"""Thread-pool engine: N threads each take the next position of the epoch's order and read it, prefetching ahead of
the consumer as a training input pipeline does. The hot path: per sample the read (which times itself) and four
stores (three numpy, one count), nothing else.

The threads run in a child process forked for the epoch, writing into the recorder moved into shared memory
(EpochRecorder.share), which the calling process reads and watches: no read finished for `io_timeout_s` (None: no
deadline) raises StorageStalled and leaves the child behind, killed. A thread stuck in read() on storage that
stopped answering cannot be stopped (FUSE waits uninterruptibly once a request reached the server), and a process
is not reported as ended until its last thread ends: in iobench's own process such threads would keep
`iobench run` from exiting until the storage answers."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import pickle
import signal
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from iobench.host.bounded import await_report, fork_reporting, stop_child
from iobench.host.stall import StorageStalled, Watch, deliver, left_behind_text, stop_signals_deferred
from iobench.record.recorder import EpochRecorder
from iobench.sources import Source

TICK_S = 0.2  # how often the child's main thread wakes to run its SIGTERM handler (progress: bounded.TICK_S)


class ThreadEngine:
    name = "threads"
    workers = None  # threads, not worker processes
    batch_size = None  # sample by sample

    def __init__(self, concurrency: int, io_timeout_s: float | None = None, depth: int = 1):
        self.concurrency = concurrency
        self.depth = depth  # requests in flight per thread (objects: start/finish); 1: read() one at a time
        self.io_timeout_s = io_timeout_s  # None: no deadline
        self.left_behind: str | None = None  # after an epoch cut short: readers stuck in IO left behind
        self._stop = False
        self._error: BaseException | None = None

    def close(self) -> None:
        """Nothing outlives an epoch: its threads (or its reader process) end with it."""

    def epoch(self, source: Source, order: np.ndarray, rec: EpochRecorder,
              on_tick: Callable[[int], None] | None = None) -> None:
        """Read every sample of `order` once; returns when done. Ctrl-C stops the workers and re-raises, leaving in
        `rec` what was read so far; so does StorageStalled, no read finished for `io_timeout_s`."""
        self._stop = False
        self._error = None
        self.left_behind = None
        conc = self.concurrency
        done, finished = rec.share(max(conc, len(rec.done)))  # the child writes the recorder; this process reads it
        finished[conc:] = 1
        arrays = (rec.total_ns, rec.open_ns, rec.nbytes, rec.throttled, done, finished)

        def reading() -> int:  # threads in a read: the pending reads of a stall
            return int(conc - finished[:conc].sum())

        pid, rfd, held = fork_reporting(lambda: self._child(source, order, arrays), b"iobench-reader")
        rec.start()
        stopped = False
        try:
            deliver(held)  # a Ctrl-C during the fork: here, where the child is stopped
            watch = Watch(math.inf if self.io_timeout_s is None else self.io_timeout_s)
            watch.check(rec.completed(), int)
            report = await_report(rfd, lambda: watch.check(rec.tick(on_tick), reading))
            rec.stop()  # the reads are over; the child's exit (its address space torn down) is not the epoch's
            stopped = True
        except BaseException as exc:
            stalled = isinstance(exc, StorageStalled)
            with stop_signals_deferred(stopping=True):
                ended = stop_child(pid, graceful=not stalled)
            if not ended:
                still = reading()
                self.left_behind = left_behind_text([pid], "reader process",
                                                    f" ({still} thread{'s' if still != 1 else ''} in read)")
                if isinstance(exc, StorageStalled):
                    exc.stuck, exc.left_behind = (pid,), self.left_behind
            raise
        else:
            os.waitpid(pid, 0)  # it has reported: it is exiting
            if report is None:  # a child that died without a word (killed, out of memory)
                self._error = RuntimeError("the reader process ended without reporting (killed?)")
            else:
                with contextlib.suppress(Exception):  # cannot happen short of a broken pickle
                    self._error = pickle.loads(report)
        finally:
            os.close(rfd)
            if not stopped:
                rec.stop()
            rec.unshare()
        if self._error is not None:
            raise self._error

    def _child(self, source: Source, order: np.ndarray, arrays: tuple) -> BaseException | None:  # pragma: no cover
        """In the forked child: run the threads; the error (or None) is the child's report to the parent."""
        signal.signal(signal.SIGTERM, lambda signum, frame: setattr(self, "_stop", True))  # the parent's stop
        positions = itertools.count()
        # a memoryview gives Python ints like a list does, without 28+8 bytes per sample (10 M samples: ~360 MB)
        indices = np.ascontiguousarray(order, dtype=np.int64).data
        # threads made after the fork: Python marks every Thread object made before it as stopped
        threads = [threading.Thread(target=self._work, args=(w, source, indices, positions.__next__, *arrays),
                                    name=f"iobench-reader-{w}", daemon=True) for w in range(self.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(TICK_S)  # wakes to run the SIGTERM handler
        return self._error

    def _work(self, w: int, source: Source, order: memoryview, take: Callable[[], int], total_ns: np.ndarray,
              open_ns: np.ndarray, nbytes_: np.ndarray, throttled: np.ndarray, done, finished) -> None:
        n = len(order)
        count = int(done[w])
        # the record's arrays as memoryviews: a store into one costs a third of a numpy item store
        total, opened, nbytes = total_ns.data, open_ns.data, nbytes_.data
        try:
            if self.depth > 1:
                self._work_deep(w, source, order, take, total, opened, nbytes, throttled, done)
                return
            reader = source.reader()
            read = reader.read
            counts = hasattr(reader, "throttled")  # a Reader made elsewhere (tests, a new source) may not count
            while not self._stop:
                p = take()
                if p >= n:
                    return
                k = read(order[p])  # the reader times it (sources/__init__.py): here it is only stored
                total[p] = reader.total_ns
                opened[p] = reader.open_ns
                nbytes[p] = k
                if counts and reader.throttled:  # the answers throttled before this one (objects): rare
                    throttled[p] = reader.throttled
                count += 1
                done[w] = count
        except BaseException as exc:  # the main thread re-raises it; the other workers stop
            self._error = exc
            self._stop = True
        finally:
            finished[w] = 1

    def _work_deep(self, w: int, source: Source, order: memoryview, take: Callable[[], int], total: memoryview,
                   opened: memoryview, nbytes: memoryview, throttled: np.ndarray, done) -> None:
        """`depth` requests in flight from this thread: the GETs of its next positions are started before the
        oldest is finished (in the order taken), so threads x depth are in flight."""
        n, depth = len(order), self.depth
        reader: Any = source.reader(depth, self.io_timeout_s)  # type: ignore[call-arg]  # objects only (refusals)
        start, finish = reader.start, reader.finish
        flight: deque[int] = deque()  # the positions in flight, oldest first (as `finish` ends them)
        count = int(done[w])
        more = True
        while not self._stop:
            while more and len(flight) < depth:
                p = take()
                if p >= n:
                    more = False
                    break
                start(order[p])
                flight.append(p)
            if not flight:
                return
            k = finish()
            p = flight.popleft()
            total[p] = reader.total_ns
            opened[p] = reader.open_ns
            nbytes[p] = k
            if reader.throttled:
                throttled[p] = reader.throttled
            count += 1
            done[w] = count
