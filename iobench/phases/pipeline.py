"""`iobench run`: a run as phases over one RunContext (metadata, replay, the raw baseline, training,
mitigations), each producing steps for the one runner (phases/runner.py) and making its own records of them."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import cast

import numpy as np

from iobench import engines, store
from iobench.answer.client import ceiling, verdict
from iobench.answer.rules import MIN_TRAIN_STEPS, mark_validity, stats, supply_run
from iobench.answer.search import MAX_LOADER_PROCESSES, next_shape
from iobench.answer.words import counted
from iobench.dataset import Manifest
from iobench.phases.epoch import EpochSpec, Lane, per_sample_us, prepare_cache, steady_training, train_epoch, warm_up
from iobench.phases.fio import FioError, fio_version, run_fio
from iobench.phases.fio_job import build_job, fio_can_read
from iobench.phases.fio_json import FioResult
from iobench.phases.mitigations import (
    Variant,
    baseline_readers,
    entry,
    read_ahead_kb,
    readahead_file,
    variants,
)
from iobench.phases.objects import fuse_manifest, fuse_phase, object_variants, requests, stream_order
from iobench.phases.raw_objects import RawResult, run_raw
from iobench.phases.runner import RunContext, run_phases, step
from iobench.phases.runner import epoch as epoch_of
from iobench.pipelines import RAW
from iobench.pipelines.loader import FEEDS
from iobench.progress import Plan, Step
from iobench.record.recorder import Counters
from iobench.result import Baseline, Cpu, Latency, RawPoint, Result, Run, Settings
from iobench.safefs import write_file
from iobench.sources.tar import shard_read_order
from iobench.ui import UI

FIO_SAMPLE = 20_000  # fio's set-up grows with the square of its files per job: it reads a random sample
FIO_COLD_REPEATS = 2  # cold fio runs per point; the fastest is kept
FIO_WARM_S = 1.0  # warm fio loops over its files for about this long


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def execute(manifest: Manifest, settings: Settings, result: Result, result_path: Path, ui: UI) -> Result:
    """Run the phases the settings ask for; save after each record; finish with the verdict."""
    ctx = RunContext(manifest, settings, result, result_path, ui)
    fuse = fuse_manifest(manifest, settings.fuse_view) if settings.fuse_view else None  # refused before measuring
    wanted = ((settings.metadata, _metadata), (settings.replay, _replay), (settings.raw_baseline, _fio),
              (settings.replay and settings.rate_per_gpu is not None, _training), (settings.mitigations, _mitigations),
              (fuse is not None, lambda c: fuse_phase(c, cast(Manifest, fuse))))
    run_phases(ctx, plan_of(len(manifest), settings, store.open(manifest.root)),
               [phase for want, phase in wanted if want])
    return finish(result, result_path)


TRAINING_STEPS = 2  # training runs planned for the ETA: the one at the boundary's guess and its neighbour


def plan_of(files: int, settings: Settings, where: store.Store) -> Plan:
    """The run's steps as the settings ask for them, for the terminal's ETAs (training and mitigations as
    guessed now: the run adds or skips steps as it finds out), on the store `where` (a raw baseline other than fio
    reads every sample at each of the runs' requests in flight)."""
    steps: list[Step] = []
    if settings.metadata:
        steps += [Step("metadata", f"{state}, {files:,} files", files, "metadata") for state in settings.cache]
    if settings.replay:
        for _ in range(settings.repeat * len(settings.sources) * len(settings.orders)):
            for conc, depth in settings.sweep(files):
                steps += [Step("replay", f"{state}, {_readers(settings, conc, depth)}", files, f"replay {state}")
                          for state in settings.cache for _ in range(settings.epochs)]
    if settings.raw_baseline and where.raw != "fio":
        steps += [Step(where.raw, f"{state}, {conc} in flight", files, f"{where.raw} {state}")  # named as it runs
                  for conc in settings.raw_depths(files) for state in settings.cache]
    elif settings.raw_baseline:
        n = min(FIO_SAMPLE, files)
        steps += [Step("fio", f"{state}, {counted(conc, 'job')}", n, f"fio {state}")
                  for conc in settings.fio_jobs(n) for state in settings.cache]
    if settings.replay and settings.rate_per_gpu is not None and settings.engine == "dataloader":
        steps += [Step("training", "", files * settings.epochs, "training") for _ in range(TRAINING_STEPS)]
    if settings.mitigations:
        wanted = (object_variants(settings.in_flight) if where.items == "objects" else
                  [Variant("baseline"), *variants(1, False)])
        steps += [Step("mitigations", v.name, files, "mitigations") for v in wanted]
    if settings.fuse_view:
        steps += [Step("fuse view", name, files, "fuse view") for name in ("objects", "fuse-view")]
    return Plan(steps)


def _readers(settings: Settings, conc: int, depth: int = 1) -> str:
    readers = counted(conc, "thread" if settings.engine == "threads" else "worker")
    return readers if depth == 1 else f"{readers} x {depth} = {conc * depth} in flight"


def finish(result: Result, result_path: Path) -> Result:
    """Every phase measured: the stats, this client's CPU ceiling, the verdict, complete, saved."""
    result.stats = stats(result)
    top = ceiling(result) if result.distributed is None else None
    result.host.client_ceiling_samples_per_s = top.samples_per_s if top is not None else None
    result.verdict = verdict(result)
    result.complete = True
    result.finished = now_iso()
    result.save(result_path)
    return result


def _metadata(ctx: RunContext) -> None:
    manifest, settings, where = ctx.manifest, ctx.settings, store.open(ctx.manifest.root)
    for state in settings.cache:
        with (step(ctx, Step("metadata", f"{state}, {len(manifest):,} files", len(manifest), "metadata")),
              ctx.ui.status(f"metadata, {state}: listing {len(manifest):,} {where.items}, {where.probes}")):
            ctx.result.metadata.append(where.metadata(manifest, state, settings.scale_files, settings.seed,
                                                      timeout_s=settings.io_timeout_s))
        ctx.save()


def _replay(ctx: RunContext) -> None:
    """The sweep, `settings.repeat` times: per source, order, concurrency, cache state and epoch, one measured epoch."""
    epoch = 0
    for repeat in range(ctx.settings.repeat):
        if ctx.settings.repeat > 1:
            ctx.ui.info(f"repeat {repeat + 1} of {ctx.settings.repeat}")
        epoch = _sweep(ctx, epoch, repeat)


def _sweep(ctx: RunContext, epoch: int, repeat: int) -> int:
    """One pass of the sweep; returns the last epoch number used."""
    manifest, settings, result, ui = ctx.manifest, ctx.settings, ctx.result, ctx.ui
    where = store.open(manifest.root)
    for source_name in settings.sources:
        source = where.source(source_name, manifest, ui)
        try:
            if not where.client_cache and settings.cache[0] == "warm" and repeat == 0:
                # no client cache: warm is the second read of the same keys in this run, and no cold epoch read
                # them first
                with ui.status(f"reading {len(manifest):,} {where.items} once, so that warm is their second read"):
                    warm_up(source, np.arange(len(source)), max(settings.concurrency), ui,
                            io_timeout_s=settings.io_timeout_s)
            for order in settings.orders:
                for conc, depth in settings.sweep(len(manifest)):
                    engine = engines.make(settings, conc, depth=depth)
                    try:
                        for state in settings.cache:
                            for _ in range(settings.epochs):
                                epoch += 1
                                spec = EpochSpec(order, state, epoch, settings.seed, result.mount.device,
                                                 result.dataset.fits_in_ram, io_timeout_s=settings.io_timeout_s)
                                run = epoch_of(ctx, Step("replay", f"{state}, {_readers(settings, conc, depth)}",
                                                         len(manifest), f"replay {state}"),
                                               engine, source, spec, repeat=repeat)
                                _warn_on(ctx, run)
                    finally:
                        engine.close()
        finally:
            source.close()
    return epoch


def _fio(ctx: RunContext) -> None:
    """The raw baseline (fio on (a sample of) the same files; on objects, the raw S3 client over every key), per
    concurrency and cache state; then each loader run's efficiency against it."""
    where = store.open(ctx.manifest.root)
    if where.raw != "fio":  # a program of the store's own (store/s3.py: the CRT client)
        _objects_baseline(ctx, where)
        return _efficiency(ctx)
    manifest, settings = ctx.manifest, ctx.settings
    if not _baseline(ctx, "fio", fio_version(), "install it with apt-get install -y fio"):
        return
    # fio's iolog cannot name a path with white space or over 256 bytes: it reads a sample of the others
    usable = np.array([i for i, p in enumerate(manifest.paths) if fio_can_read(p)], dtype=np.int64)
    if len(usable) < len(manifest):
        _note(ctx, f"fio cannot replay {len(manifest) - len(usable):,} of the {len(manifest):,} paths (white space, "
                   "or over 256 bytes): its baseline reads a sample of the others")
    if len(usable) == 0:
        return
    n = min(FIO_SAMPLE, len(usable))
    pick = np.sort(np.random.default_rng([settings.seed, 0xF10]).choice(usable, size=n, replace=False))
    paths = [manifest.paths[i] for i in pick.tolist()]
    sizes = manifest.sizes[pick].tolist()
    for conc in settings.fio_jobs(n):
        for state in settings.cache:
            with step(ctx, Step("fio", f"{state}, {counted(conc, 'job')}", n, f"fio {state}")):
                if not _fio_point(ctx, where, paths, sizes, pick, conc, state):
                    return
    _efficiency(ctx)


def _baseline(ctx: RunContext, tool: str, version: str | None, install: str) -> bool:
    """The raw baseline by `tool` begun in the result; False where the tool is not installed (its note says so)."""
    ctx.result.baseline = Baseline(tool=tool, tool_version=version)
    if version is None:
        _note(ctx, f"{tool} is not installed: no raw baseline ({install})")
    return version is not None


def _note(ctx: RunContext, note: str) -> None:
    """The raw baseline's note (what it could not do), warned of and saved."""
    cast(Baseline, ctx.result.baseline).note = note
    ctx.ui.warn(note)
    ctx.save()


def _keep_point(ctx: RunContext, res: FioResult | RawResult, conc: int, state: str, samples: int, program: str,
                counters: Counters, json_file: str, **extra) -> None:
    """One point of the raw baseline (fio's, or the raw client's on objects), judged and saved as it is measured;
    `counters` began with the tool's run (its processes are iobench's children: their CPU is counted)."""
    cast(Baseline, ctx.result.baseline).points.append(mark_validity(RawPoint(
        concurrency=conc, cache=state, samples=samples, bytes=res.bytes, seconds=res.seconds,
        samples_per_s=round(res.files_per_s, 2), mb_per_s=round(res.mb_per_s, 3),
        latency_ms=Latency(**{k: res.latency_ms[k] for k in Latency.model_fields}), setup_s=round(res.setup_s, 3),
        program=program, cpu=Cpu(**counters.result()["cpu"]), cpu_s=None if res.cpu_s is None else round(res.cpu_s, 4),
        cpu_us_per_sample=per_sample_us(res.cpu_s, samples), json_file=json_file, **extra)))
    ctx.save()


def _objects_baseline(ctx: RunContext, where: store.Store) -> None:
    """The raw client over every key of the dataset (phases/raw_objects.py), per depth and cache state, as fio's
    points; a failure ends the phase, the baseline's note saying how."""
    manifest, settings, tool = ctx.manifest, ctx.settings, where.raw
    if not _baseline(ctx, tool, where.raw_version(), f"pip install {tool}"):
        return
    keys, sizes, n = list(manifest.paths), manifest.sizes.tolist(), len(manifest)
    for conc in settings.raw_depths(n):
        for state in settings.cache:
            # no client cache: cold and warm are the same GETs; the server's caching is its own (docs/s3.md)
            name = f"{tool}-{conc}inflight-{state}"
            with step(ctx, Step(tool, f"{state}, {conc} in flight", n, f"{tool} {state}")):
                try:
                    counters = Counters(None)
                    with ctx.ui.fio_progress(f"{tool}, {state}: {n:,} objects, {conc} in flight") as status:
                        res = run_raw(where, manifest, keys, sizes, conc, io_timeout_s=settings.io_timeout_s,
                                      status=status, name=name)
                except FioError as exc:
                    return _note(ctx, f"the raw baseline failed at {conc} in flight, {state}: {exc}")
            (ctx.path.parent / tool).mkdir(parents=True, exist_ok=True)
            write_file(ctx.path.parent / tool / f"{name}.json", res.raw_json + "\n")
            _keep_point(ctx, res, conc, state, res.ios, res.command, counters, f"{tool}/{name}.json",
                        throttled=res.throttled)


def _efficiency(ctx: RunContext) -> None:
    """Each complete loader run's rate over the raw baseline's at its concurrency (objects: its requests in flight)
    and cache state."""
    ref = {(b.concurrency, b.cache): b.samples_per_s
           for b in (ctx.result.baseline.points if ctx.result.baseline else [])}
    for run in ctx.result.runs:
        if (rate := ref.get((run.in_flight, run.cache))) and run.complete:
            run.efficiency = round(run.samples_per_s / rate, 3)
    ctx.save()


def _fio_point(ctx: RunContext, where: store.Store, paths: list[str], sizes: list[int], pick: np.ndarray, conc: int,
               state: str) -> bool:
    """One fio point (jobs, cache state) on the sample `pick`, kept in the baseline; False: fio failed (the
    baseline's note says how) and the phase stops."""
    manifest, settings, result, ui = ctx.manifest, ctx.settings, ctx.result, ctx.ui
    cold, n, root, timeout = state == "cold", len(paths), os.geteuid() == 0, settings.io_timeout_s
    # the sample, in the state asked: fio reads the files the sample names, so warming is reading them
    prepare_cache(state, paths, store.source("files", manifest), conc, 0, True, ui, timeout, where=where, warm=pick)
    # Cold: the best of FIO_COLD_REPEATS runs, each from an evicted cache (one cold run on a shared machine
    # can be 2x off). Warm: enough loops over the files for ~1 s of reads (a loop would not be cold).
    loops = 1 if cold else _fio_loops(result, conc, n)
    # fio's own JSON, its job file and (small) iologs go beside the result: <result folder>/fio/<name>.*
    name = f"fio-{conc}jobs-{state}"
    try:
        counters = Counters(None)
        with ui.fio_progress(f"fio, {state}: {n:,} files, {counted(conc, 'job')}") as status:
            job = build_job(paths, conc, sizes=sizes, seed=settings.seed, drop_caches=cold and root, loops=loops,
                            name=name)
            res = run_fio(job, repeats=FIO_COLD_REPEATS if cold else 1,
                          prepare=(lambda: where.evict(paths, timeout_s=timeout)) if cold else None,
                          save_to=ctx.path.parent / "fio", io_timeout_s=timeout, status=status)
    except FioError as exc:
        _note(ctx, f"fio failed at {conc} jobs, {state}: {exc}")
        return False
    _keep_point(ctx, res, conc, state, res.ios, res.job, counters, f"fio/{name}.json", repeats=res.repeats,
                runs_samples_per_s=[round(x, 2) for x in res.runs_files_per_s], at_best=res.at_best,
                caveats=list(res.caveats))
    return True


def _fio_loops(result: Result, conc: int, files: int) -> int:
    """Warm fio loops that last ~FIO_WARM_S at the rate the loaders read warm at this concurrency."""
    warm = [r.samples_per_s for r in result.runs
            if r.cache == "warm" and r.concurrency == conc and r.kind != "training"]
    return min(20, max(1, math.ceil(FIO_WARM_S * max(warm, default=0.0) / files)))


def _warn_on(ctx: RunContext, run: Run) -> None:
    if run.cache == "cold" and run.measures in ("page-cache", "mixed"):
        ctx.warn(f"eviction did not take before epoch {run.epoch}: {100 * (run.resident_before or 0):.0f}% of "
                 "sampled pages were cached, so that cold figure partly measures RAM")


def _training(ctx: RunContext) -> None:
    """One training search per input pipeline asked (--pipeline raw,torchvision), side by side, each run labelled
    with its pipeline; a pipeline's loaders live across a training run's epochs and end with its search."""
    for name in ctx.settings.pipelines:
        try:
            _train(ctx, name)
        finally:
            FEEDS.release()
            ctx.result.warnings = list(dict.fromkeys(ctx.result.warnings))  # a search's caveat said once


def _train(ctx: RunContext, pipeline: str = RAW) -> None:
    """GPUs fed, by training runs (each GPU its own DataLoader and consumer) at the shapes answer/search.py's one rule
    gives, in its order; the run at --gpus is made whatever the replay's validity (each run is judged on its own).
    Without a valid replay run there is no rate to predict from: only that run is made. A pipeline other than raw
    has no replay rate of its own: its walk starts at 1 GPU."""
    manifest, settings, result, ui = ctx.manifest, ctx.settings, ctx.result, ctx.ui
    epoch = len(result.runs)
    if settings.engine != "dataloader":
        result.warnings.append("GPUs fed is predicted, not confirmed: training runs need --engine dataloader")
        return
    supply = supply_run(result)
    if supply is None and settings.gpus is None and pipeline == RAW:  # another pipeline starts at 1 GPU (below)
        result.warnings.append("no valid replay run, so no training run was made and no GPU count is given")
        return
    gpus_here = None
    if settings.consumer == "cuda":
        import torch

        gpus_here = torch.cuda.device_count()  # one real GPU per emulated one
    measured: dict[int, list[float | None]] = {}  # GPUs -> the AU of each run at that count (None: none counted)
    # One worker count given (--workers N, or a workload's one): the workers of each GPU, within the process budget.
    given = max(settings.concurrency[0], 1) if len(settings.concurrency) == 1 else None

    def attempt(n: int, workers: int) -> None:
        """The training run at n GPUs x `workers`, and its repeat where the rule asks: each AU into `measured`."""
        nonlocal epoch
        if given is not None and workers < given:
            result.warnings.append(
                f"the training run at {n} GPUs ran {workers} workers per GPU, not the {given} asked: {n} x {given} "
                f"would need {n * given} loader processes, over the {MAX_LOADER_PROCESSES} this client hosts")
        steps = len(manifest) // (n * settings.batch_size)
        why = None
        if steps < MIN_TRAIN_STEPS + 1:
            why = (f"each GPU would take {steps} batches of {settings.batch_size}, fewer than the "
                   f"{MIN_TRAIN_STEPS + 1} that make AU mean anything: use more --files or a smaller --batch-size")
        elif n * workers > MAX_LOADER_PROCESSES:
            why = (f"{n} GPUs x {workers} workers would need more than {MAX_LOADER_PROCESSES} loader processes on "
                   "this client")
        elif gpus_here is not None and n > gpus_here:
            why = f"--consumer cuda needs one GPU per emulated GPU and this host has {gpus_here}"
        if why is not None:
            result.warnings.append(f"no training run at {n} GPUs: {why}; the answer for {n} is predicted from "
                                   "the measured rates")
            measured[n] = [None]
            return
        for repeat in range(2):  # the run, and once more where the rule asks (its AU near the target)
            done: list[Run] = []  # this run's epochs (--epochs N: N of them)
            try:
                with step(ctx, Step("training", f"{n} GPU{'s' * (n > 1)} x {workers} worker{'s' * (workers > 1)}",
                                    len(manifest) * settings.epochs, "training")):
                    for _ in range(settings.epochs):
                        epoch += 1
                        done.append(train_epoch(manifest, settings, n, workers, epoch, result.mount.device,
                                                result.dataset.fits_in_ram, ui,
                                                state="cold" if "cold" in settings.cache else "warm",
                                                source_name=supply.source if supply is not None else "files",
                                                pipeline=pipeline))
                        if not done[-1].valid:
                            break
            except BaseException:  # a stall, Ctrl-C: the epochs it finished are kept, each as its own run (the runner
                ctx.record(*done)  # keeps a stalled epoch's partial run and ends the run)
                raise
            run = steady_training(done)
            run.repeat = repeat
            ctx.record(run)
            if not run.valid:
                result.warnings.append(f"the training run at {n} GPUs is invalid ({run.invalid_reason}) and was left "
                                       "out")
                measured[n] = [None]
                return
            measured.setdefault(n, []).append(run.au)
            if next_shape(settings, rate, measured) != (n, workers):
                return

    # raw's supply rate predicts where the walk starts; the replay does not measure another pipeline's: from 1 GPU
    rate = 0.0 if pipeline != RAW else supply.samples_per_s if supply is not None else None
    while (shape := next_shape(settings, rate, measured)) is not None:
        attempt(*shape)
    if supply is None and pipeline == RAW:
        result.warnings.append("no valid replay run: only the training run at --gpus was made, and no GPU count past "
                               "it is predicted")


def _mitigations(ctx: RunContext) -> None:
    """The baseline and each mitigation, cold, on the same pattern and reader count; then the table. A store of
    objects has its own (phases/objects.py), each with its GETs."""
    manifest, settings, result, ui = ctx.manifest, ctx.settings, ctx.result, ctx.ui
    readers = baseline_readers(result)
    objects = store.open(manifest.root).items == "objects"  # a store's own mitigations, by what its samples are
    if objects:
        wanted = object_variants(settings.in_flight, readers)
    else:
        can_set = os.geteuid() == 0 and os.access(readahead_file(result.mount.bdi), os.W_OK)
        wanted = [Variant("baseline"), *variants(max(readers, 1), can_set)]
    base_rate = None
    for v in wanted:
        epoch = len(result.runs) + 1
        lanes: list[Lane] = []
        with step(ctx, Step("mitigations", v.name, len(manifest), "mitigations")):  # a pack's making included
            source = v.open(manifest, ui)
            engine = engines.make(settings, v.readers or readers, depth=v.depth)
            try:  # tar-stream: the shards' own order (WebDataset's shuffle buffer reorders in memory, after the reads)
                order = ((stream_order(source, engine, settings.seed, epoch) if objects else
                          shard_read_order(source, settings.seed, epoch)) if v.stream else None)
                spec = EpochSpec("shard-stream" if v.stream else "shuffled", "cold", epoch, settings.seed,
                                 result.mount.device, result.dataset.fits_in_ram, order_array=order,
                                 willneed=v.willneed, mitigation=v.name, io_timeout_s=settings.io_timeout_s)
                ahead = read_ahead_kb(result.mount.bdi, v.read_ahead_kb) if v.read_ahead_kb is not None else None
                run = epoch_of(ctx, None, engine, source, spec, around=ahead, keep=lanes)
            finally:
                engine.close()
                source.close()
        base_rate = base_rate or run.samples_per_s
        result.mitigations.append(entry(run, v.name, base_rate, settings, source.costs(), note=v.note,
                                        requests=requests(source, run, lanes[0]) if objects else None))
        ctx.save()
