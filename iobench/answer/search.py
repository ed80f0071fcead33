"""The training search's one rule (README.md: How the verdict is reached): the shape of a count
(`workers_per_gpu`), the counts in order (`next_shape`), the repeat of a run near the line and a count's AU
(`count_aus`, which the answer reads too). Deterministic given the measured figures, so identical runs try the same
shapes; the saturation point is not used (it moves between identical runs). phases/pipeline.py runs the shapes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from iobench.answer.rules import UNSTABLE, gpus_for
from iobench.result import Run, Settings

MAX_LOADER_PROCESSES = 32  # a training run needs gpus x workers processes on this client
MAX_TRAIN_COUNTS = 4  # GPU counts the walk visits for the boundary (besides the one at --gpus)
NEAR_AU = UNSTABLE  # an AU within 5% of the target (relative) is measured once more


def workers_per_gpu(settings: Settings, gpus: int) -> int:
    """Rule 1: the workers of each GPU in a training run at `gpus`."""
    most = max(max(settings.concurrency, default=1), 1)
    return max(1, min(most, MAX_LOADER_PROCESSES // gpus))


def near_target(au: float, target: float) -> bool:
    """Rule 3: an AU close enough to the target that one run does not tell which side it falls."""
    return abs(au - target) <= NEAR_AU * target


def fed(aus: list[float | None], target: float) -> bool | None:
    """A count's outcome from the AU of each of its runs: the mean reaches the target; None when a run at it could
    not be made or was invalid."""
    if not aus or any(a is None for a in aus):
        return None
    return sum(a for a in aus if a is not None) / len(aus) >= target


def next_shape(settings: Settings, supply_rate: float | None,
               measured: dict[int, list[float | None]]) -> tuple[int, int] | None:
    """Rules 2 and 3: the next training run's (GPUs, workers per GPU) given the AU of every run made so far, per
    GPU count (None: none could be made or it was invalid); None when the search is done."""
    tau = settings.au_target

    def pending(n: int) -> bool:
        aus = measured.get(n)
        return not aus or (len(aus) == 1 and aus[0] is not None and near_target(aus[0], tau))

    def shape(n: int) -> tuple[int, int]:
        return n, workers_per_gpu(settings, n)

    if settings.gpus is not None and pending(settings.gpus):
        return shape(settings.gpus)
    if supply_rate is None or settings.rate_per_gpu is None:
        return None
    n = max(1, gpus_for(supply_rate, settings.rate_per_gpu, tau))
    for _ in range(MAX_TRAIN_COUNTS):
        if pending(n):
            return shape(n)
        ok = fed(measured[n], tau)
        if ok is None:
            return None
        beside = n + 1 if ok else n - 1
        if beside == 0 or (beside in measured and not pending(beside) and fed(measured[beside], tau) is not ok):
            return None  # the boundary: n fed and n + 1 not, or n not fed and n - 1 fed (or n is 1)
        n = beside
    return None


@dataclass(frozen=True)
class CountAU:
    """A GPU count's AU as the search judged it: the mean over its runs at one shape (a run and its repeat), the
    best shape where a count ran at several (results written before this rule retried with more workers)."""

    au: float
    run: Run  # the last run of that shape, for its words
    runs: int


def count_aus(train: list[Run]) -> dict[int, CountAU]:
    """Per GPU count, its CountAU, from valid training runs with an AU (rules.training_runs)."""
    shapes: dict[tuple[int, int | None], list[Run]] = defaultdict(list)
    for r in train:
        if r.gpus and r.au is not None:
            shapes[(r.gpus, r.workers)].append(r)
    out: dict[int, CountAU] = {}
    for (gpus, _), runs in shapes.items():
        c = CountAU(sum(r.au or 0.0 for r in runs) / len(runs), runs[-1], len(runs))
        if gpus not in out or c.au > out[gpus].au:
            out[gpus] = c
    return out
