"""DataLoader engine, the main side: a real `torch.utils.data.DataLoader` over the sample source (batches.py: the
worker side and its one-tensor batch format), with a batch sampler handing out the epoch's order as (first position,
indices), so records land at their position though the order changes every epoch and the workers persist. Each
batch's figures go where the recorder wants them, and the batch to the training loop (`on_batch`).

With a watchdog (`io_timeout_s`) the main process waits for batches with the DataLoader's own `timeout=` set to a
short poll (no cost while batches come); at each poll that finds none it reads the samples the workers finished
(a shared counter each bumps per sample), so a slow batch still reading is not a stall. Stopping the workers is
bounded: GRACE_S to finish, then SIGKILL and KILL_WAIT_S; a worker still there is stuck in uninterruptible IO, left
behind (its pid in `left_behind`) and struck from multiprocessing's children, whose exit handler would wait for it.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import warnings
from collections.abc import Callable
from time import perf_counter
from typing import Any

import numpy as np

from iobench.engines.batches import (
    CROP,
    DECODE_CPU_NS,
    DECODE_NS,
    META_ROWS,
    NBYTES,
    OPEN_NS,
    POS,
    THROTTLED,
    TOTAL_NS,
    Batch,
    SourceDataset,
    import_torch,
    worker_start,
)
from iobench.host.stall import (
    GRACE_S,
    KILL_WAIT_S,
    StorageStalled,
    Watch,
    deliver,
    left_behind_text,
    signals_held,
    stop_signals_deferred,
)
from iobench.record.recorder import EpochRecorder
from iobench.sources import Source

POLL_S = 1.0  # with a watchdog: how long the main process waits for a batch before it looks at the workers


class _Batches:
    """Batch sampler over the current epoch's order: yields (first position, order[p0:p0+b]). Its order is
    set before each epoch; the DataLoader iterates it in the main process at the start of each epoch."""

    def __init__(self, batch_size: int):
        self.batch_size = batch_size
        self.order = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return -(-len(self.order) // self.batch_size)

    def __iter__(self):
        order, b = self.order, self.batch_size
        for p0 in range(0, len(order), b):
            yield p0, order[p0:p0 + b]


def _identity(batch):
    return batch


@contextlib.contextmanager
def _no_worker_count_warning():
    """torch warns (on making the loader and on each fresh iterator) when workers exceed the usable cores;
    a worker sweep does that on purpose, and the caller knows the core count."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        yield


