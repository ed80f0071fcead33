"""A run's plan of steps and the ETAs read from it: each step (an epoch, a fio point, a metadata pass) has its work
(samples, files) and a kind whose steps share a rate; the rates measured so far (whole steps, their preparation
included: eviction, warming, fio's set-up) price the steps still to come. The terminal (iobench/ui.py) shows it."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class Step:
    phase: str  # metadata, replay, fio, training, mitigations
    what: str  # its words: "cold, 4 workers"
    work: float  # its units (an epoch's samples, the files fio reads)
    kind: str  # steps of one kind share a rate: "replay cold", "fio warm"
    seconds: float | None = None  # measured, once done


class Plan:
    """The steps of one run in the order they run; `start` and `end` follow the run through them."""

    def __init__(self, steps: list[Step]):
        self.steps = steps
        self.at = -1  # the step running (or last run)
        self.t0 = 0.0
        self.frac: float | None = None  # the running step's part done, where it is known

    def start(self, phase: str, what: str, work: float, kind: str) -> Step:
        """The next planned step of `phase` begins (one more is added where the plan had none left)."""
        nxt = next((i for i in range(self.at + 1, len(self.steps)) if self.steps[i].phase == phase), None)
        if nxt is None:
            last = max((i for i, s in enumerate(self.steps) if s.phase == phase), default=self.at)
            nxt = max(last, self.at) + 1
            self.steps.insert(nxt, Step(phase, what, work, kind))
        # steps of phases skipped over (the training a run could not make) are not to come any more
        self.steps = [s for i, s in enumerate(self.steps) if not (self.at < i < nxt)]
        self.at = self.at + 1
        step = self.steps[self.at]
        step.what, step.work, step.kind, step.seconds = what, work, kind, None
        self.t0, self.frac = time.perf_counter(), None
        return step

    def end(self) -> None:
        if 0 <= self.at < len(self.steps) and self.steps[self.at].seconds is None:
            self.steps[self.at].seconds = time.perf_counter() - self.t0

    def current(self) -> Step | None:
        return self.steps[self.at] if 0 <= self.at < len(self.steps) else None

    def place(self) -> tuple[int, int, int, int]:
        """(k, n) of the running step within its phase, then (k, n) within the run, from 1."""
        step = self.current()
        if step is None:
            return 0, 0, 0, len(self.steps)
        same = [i for i, s in enumerate(self.steps) if s.phase == step.phase]
        return same.index(self.at) + 1, len(same), self.at + 1, len(self.steps)

    def estimate(self, step: Step) -> float | None:
        """Seconds a step not yet run should take: its work at its kind's measured rate (else its phase's); a phase
        never measured: the mean step so far."""
        done = [s for s in self.steps if s.seconds is not None]
        measured = [s for s in done if s.work > 0]
        for pick in ([s for s in measured if s.kind == step.kind], [s for s in measured if s.phase == step.phase]):
            if pick:
                return sum(s.seconds or 0.0 for s in pick) / sum(s.work for s in pick) * step.work
        return sum(s.seconds or 0.0 for s in done) / len(done) if done else None

    def step_left(self) -> float | None:
        """Seconds left of the running step: from its part done, else its estimate."""
        step = self.current()
        if step is None or step.seconds is not None:
            return 0.0
        elapsed = time.perf_counter() - self.t0
        if self.frac is not None and self.frac >= 0.02:
            return elapsed * (1 - self.frac) / self.frac
        est = self.estimate(step)
        return None if est is None else max(est - elapsed, 0.0)

    def run_left(self) -> float | None:
        """Seconds left of the run: the running step's, then each later step's estimate (None: nothing measured)."""
        left = [self.step_left(), *(self.estimate(step) for step in self.steps[self.at + 1:])]
        return None if None in left else sum(s for s in left if s is not None)


def clock(seconds: float | None) -> str:
    """An ETA as a person reads it: 45s, 3m05s, 1h02m; '?' while nothing has been measured."""
    if seconds is None:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
