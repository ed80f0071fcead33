"""The training search's one rule (answer/search.py) on given figures: the same measured AUs give the same shapes in
the documented order; a run within 5% of the AU target is made again and its count judged on the mean; the answer
reads the counts as the search judged them. Warm epochs lengthened by passes: the order of each pass, and the
cold epoch too short to count, labelled with the --files that would last the floor."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from test_verdict import H200, _result, _run, _training

from iobench.answer.client import verdict
from iobench.answer.rules import validity
from iobench.answer.search import MAX_LOADER_PROCESSES, count_aus, next_shape, workers_per_gpu
from iobench.answer.sizing import passes_for
from iobench.record.order import epoch_order
from iobench.result import Settings


def _settings(**kw) -> Settings:
    return Settings(orders=["shuffled"], concurrency=[2, 4, 8], cache=["cold"], epochs=1, seed=0,
                    rate_per_gpu=1000.0, au_target=0.9, **kw)


def _walk(settings: Settings, supply: float, au: Callable[[int, int], float]) -> list[tuple[int, int]]:
    """The shapes the phase runs, in order, with `au(gpus, k)` the AU of the k-th run at that count."""
    measured: dict[int, list[float | None]] = {}
    shapes = []
    while (shape := next_shape(settings, supply, measured)) is not None:
        shapes.append(shape)
        n = shape[0]
        measured.setdefault(n, []).append(au(n, len(measured.get(n, []))))
        assert len(shapes) < 20
    return shapes


def _client(capacity: float) -> Callable[[int, int], float]:
    """A client that delivers `capacity` samples/s in all to GPUs of 1,000 samples/s each."""
    return lambda n, k: min(1.0, capacity / (1000 * n))


def test_the_same_figures_give_the_same_shapes_in_the_documented_order() -> None:
    s = _settings()
    # the supply predicts 2 (2,500 / 900): 2 fed, 3 fed, 4 starved (82.5%, outside 5% of 90%): the boundary
    shapes = _walk(s, 2500, _client(3300))
    assert shapes == [(2, 8), (3, 8), (4, 8)]
    assert _walk(s, 2500, _client(3300)) == shapes  # deterministic: the same figures, the same shapes
    # every count at one shape, whatever the supply predicted first: from 5 the walk comes down to the same boundary
    assert _walk(s, 5000, _client(3300)) == [(5, 6), (4, 8), (3, 8)]
    # the count asked comes first; a starved 1 ends the walk at once
    assert _walk(_settings(gpus=3), 400, _client(500)) == [(3, 8), (1, 8)]
    assert [workers_per_gpu(s, n) for n in (1, 4, 5, 16, 40)] == [8, 8, 6, 2, 1]
    assert workers_per_gpu(_settings(), 5) * 5 <= MAX_LOADER_PROCESSES


def test_a_run_near_the_au_line_is_made_again_and_its_count_judged_on_the_mean() -> None:
    s = _settings()
    aus = {2: [0.99], 3: [0.91, 0.88]}  # 91%: within 5% of 90%, made again; mean 89.5%: 3 not fed
    shapes = _walk(s, 2500, lambda n, k: aus[n][k])
    assert shapes == [(2, 8), (3, 8), (3, 8)]
    aus[3] = [0.91, 0.92]  # mean 91.5%: fed; 4 next
    aus[4] = [0.70]
    assert _walk(s, 2500, lambda n, k: aus[n][k]) == [(2, 8), (3, 8), (3, 8), (4, 8)]
    # the answer reads the counts as the search judged them: 3 not fed on the mean of its two runs
    runs = [_training(2, 0.99, 1980), _training(3, 0.91, 2730), _training(3, 0.88, 2640)]
    assert {n: round(c.au, 4) for n, c in count_aus(runs).items()} == {2: 0.99, 3: 0.895}
    v = verdict(_result([_run(1, 1000), _run(4, 3000), _run(16, 3100), *runs], **H200))
    assert v.client_gpus_fed == 2 and v.gpus_fed_confirmed, v.text
    assert "run 2 times: their mean) reached AU 89.5%" in v.text, v.text


def test_a_failed_run_stops_the_walk() -> None:
    assert _walk(_settings(), 2500, lambda n, k: None) == [(2, 8)]  # type: ignore[arg-type, return-value]


def test_each_pass_of_a_lengthened_epoch_is_shuffled_afresh() -> None:
    one = epoch_order("shuffled", 100, 0, 3)
    three = epoch_order("shuffled", 100, 0, 3, passes=3)
    assert len(three) == 300 and np.array_equal(three[:100], one)
    passes = three.reshape(3, 100)
    assert all(sorted(p.tolist()) == list(range(100)) for p in passes)
    assert not np.array_equal(passes[0], passes[1]) and not np.array_equal(passes[1], passes[2])
    assert np.array_equal(epoch_order("sequential", 5, 0, 1, passes=2), [0, 1, 2, 3, 4, 0, 1, 2, 3, 4])


def test_a_short_warm_epoch_needs_passes_and_a_short_cold_one_is_labelled() -> None:
    warm = _run(4, 40_000, "warm", measures="page-cache", samples=8000)  # 0.2 s
    assert validity(warm) is not None and passes_for(warm) == 5  # 5 x 0.2 s: ~1 s
    assert passes_for(_run(4, 4000, "warm", measures="page-cache", samples=8000)) == 1  # 2 s: counts as read
    cold = _run(4, 40_000, samples=8000)
    assert passes_for(cold) == 1
    assert "a cold epoch is not lengthened by passes" in (validity(cold) or "") and "--files 40,000" in validity(cold)
