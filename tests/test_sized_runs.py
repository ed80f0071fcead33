"""Real runs of the CLI on the local disk, fio off: a warm epoch too short to count is read as more passes and counts
(no invalid row, its samples every pass); a training run that reads cold faster than the replay sweep's best sets
the storage figure, so the headline never names this client as the limit while saying it feeds more than the
storage (the old "the storage feeds 2 ... this client feeds 3: its input pipeline is the limit")."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import iobench

from iobench.answer.client import CLIENT_SIDE, verdict
from iobench.answer.rules import EPOCH_TARGET_S, MIN_SECONDS
from iobench.result import Result

# Whether a pass lasts under the floor, and a training run's rate against the sweep's, are rates: run alone
pytestmark = pytest.mark.quiet

pytest.importorskip("torch")  # training runs need DataLoader workers


def _run(mount: Path, *args: str) -> Result:
    out = mount / "out"
    proc = iobench("run", "--mount", str(mount), "--out", str(out), "--quiet", "--no-metadata", "--no-fio",
                   "--size-dist", "fixed:16kB", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Result.load(out / "result.json")


def test_a_warm_epoch_under_the_floor_is_read_as_passes_and_counts(tmp_path: Path) -> None:
    """2,000 files of 16 kB read warm by 2 or 4 workers: one pass lasts well under 0.5 s on any host. The default
    run's shape (DataLoader sweep, training at the count asked) keeps no invalid row: each warm epoch is several
    passes, its samples all of them; the training run lasts 2,000 / 1,500 s at its GPU's rate."""
    files = 2000
    r = _run(tmp_path, "--files", str(files), "--workers", "2,4", "--batch-size", "32", "--cache", "warm",
             "--rate", "1500", "--gpus", "1")
    replay = [x for x in r.runs if x.kind == "replay"]
    assert len(replay) == 2 and all(x.passes > 1 for x in replay), [(x.passes, x.seconds) for x in replay]
    assert not [x for x in r.runs if not x.valid], [(x.kind, x.invalid_reason) for x in r.runs]
    for x in replay:
        assert x.samples == x.passes * files and x.seconds >= MIN_SECONDS
        # each pass of the epoch it replaced lasted under the floor: passes were asked for ~EPOCH_TARGET_S
        assert x.seconds / x.passes < MIN_SECONDS and x.passes <= 2 * EPOCH_TARGET_S / (x.seconds / x.passes) + 1
    train = [x for x in r.runs if x.kind == "training"]
    assert train and all(x.passes == 1 for x in train)  # a training run is paced by its GPUs, not lengthened
    # the count asked is answered by its own run (the walk past it is the host's: from the warm replay's rate a fast
    # host predicts more GPUs than 2,000 files give AU steps for, and says so)
    assert r.verdict is not None and r.verdict.answer.startswith("Yes"), r.verdict.text


def test_the_client_never_feeds_more_than_the_storage_while_named_the_limit(tmp_path: Path) -> None:
    """One DataLoader worker reads the sweep; the training run at 4 GPUs reads cold with a worker each, in parallel,
    for GPUs too fast to be fed: faster than the sweep's best, with fio off, so it sets the storage figure. Re-judged
    (the same real result) at AU targets each training run reached, as the old headline did ("the storage feeds
    2 ... this client feeds 3: its input pipeline is the limit"), and at other GPU rates: no headline says this
    client feeds more than the storage while naming the client as the limit."""
    r = _run(tmp_path, "--files", "8000", "--workers", "1", "--batch-size", "16", "--cache", "cold", "--gpus", "4",
             "--rate", "5000")
    replay = [x for x in r.runs if x.kind == "replay" and x.valid]
    train = [x for x in r.runs if x.kind == "training" and x.valid and x.cache == "cold"]
    assert replay and train, [(x.kind, x.invalid_reason) for x in r.runs]
    fastest = max(train, key=lambda x: x.samples_per_s)
    assert fastest.samples_per_s > max(x.samples_per_s for x in replay)  # the precondition: training read faster
    assert r.verdict is not None and r.verdict.storage_samples_per_s == fastest.samples_per_s
    assert r.verdict.storage_from == f"training, {fastest.gpus} GPUs x 1 worker", r.verdict.storage_from
    judged = 0
    for x in train:
        for rate in (2500, 5000, 10000):
            s = r.settings.model_copy(update={"rate_per_gpu": float(rate), "au_target": (x.au or 0) - 0.005})
            v = verdict(r.model_copy(update={"settings": s, "verdict": None}))
            assert v.storage_samples_per_s is not None and v.storage_samples_per_s >= fastest.samples_per_s, v.text
            assert v.storage_gpus_fed is not None and v.client_gpus_fed is not None, v.text
            assert not (v.limit in CLIENT_SIDE and v.client_gpus_fed > v.storage_gpus_fed), v.text
            judged += v.client_gpus_fed >= (x.gpus or 0)
    assert judged  # a training run's count, fed at its own AU, was the client's answer somewhere above
