"""The consumer stands for the GPUs: it takes each batch and "computes" for batch / rate seconds (a sleep,
as MLPerf Storage / DLIO emulate training), then asks for the next batch. Accelerator utilisation (AU) =
compute time / wall time, the first step excluded, as MLPerf Storage defines it: a GPU waiting for data
shows up as AU below 1. `make_consumer` makes the one a run's settings name, for every caller (a training run's
GPUs, a distributed rank)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from iobench.gpu.benchmark import TrainStep

if TYPE_CHECKING:
    from iobench.engines.batches import Batch
    from iobench.result import Settings


class SleepConsumer:
    """One emulated GPU consuming `rate` samples/s. Call it with each batch's sample count (and images)."""

    def __init__(self, rate: float, decode: bool = False):
        if rate <= 0:
            raise ValueError("a consumer's rate must be > 0")
        self.rate = rate
        self.decode = decode  # the loader decodes: each batch's images are computed on
        self.steps = 0
        self.samples = 0  # consumed in steps 2..n
        self.compute_s = 0.0  # compute time of steps 2..n
        self.t_first_done: float | None = None  # end of step 1: AU's clock starts here
        self.t_last_done = 0.0
        self.waits: list[float] = []  # per batch after the first: seconds from the last step's end to its arrival

    def _compute(self, samples: int, images) -> float:
        """Stand in for the GPU's step; returns its compute time. A sleep counts as its nominal length: the
        scheduler's oversleep (~0.1-1 ms on a busy host) is emulation error, not a GPU at work."""
        time.sleep(samples / self.rate)
        return samples / self.rate

    def __call__(self, samples: int, images=None) -> None:
        if self.steps:
            self.waits.append(time.perf_counter() - self.t_last_done)
        compute = self._compute(samples, images)
        now = time.perf_counter()
        self.steps += 1
        if self.steps == 1:
            self.t_first_done = now
        else:
            self.compute_s += compute
            self.samples += samples
        self.t_last_done = now

    def batch(self, batch: Batch) -> None:
        """One batch as the loader hands it over (`on_batch`): its samples, and its images where it decodes."""
        self(len(batch.positions), batch.data if self.decode else None)

    @property
    def au(self) -> float | None:
        """compute / wall over steps 2..n; None with fewer than two steps."""
        if self.t_first_done is None or self.steps < 2:
            return None
        wall = self.t_last_done - self.t_first_done
        return min(1.0, self.compute_s / wall) if wall > 0 else None

    @property
    def window_s(self) -> float | None:
        """AU's window: from step 1's end to the last step's end; None with fewer than two steps."""
        wall = self.t_last_done - (self.t_first_done or self.t_last_done)
        return wall if self.steps >= 2 and wall > 0 else None


class CudaConsumer(SleepConsumer):
    """A real GPU instead of a sleep: each batch is one training step of the model on the local GPU (on the
    decoded images when the loader decodes, else on a synthetic batch of the same size), waited for, so
    compute time is the GPU's own. AU is counted as for the sleep consumer."""

    def __init__(self, model: str, batch: int, device: str = "cuda", decode: bool = False):
        super().__init__(rate=1.0, decode=decode)  # rate unused: the step's own time is the compute time
        step = TrainStep(model, batch, device=device)
        for _ in range(3):  # first steps compile kernels and allocate: not part of AU
            step()
        step.sync()
        self._step = step

    def _compute(self, samples: int, images) -> float:
        """A real step, waited for: its measured time is the compute time."""
        start = time.perf_counter()
        self._step(images)
        self._step.sync()
        return time.perf_counter() - start


def make_consumer(settings: Settings, device_index: int) -> SleepConsumer:
    """The consumer `settings.consumer` names, standing for GPU `device_index` (a training run's r-th GPU, a rank's
    local rank): a real training step on cuda:`device_index`, else a sleep at `settings.rate_per_gpu`."""
    assert settings.rate_per_gpu is not None  # a training run's settings have it
    if settings.consumer == "cuda":
        return CudaConsumer(settings.model or "resnet50", settings.batch_size, device=f"cuda:{device_index}",
                            decode=settings.decode)
    return SleepConsumer(settings.rate_per_gpu, decode=settings.decode)
