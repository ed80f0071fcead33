"""The consumer stands for the GPUs: it takes each batch and "computes" for batch / rate seconds (a sleep,
as MLPerf Storage / DLIO emulate training), then asks for the next batch. Accelerator utilisation (AU) =
compute time / wall time, the first step excluded, as MLPerf Storage defines it: a GPU waiting for data
shows up as AU below 1."""

from __future__ import annotations

import time


class SleepConsumer:
    """One emulated GPU consuming `rate` samples/s. Call it with each batch's sample count."""

    def __init__(self, rate: float):
        if rate <= 0:
            raise ValueError("a consumer's rate must be > 0")
        self.rate = rate
        self.steps = 0
        self.samples = 0  # consumed in steps 2..n
        self.compute_s = 0.0  # compute time of steps 2..n
        self.t_first_done: float | None = None  # end of step 1: AU's clock starts here
        self.t_last_done = 0.0

    def __call__(self, samples: int) -> None:
        start = time.perf_counter()
        time.sleep(samples / self.rate)
        now = time.perf_counter()
        compute = now - start  # as measured: the sleep's own overshoot is not waiting for data
        self.steps += 1
        if self.steps == 1:
            self.t_first_done = now
        else:
            self.compute_s += compute
            self.samples += samples
        self.t_last_done = now

    @property
    def au(self) -> float | None:
        """compute / wall over steps 2..n; None with fewer than two steps."""
        if self.t_first_done is None or self.steps < 2:
            return None
        wall = self.t_last_done - self.t_first_done
        return min(1.0, self.compute_s / wall) if wall > 0 else None

    @property
    def delivered_per_s(self) -> float | None:
        """Samples/s the input pipeline delivered over AU's window (steps 2..n)."""
        wall = self.t_last_done - (self.t_first_done or self.t_last_done)
        return self.samples / wall if self.steps >= 2 and wall > 0 else None
