"""A Feed (one GPU's pipeline) as the Loader a training lane reads through (engines.Loader): the same `read_epoch`,
consumer, counters and summary as the raw reader's. The library reads inside, so no sample has a read latency; the
byte counts are the manifest's sizes of the samples delivered (docs/pipelines.md). A user's pipeline that raises
ends the epoch with UserCodeError."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from iobench.errors import UserCodeError, UserError
from iobench.pipelines import Feed, Shape, Spec, count, make
from iobench.record.recorder import EpochRecorder
from iobench.sources import Source

if TYPE_CHECKING:
    from iobench.pipelines.user import UserFeed


class Delivered:
    """A pipeline's batch as the consumer takes it: its sample count (`positions`' length) and, for a real GPU step,
    its images where they are a uint8 N x 3 x H x W tensor (else the step runs on a synthetic batch)."""

    def __init__(self, n: int, batch: Any):
        self.positions = np.arange(n)
        first = batch[0] if isinstance(batch, list | tuple) and batch else None
        uint8 = getattr(first, "ndim", 0) == 4 and str(getattr(first, "dtype", "")) == "torch.uint8"
        self.data = first if uint8 else None


class PipelineLoader:
    """One GPU's pipeline through one epoch, as a Loader: `epoch` iterates the Feed's batches for `epoch_no`."""

    name = "pipeline"
    depth = 1
    io_timeout_s: float | None = None  # the library reads: no watchdog of iobench's (said in docs/pipelines.md)
    left_behind: str | None = None

    def __init__(self, spec: Spec, feed: Feed, epoch_no: int, workers: int, batch_size: int, sizes: np.ndarray,
                 first: bool = True, error: Callable[[BaseException], UserCodeError] | None = None):
        self.spec, self.feed, self.epoch_no, self.sizes, self._error = spec, feed, epoch_no, sizes, error
        self.first = first  # the Feed's first epoch
        self.workers, self.batch_size = workers, batch_size
        self.concurrency = max(workers, 1)
        self._halt = False

    def halt(self) -> None:
        self._halt = True

    def close(self) -> None:
        """The Feed lives across the training run's epochs: its owner closes it."""

    def epoch(self, source: Source, order: np.ndarray, rec: EpochRecorder,
              on_tick: Callable[[int], None] | None = None,
              on_batch: Callable[[Any], None] | None = None) -> None:
        """Deliver one epoch of the pipeline to `on_batch`, at most the lane's share (`order`'s length) of samples."""
        share, done = len(order), 0
        rec.start()
        try:
            it = self._user(lambda e: iter(self.feed.batches(e)), self.epoch_no)
            while done < share:
                # the last batch is held while the library makes this one, as a job's `for batch in loader` holds it:
                # freed first, DALI's output memory was reused, where a job's next batch faults in fresh pages (25-30%
                # less CPU per sample than DALI run alone, docs/pipelines.md)
                batch = self._user(next, it, None)
                if batch is None:
                    break
                n = min(self._user(count, batch), share - done)
                rec.nbytes[done:done + n] = self.sizes[order[done:done + n]]
                done += n
                rec.done[0] = done
                if not rec.t_first:
                    rec.t_first = perf_counter()
                if on_batch is not None:
                    on_batch(Delivered(n, batch))
                rec.delivered(on_tick)
                if self._halt:
                    raise KeyboardInterrupt
            if done == 0 and not self.first and self.spec.kind == "user":
                raise UserError(f"--pipeline {self.spec.text}: what it returned gave no batch in a later epoch (an "
                                "iterator used up by the first): return something iterated afresh each epoch, e.g. "
                                "a DataLoader")
        finally:
            rec.stop()
            if on_tick:
                on_tick(rec.completed())

    def _user(self, call: Callable[..., Any], *args: Any) -> Any:
        """`call(*args)`, where the user's code runs: what it raises is theirs (UserCodeError)."""
        try:
            return call(*args)
        except Exception as exc:
            if self._error is None or isinstance(exc, UserCodeError):
                raise
            raise self._error(exc) from exc


class Feeds:
    """The Feeds of the training run being measured, one per GPU, kept across its epochs (a job makes its loader
    once and iterates it each epoch); a run of another shape (pipeline, GPUs, workers) makes new ones. The training
    phase releases them after each pipeline's search."""

    def __init__(self) -> None:
        self.key: tuple = ()
        self.feeds: list[Feed] = []
        self.epochs = 0

    def loaders(self, spec: Spec, paths: Any, sizes: np.ndarray, gpus: int, workers: int, batch_size: int,
                seed: int, epoch: int, real_gpus: bool) -> list[PipelineLoader]:
        """One PipelineLoader per GPU for `epoch`; GPU r of `gpus` reads its shard (`real_gpus`: on cuda:r)."""
        key = (spec.text, id(paths), gpus, workers, batch_size, seed, real_gpus)
        if key != self.key:
            self.release()
            # the folder an ImageFolder is given: the class folders' parent (of a dataset iobench made, its train/)
            root = Path(os.path.dirname(os.path.dirname(paths[0])))
            self.feeds = [make(spec, Shape(paths, root, batch_size, workers, seed, r, gpus, r if real_gpus else None))
                          for r in range(gpus)]
            self.key = key
        self.epochs += 1
        return [PipelineLoader(spec, f, epoch, workers, batch_size, sizes, first=self.epochs == 1,
                               error=cast("UserFeed", f).error if spec.kind == "user" else None) for f in self.feeds]

    def release(self) -> None:
        for f in self.feeds:
            f.close()
        self.key, self.feeds, self.epochs = (), [], 0


FEEDS = Feeds()
