"""`iobench run`: the run plan. Each measured epoch goes through `measure_epoch` and becomes one
`Run` in the result, which is saved after every epoch so an interruption loses nothing measured."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iobench import cache
from iobench.dataset import Manifest
from iobench.engines.threads import ThreadEngine
from iobench.errors import explain_oserror
from iobench.measure import Counters, EpochRecorder, latency_summary
from iobench.order import epoch_order
from iobench.result import Cpu, Disk, Latency, Result, Run
from iobench.source import FileSource, Source
from iobench.ui import UI
from iobench.verdict import verdict

COLD_MAX = 0.05  # at most 5% of sampled pages cached: the epoch measures storage
WARM_MIN = 0.90  # at least 90% cached: the epoch measures the page cache


class Interrupted(Exception):
    """Ctrl-C during a run; the result file holds what was measured."""


@dataclass(frozen=True)
class Plan:
    orders: tuple[str, ...]
    concurrency: tuple[int, ...]
    cache: tuple[str, ...]
    epochs: int
    seed: int


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def measures(resident: float | None) -> str:
    if resident is None:
        return "unknown"
    if resident <= COLD_MAX:
        return "storage"
    return "page-cache" if resident >= WARM_MIN else "mixed"


def replay(manifest: Manifest, plan: Plan, result: Result, result_path: Path, ui: UI) -> Result:
    """Run every (order, concurrency, cache state, epoch) of the plan; save after each."""
    try:
        _replay(manifest, plan, result, result_path, ui)
    except KeyboardInterrupt:  # between epochs (eviction, residency check): keep what was measured
        result.save(result_path)
        raise Interrupted(f"interrupted: kept {len(result.runs)} measured epochs in {result_path}") from None
    result.verdict = verdict(result)
    result.complete = True
    result.finished = now_iso()
    result.save(result_path)
    return result


def _replay(manifest: Manifest, plan: Plan, result: Result, result_path: Path, ui: UI) -> None:
    source = FileSource(manifest)
    epoch = 0
    for order in plan.orders:
        for conc in plan.concurrency:
            for state in plan.cache:
                for _ in range(plan.epochs):
                    epoch += 1
                    run, error = measure_epoch(source, manifest, order, conc, state, epoch, plan.seed,
                                               result.mount.device, result.dataset.fits_in_ram, ui)
                    result.runs.append(run)
                    result.save(result_path)
                    kept = f"kept {len(result.runs)} measured epochs in {result_path}"
                    if isinstance(error, OSError):
                        raise explain_oserror(error, f"reading the dataset failed ({kept})")
                    if error is not None:
                        raise Interrupted(f"interrupted: {kept}")
                    _warn_on(run, result, ui)


def measure_epoch(source: Source, manifest: Manifest, order: str, conc: int, state: str, epoch: int,
                  seed: int, device: str | None, fits_in_ram: bool, ui: UI) -> tuple[Run, BaseException | None]:
    """Prepare the cache state, read one epoch with the engine, and summarise it. An epoch cut short
    (Ctrl-C, a read error) is summarised too, with `complete` false, and the exception returned."""
    eviction = None
    if state == "cold":
        eviction = cache.evict(manifest.paths)
    resident = cache.resident_sample(manifest.paths, seed=epoch)
    if state == "warm" and fits_in_ram and resident is not None and resident < WARM_MIN:
        _warm_up(source, manifest, conc, ui)  # a warm run right after nothing: read it once first
        resident = cache.resident_sample(manifest.paths, seed=epoch)
    engine = ThreadEngine(conc)
    rec = EpochRecorder(len(manifest), conc)
    counters = Counters(device)
    error: BaseException | None = None
    label = f"{order} {state} {conc:>3} threads"
    try:
        with ui.epoch_progress(label, len(manifest)) as tick:
            engine.epoch(source, epoch_order(order, len(manifest), seed, epoch), rec, tick)
    except (KeyboardInterrupt, OSError) as exc:
        error = exc
    sys_counters = counters.result()
    read = rec.nbytes >= 0
    samples = int(read.sum())
    nbytes = int(rec.nbytes[read].sum())
    seconds = max(rec.t_end - rec.t_start, 1e-9)
    return Run(
        source=source.name, order=order, engine=engine.name, concurrency=conc, cache=state, epoch=epoch,
        complete=error is None, eviction=eviction, resident_before=None if resident is None else round(resident, 4),
        measures=measures(resident), samples=samples, bytes=nbytes, seconds=round(seconds, 6),
        samples_per_s=round(samples / seconds, 2), mb_per_s=round(nbytes / seconds / 1e6, 3),
        latency_ms=Latency(**latency_summary(rec.total_ns[read])),
        open_ms=Latency(**latency_summary(rec.open_ns[read])),
        cpu=Cpu(**sys_counters["cpu"]),
        disk=Disk(**sys_counters["disk"]) if sys_counters["disk"] else None,
        timeline=[(round(t, 3), d) for t, d in rec.timeline],
    ), error


def _warm_up(source: Source, manifest: Manifest, conc: int, ui: UI) -> None:
    ui.info("warming the page cache: reading the dataset once (not measured)")
    ThreadEngine(max(conc, 4)).epoch(source, np.arange(len(manifest)), EpochRecorder(len(manifest), max(conc, 4)))


def _warn_on(run: Run, result: Result, ui: UI) -> None:
    if run.cache == "cold" and run.measures in ("page-cache", "mixed"):
        msg = (f"eviction did not take before epoch {run.epoch}: {100 * (run.resident_before or 0):.0f}% of "
               "sampled pages were cached, so that cold figure partly measures RAM")
        result.warnings.append(msg)
        ui.warn(msg)