class DataLoaderEngine:
    """Reads an epoch through a torch DataLoader with `workers` processes (0: in the main process).
    The loader and its workers (persistent) live across `epoch()` calls on the same source;
    `close()` (or leaving a `with` block) shuts them down."""

    name = "dataloader"

    def __init__(self, workers: int, batch_size: int = 256, prefetch_factor: int = 2, decode: bool = False,
                 io_timeout_s: float | None = None, depth: int = 1):
        if workers < 0 or batch_size < 1 or prefetch_factor < 1:
            raise ValueError("workers >= 0, batch_size >= 1 and prefetch_factor >= 1")
        import_torch()
        self.workers = workers
        self.concurrency = max(workers, 1)  # workers=0: the main process reads, one at a time
        self.depth = depth  # requests in flight per worker (objects), within its batch
        self.batch_size = batch_size
        self.prefetch_factor = prefetch_factor
        self.decode = decode
        self._source: Source | None = None
        self._loader: Any = None
        self._sampler: _Batches | None = None
        self._it: Any = None
        self._busy: np.ndarray | None = None
        self._finished: np.ndarray | None = None  # per worker, samples it finished (shared): what the watchdog reads
        self._held: dict[tuple[int, int], Any] = {}  # (worker, slot): its batch buffer, as a worker sent it once
        # No sample finished by a worker for this long: StorageStalled (None: no watchdog). Needs workers:
        # with workers=0 the main process itself reads, and a read stuck in the kernel cannot be watched from there.
        self.io_timeout_s = io_timeout_s
        self.left_behind: str | None = None  # after workers were stopped: those stuck in IO, left behind
        self._poll_s = 0.0  # the loader's `timeout=`: 0 without a watchdog
        self._halt = False  # set from another thread (`halt()`): the epoch stops at its next batch or poll
        self._stuck: tuple[int, ...] = ()  # pids of the workers left behind by the last shutdown

    def __enter__(self) -> DataLoaderEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def halt(self) -> None:
        """Ask a running `epoch()` (in another thread) to stop, as Ctrl-C would, within POLL_S with a watchdog."""
        self._halt = True

    def _poll_for(self) -> float:
        if self.workers == 0 or self.io_timeout_s is None:
            return 0.0
        return max(0.01, min(POLL_S, self.io_timeout_s / 4))

    def _loader_for(self, source: Source):
        if self._loader is not None and self._source is source and self._poll_s == self._poll_for():
            return self._loader
        self.close()
        torch = import_torch()
        self._sampler = _Batches(self.batch_size)
        multi = self.workers > 0
        self._poll_s = self._poll_for()
        # prefetch_factor batches per worker wait in the queue, one is with the main process, one is being
        # filled: that many slots make reuse the rule and a fresh buffer the exception
        busy = torch.zeros((max(self.workers, 1), self.prefetch_factor + 2), dtype=torch.int32)
        finished = torch.zeros(max(self.workers, 1), dtype=torch.int64)
        if multi:  # before the workers fork: they inherit the shared mapping
            busy.share_memory_()
            finished.share_memory_()
        self._busy, self._finished = busy.numpy(), finished.numpy()
        self._held = {}  # new workers: each sends its buffers afresh
        with _no_worker_count_warning():
            self._loader = torch.utils.data.DataLoader(
                SourceDataset(source, self.decode, busy, self.depth, self.io_timeout_s, finished),
                batch_sampler=self._sampler, num_workers=self.workers,
                collate_fn=_identity, worker_init_fn=worker_start if multi else None,
                prefetch_factor=self.prefetch_factor if multi else None,
                persistent_workers=multi, timeout=self._poll_s)
        self._source = source
        return self._loader

    def epoch(self, source: Source, order: np.ndarray, rec: EpochRecorder,
              on_tick: Callable[[int], None] | None = None,
              on_batch: Callable[[Batch], None] | None = None) -> None:
        """Read every sample of `order` once, each batch to `on_batch` as a training loop gets it. A worker's OSError
        is raised here; Ctrl-C and StorageStalled stop the workers, leaving in `rec` what was read."""
        torch = import_torch()
        self._halt = False
        self.left_behind = None
        order = np.ascontiguousarray(order, dtype=np.int64)
        loader = self._loader_for(source)
        assert self._sampler is not None  # _loader_for made it with the loader
        self._sampler.order = order
        # where each row of a batch's meta goes: the record's array of that figure, at the samples' positions
        rows = [(rec.total_ns, TOTAL_NS), (rec.open_ns, OPEN_NS), (rec.nbytes, NBYTES), (rec.throttled, THROTTLED)]
        if self.decode:  # the recorder is the epoch's own: its decode arrays are made here
            rec.decode_ns, rec.decode_cpu_ns = np.zeros(len(order), np.int64), np.zeros(len(order), np.int64)
            rows += [(rec.decode_ns, DECODE_NS), (rec.decode_cpu_ns, DECODE_CPU_NS)]
        done = rec.done
        done.extend([0] * (max(self.workers, 1) - len(done)))  # a slot per worker
        rec.start()
        try:
            held: list[int] = []
            with _no_worker_count_warning(), signals_held(held):  # see bounded.fork_child: workers fork here
                it = self._it = self._start(loader)
            deliver(held)
            busy, kept = self._busy, self._held
            assert busy is not None  # _loader_for made it with the loader
            # a poll (_poll_s) only with a timeout (_poll_for)
            watch = Watch(self.io_timeout_s) if self._poll_s and self.io_timeout_s is not None else None
            while (item := self._next(it, rec, on_tick, watch)) is not None:
                buf, k, n, used, worker, pid, slot, error = item
                if buf is None:  # the slot's buffer, sent with an earlier batch
                    buf = kept[worker, slot]
                elif slot >= 0:
                    kept[worker, slot] = buf
                hdr = META_ROWS * k * 8
                meta = buf[:hdr].numpy().view(np.int64).reshape(META_ROWS, k)[:, :n]
                pos = meta[POS]
                for array, row in rows:
                    array[pos] = meta[row]
                done[worker] += n
                if error is not None:
                    raise error
                if on_batch is not None:
                    data = buf[hdr:used]
                    if self.decode:
                        data = data.view(n, 3, CROP, CROP)
                    on_batch(Batch(data, buf[:hdr].view(torch.int64).view(META_ROWS, k)[:, :n], pid))
                if slot >= 0:
                    busy[worker, slot] = 0  # the worker may refill this buffer now
                del buf, item
                rec.delivered(on_tick)  # the first ends the workers' start-up and first reads
                if self._halt:
                    raise KeyboardInterrupt
            if on_tick:
                on_tick(rec.completed())
        except BaseException as exc:
            rec.stop()  # before the workers are stopped: that is not the epoch's
            stalled = isinstance(exc, StorageStalled)
            self._shut(stopping=True, graceful=not stalled)  # workers may be mid-batch, stuck or gone: start afresh
            if isinstance(exc, StorageStalled):
                exc.left_behind = self.left_behind
                exc.stuck = self._stuck
            raise
        else:
            rec.stop()
        finally:
            if self.workers == 0:
                self._it = None  # no workers to persist: the iterator ends with the epoch

    def _start(self, loader):
        """The epoch's iterator. Persistent workers are resumed, and torch waits for each to answer with the
        loader's `timeout`, here a short poll: an idle worker answers at once, so one that does not answer within
        `io_timeout_s` is stuck (in a read of the storage, or stopped): StorageStalled, not torch's RuntimeError."""
        resumed = loader._iterator
        if resumed is None or not self._poll_s or self.io_timeout_s is None:  # a poll only with a timeout (_poll_for)
            return iter(loader)
        resumed._timeout = self.io_timeout_s
        try:
            return iter(loader)
        except RuntimeError as exc:
            if not str(exc).startswith("DataLoader timed out"):
                raise
            raise StorageStalled.after(len(getattr(resumed, "_workers", [])), self.io_timeout_s) from None
        finally:
            resumed._timeout = self._poll_s

    def _next(self, it, rec: EpochRecorder, on_tick: Callable[[int], None] | None, watch: Watch | None):
        """The next batch, or None at the end of the epoch; at each poll without one (a watchdog), tick and judge
        whether the workers still finish samples."""
        while True:
            try:
                return next(it)
            except StopIteration:
                return None
            except RuntimeError as exc:
                if watch is None or not str(exc).startswith("DataLoader timed out"):
                    raise
            if self._halt:
                raise KeyboardInterrupt
            rec.tick(on_tick)
            assert self._finished is not None  # _loader_for made it with the loader
            watch.check(int(self._finished.sum()), lambda: _pending(it))

    def close(self) -> None:
        """Shut the workers down (within GRACE_S + KILL_WAIT_S; see the module's docstring for those that stay
        stuck); the next epoch starts a new loader."""
        self._shut(stopping=False, graceful=True)

    def _shut(self, stopping: bool, graceful: bool) -> None:
        it, self._it = self._it, None
        loader, self._loader = self._loader, None
        self._source = None
        self._held = {}
        if loader is not None:
            loader._iterator = None  # `it` itself: persistent workers' loader hands out its one iterator
        self._stuck = ()
        if it is None or getattr(it, "_shutdown", True):
            return
        with stop_signals_deferred(stopping):  # a second Ctrl-C must not cut the clean-up short
            self._stuck = tuple(_stop_workers(it, graceful))
        if self._stuck:
            self.left_behind = left_behind_text(self._stuck)

    def __del__(self):
        with contextlib.suppress(Exception):  # interpreter shutdown: torch may be half gone
            self.close()


