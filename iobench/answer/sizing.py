"""How much work makes an epoch count, both rules: enough batches per reader before anything is measured
(`too_few_files`), and the passes a warm epoch under MIN_SECONDS is read again as (`passes_for`); a cold epoch is
never lengthened (its second pass would read warm). README.md: How the verdict is reached."""

from __future__ import annotations

import math

from iobench.answer.rules import EPOCH_TARGET_S, MIN_BATCHES_PER_READER, MIN_SECONDS, MIN_TRAIN_STEPS, validity
from iobench.result import Run, Settings

MAX_PASSES = 64  # a pass this short is start-up alone: the epoch stays as measured (and invalid) past this


def passes_for(run: Run, passes: int = 1) -> int:
    """The passes a warm epoch of `passes` passes needs to last EPOCH_TARGET_S, when it lasted under MIN_SECONDS and
    that alone made it invalid; else `passes` (it counts as read, or no number of passes would make it count)."""
    if run.cache != "warm" or not run.complete or run.seconds >= MIN_SECONDS or passes >= MAX_PASSES:
        return passes
    if validity(run.model_copy(update={"seconds": MIN_SECONDS})) is not None:  # invalid for another reason too
        return passes
    return min(MAX_PASSES, max(passes + 1, math.ceil(passes * EPOCH_TARGET_S / max(run.seconds, 1e-3))))


def too_few_files(settings: Settings, files: int, ranks: int | None = None, named: bool = False) -> str | None:
    """Why a run of these settings over `files` samples cannot count, known before anything is measured: a reader
    count of the sweep that would get fewer than MIN_BATCHES_PER_READER batches (a distributed run: a rank fewer
    than MIN_TRAIN_STEPS + 1 steps), with the --files that would (`named`: a dataset named with --dataset, which
    --files does not shape: a dataset of that many files). None when every run can count by its size (its
    seconds are judged once measured)."""
    batch = settings.batch_size if settings.engine == "dataloader" else 1
    unit = f"batches of {batch}" if settings.engine == "dataloader" else "samples"
    counted = f"{files:,} file gives" if files == 1 else f"{files:,} files give"

    def more(need: int) -> str:
        return f"a dataset of {need:,} files or more" if named else f"--files {need:,} or more"
    if ranks is not None:
        steps = files // ranks // batch
        if steps >= MIN_TRAIN_STEPS + 1:
            return None
        need = (MIN_TRAIN_STEPS + 1) * batch * ranks
        return (f"{counted} each of {ranks} ranks {steps} {unit}, fewer than the {MIN_TRAIN_STEPS + 1} an "
                f"epoch's AU needs: give {more(need)} (or a smaller --batch-size)")
    if not settings.replay:
        return None
    batches = math.ceil(files / batch)
    short = [c for c in settings.concurrency if batches / max(c, 1) < MIN_BATCHES_PER_READER]
    if not short:
        return None
    most = max(short)
    need = MIN_BATCHES_PER_READER * batch * max(most, 1)
    fit = [c for c in settings.concurrency if c not in short]
    words = "thread" if settings.engine == "threads" else "DataLoader worker"
    instead = (f", or --{'threads' if settings.engine == 'threads' else 'workers'} {','.join(map(str, fit))}"
               if fit else "")
    return (f"{counted} {most} {words}{'s' if most != 1 else ''} {batches / max(most, 1):.1f} {unit} each, "
            f"fewer than the {MIN_BATCHES_PER_READER} a run needs to count: give {more(need)}{instead}"
            + (" (or a smaller --batch-size)" if settings.engine == "dataloader" else ""))
