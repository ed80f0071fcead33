"""THE phase runner (docs/architecture.md) and what every phase shares (`RunContext`): a phase's steps each given
their line, an epoch read, recorded and saved at once; the one place a stall or an interruption ends the run with
what was measured kept (`run_phases`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from iobench.dataset import Manifest
from iobench.engines import Engine
from iobench.errors import Interrupted, UserCodeError, UserError, explain_oserror
from iobench.host.stall import StorageStalled
from iobench.phases.epoch import EpochSpec, Lane, measure_epoch
from iobench.progress import Plan, Step
from iobench.result import Result, Run, Settings
from iobench.sources import Source
from iobench.ui import UI


@dataclass
class RunContext:
    """What every phase of one measured run shares: the dataset, the settings, the result, where it is saved (after
    each record: an interrupted run keeps what it measured) and the terminal."""

    manifest: Manifest
    settings: Settings
    result: Result
    path: Path
    ui: UI

    def save(self) -> None:
        self.result.save(self.path)

    def warn(self, words: str | None) -> None:
        """Warn, once, and keep the warning in the result."""
        if words and words not in self.result.warnings:
            self.result.warnings.append(words)
            self.ui.warn(words)

    def record(self, *runs: Run) -> None:
        """Append measured runs to the result and save it at once."""
        self.result.runs.extend(runs)
        self.save()

    def kept(self) -> str:
        return f"kept what was measured in {self.path}"

    def kept_epochs(self) -> str:
        """`kept 2 measured epochs and the partial one it stopped in (complete: false) in PATH`: the epochs of the
        result, the one an interruption cut short said as such."""
        whole = sum(r.complete for r in self.result.runs)
        partial = len(self.result.runs) - whole
        said = [f"{whole} measured epoch{'s' if whole != 1 else ''}"] if whole else []
        if partial:
            said.append(("the partial one" if whole else "the partial epoch") + " it stopped in (complete: false)"
                        if partial == 1 else f"{partial} partial epochs (complete: false)")
        return f"kept {' and '.join(said) or 'no epoch'} in {self.path}"


def run_phases(ctx: RunContext, plan: Plan, phases: Sequence[Callable[[RunContext], None]]) -> None:
    """Each phase in turn, its table printed as it ends. The one place a run ends early, what was measured kept
    (a training run's partial epoch included): Ctrl-C or a stop signal anywhere (Interrupted), a storage that stopped
    answering in any step (StorageStalled, the processes left behind in IO warned of), the user's pipeline raising."""
    try:
        with ctx.ui.run_plan(plan):
            for phase in phases:
                phase(ctx)
                ctx.ui.tables(ctx.result)
    except KeyboardInterrupt:
        ctx.save()
        raise Interrupted(f"interrupted: {ctx.kept_epochs()}") from None
    except UserCodeError as exc:  # the user's pipeline raised: what was measured before it is kept
        ctx.save()
        exc.kept = ctx.kept()
        raise
    except StorageStalled as exc:
        if exc.run is not None:  # a training run's epoch, cut short
            ctx.record(exc.run)
        ctx.warn(exc.left_behind)  # the processes left behind stuck in IO
        ctx.save()
        raise exc.with_note(ctx.kept()) from None


def step(ctx: RunContext, at: Step) -> AbstractContextManager:
    """One step of the run's plan (an epoch, a fio point, a metadata pass): named on the run's line and timed for
    the ETAs of the steps to come."""
    return ctx.ui.step(at.phase, at.what, at.work, at.kind)


def epoch(ctx: RunContext, at: Step | None, engine: Engine, source: Source, spec: EpochSpec, *,
          around: AbstractContextManager | None = None, keep: list[Lane] | None = None,
          repeat: int = 0) -> Run:
    """One measured epoch (`at` its step; None: the caller's), read by `engine` from `source` within `around` (e.g.
    a read-ahead set for it), recorded and saved at once. An epoch cut short is recorded too, then ends the run,
    its error saying where the result was kept (a stall or Ctrl-C through `run_phases`)."""
    with step(ctx, at) if at is not None else nullcontext(), around or nullcontext():
        run, error = measure_epoch(engine, source, ctx.manifest, spec, ctx.ui, keep=keep)
    run.repeat = repeat  # replay's --repeat pass (0 elsewhere, as summarize made it)
    ctx.warn(engine.left_behind)  # readers stuck in IO (a stall, or Ctrl-C on a hung storage)
    ctx.record(run)
    if isinstance(error, UserError) and not isinstance(error, StorageStalled):  # a stall's note is run_phases'
        raise type(error)(f"{error}; {ctx.kept()}") from None
    if isinstance(error, OSError):
        raise explain_oserror(error, f"reading the dataset {ctx.manifest.root} failed ({ctx.kept_epochs()})")
    if error is not None:
        raise error
    return run