def _pending(it) -> int:
    """Reads outstanding: workers with a batch asked of them and not delivered (each reads one sample at a time)."""
    info = getattr(it, "_task_info", None)
    if info is None:
        return len(getattr(it, "_workers", [])) or 1
    return len({v[0] for v in info.values() if len(v) == 1}) or 1


def _join_all(workers: list, wait_s: float) -> None:
    deadline = perf_counter() + wait_s
    for w in workers:
        w.join(max(0.0, deadline - perf_counter()))


def _stop_workers(it, graceful: bool) -> list[int]:
    """Stop an iterator's workers as torch's `_shutdown_workers` does, in bounded time (the module's docstring):
    `graceful`, told to stop first. Returns the pids of those stuck in IO, left behind."""
    workers = list(getattr(it, "_workers", []))
    if getattr(it, "_shutdown", True) or not workers:  # single-process iterators have no workers
        return []
    from torch.utils.data import _utils

    if _utils.python_exit_status is not False:  # Python is exiting: multiprocessing's exit handler ends them (as torch)
        return []
    it._shutdown = True  # torch's own shutdown (and the iterator's __del__) does nothing from here on
    try:
        if graceful:
            it._workers_done_event.set()
            for q in it._index_queues:
                with contextlib.suppress(Exception):
                    q.put(None)  # the worker loop's signal to end
            _join_all(workers, GRACE_S)
    finally:
        if it._worker_pids_set:  # else torch's SIGCHLD handler raises for the workers killed below
            _utils.signal_handling._remove_worker_pids(id(it))
            it._worker_pids_set = False
        for w in workers:
            if w.is_alive():
                with contextlib.suppress(Exception):
                    w.kill()
        _join_all(workers, KILL_WAIT_S)
        for q in [*it._index_queues, it._worker_result_queue]:
            with contextlib.suppress(Exception):
                q.cancel_join_thread()  # a feeder thread blocked on a stuck worker's pipe must not hold the exit
                q.close()
        stuck = [w for w in workers if w.is_alive()]
        for w in stuck:
            multiprocessing.process._children.discard(w)  # type: ignore[attr-defined]
    return [w.pid for w in stuck]
