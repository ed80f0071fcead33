"""Engines: how concurrently samples are fetched, each one module behind `Engine`: threads.py (a thread pool) and
dataloader.py (a torch DataLoader; torch is imported only there). `make` makes the one a run's settings name, or the
`Loader` a training loop reads through. Both raise `StorageStalled` (iobench/host/stall.py) when nothing was read for
`io_timeout_s`, leaving the stuck readers behind."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, Protocol, overload

import numpy as np

from iobench.errors import UserError
from iobench.record.recorder import EpochRecorder
from iobench.sources import Source

if TYPE_CHECKING:
    from iobench.engines.batches import Batch
    from iobench.result import Settings


class Engine(Protocol):
    name: str  # the value of runs[].engine
    concurrency: int  # readers at once: threads, or worker processes (1 when the main process reads)
    depth: int  # requests in flight per reader (objects; 1: read one at a time)
    io_timeout_s: float | None  # no read finished for this long: StorageStalled (None: no watchdog)
    left_behind: str | None  # after an epoch cut short: the readers stuck in IO that were left behind, in words

    # read-only: so an engine may hold an int (dataloader) or None (threads) in them
    @property
    def workers(self) -> int | None:
        """DataLoader worker processes (0: the main process reads); None: the engine has none."""
        ...

    @property
    def batch_size(self) -> int | None:
        """Samples per batch; None: the engine reads sample by sample."""
        ...

    def epoch(self, source: Source, order: np.ndarray, rec: EpochRecorder,
              on_tick: Callable[[int], None] | None = None) -> None:
        """Read every sample of `order` once, recording each at its position in `rec`."""
        ...

    def close(self) -> None:
        """Stop what outlives an epoch (persistent workers); the next epoch starts afresh."""
        ...


class Loader(Engine, Protocol):
    """An engine a training loop reads through (the DataLoader): each batch goes to `on_batch` in the loop's thread,
    and `halt` stops a running epoch from another one."""

    def epoch(self, source: Source, order: np.ndarray, rec: EpochRecorder,
              on_tick: Callable[[int], None] | None = None,
              on_batch: Callable[[Batch], None] | None = None) -> None: ...

    def halt(self) -> None:
        """Ask a running `epoch()` (in another thread) to stop, as Ctrl-C would."""
        ...


@overload
def make(settings: Settings, readers: int, *, loader: Literal[False] = False, depth: int = 1) -> Engine: ...


@overload
def make(settings: Settings, readers: int, *, loader: Literal[True], depth: int = 1) -> Loader: ...


def make(settings: Settings, readers: int, *, loader: bool = False, depth: int = 1) -> Engine | Loader:
    """The engine `settings.engine` names, with `readers` threads or DataLoader workers, each keeping `depth`
    requests in flight (objects); with `loader`, the DataLoader whatever it names (a training run's GPUs and a
    distributed rank read through one)."""
    # Imported on use: torch only where the DataLoader is asked for; threads.py imports this module.
    if loader or settings.engine == "dataloader":
        from iobench.engines.dataloader import DataLoaderEngine

        return DataLoaderEngine(readers, settings.batch_size, settings.prefetch_factor, decode=settings.decode,
                                io_timeout_s=settings.io_timeout_s, depth=depth)
    if settings.decode:
        raise UserError("--decode needs --engine dataloader (decode runs in its worker processes)")
    from iobench.engines.threads import ThreadEngine

    return ThreadEngine(readers, io_timeout_s=settings.io_timeout_s, depth=depth)
