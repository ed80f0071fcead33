"""Engines: how concurrently samples are fetched. Each engine is one module behind `Engine`:
threads.py (a thread pool) and dataloader.py (a torch DataLoader; torch is imported only there)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from iobench.measure import EpochRecorder
from iobench.sources import Source


class Engine(Protocol):
    name: str  # the value of runs[].engine
    concurrency: int  # readers at once: threads, or worker processes (1 when the main process reads)

    def epoch(self, source: Source, order: np.ndarray, rec: EpochRecorder,
              on_tick: Callable[[int], None] | None = None) -> None:
        """Read every sample of `order` once, recording each at its position in `rec`."""
        ...
