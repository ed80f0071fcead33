"""`iobench run` and `iobench fio`: their options turned into one RunOptions, refused where they do not apply
(iobench.cli.refusals), then into the Settings a measured run (iobench.session) takes. A distributed run (--ranks
P, or a rank under torchrun) goes through here too: the launcher starts P ranks on this same command line."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import click

from iobench import pipelines
from iobench.cli.options import (
    DEFAULT_IN_FLIGHT,
    FIO_THREADS,
    GPU,
    MODEL,
    ORDER,
    SOURCE,
    RunOptions,
    check_seconds,
    measure_options,
    shape_of,
)
from iobench.cli.refusals import Case, refuse
from iobench.distributed.job import world
from iobench.distributed.launch import launch
from iobench.errors import EXIT_NOT_FED, UserError
from iobench.gpu.rates import KINDS
from iobench.host.mounts import usable_cpus
from iobench.output import STDOUT
from iobench.result import Result, Settings
from iobench.workload import DEFAULT, Workload, load

DEFAULT_RANK_TIMEOUT_S = 300.0

PREFETCH_FACTOR = 2  # DataLoader batches each worker keeps ready, where --prefetch-factor is not given
SCALE_FILES = 1_281_167  # ImageNet-1k train: the start-up projections' dataset, where --scale-files is not given


@click.command()
@measure_options(fio=False)
@click.option("--workload", default=None,
              help="Named workload or a .toml file: dataset shape, read pattern, GPU consumer; options given here "
                   f"override it. See `iobench workloads`.  [default: {DEFAULT}]")
@click.option("--order", type=ORDER, default=None,
              help="Read order: sequential, shuffled, or both  [default: the workload's: shuffled]")
@click.option("--source", type=SOURCE, default="files", show_default=True,
              help="Layout read: files, lmdb, tar, a comma list, or all: the same sweep on each (a pack is made "
                   "once, inside the dataset, under packed/).")
@click.option("--epochs", type=int, default=None,
              help="Epochs per (order, concurrency, cache state) and per training run; with several, each figure is "
                   "the mean of the epochs after the first (steady state), never the best.  "
                   "[default: the workload's: 1]")
@click.option("--repeat", type=int, default=1, show_default=True,
              help="Measure the replay sweep N times: each figure is the mean over them, with its standard deviation "
                   "and spread (over 5% is flagged unstable).")
@click.option("--fio/--no-fio", default=None,
              help="Raw baseline: fio on the same files (when fio is installed); with --url, the AWS CRT's native S3 "
                   "client GETting the same keys.  [default: fio]")
@click.option("--metadata/--no-metadata", default=None, help="Metadata phase: list, stat, open+close.  "
                                                               "[default: metadata]")
@click.option("--scale-files", type=int, default=None,
              help=f"Dataset size for start-up projections (ImageNet-1k train).  [default: {SCALE_FILES:,}]")
@click.option("--engine", type=click.Choice(["threads", "dataloader"]), default=None,
              help="Thread pool, or a torch DataLoader with worker processes  [default: the workload's: dataloader; "
                   "threads when torch is not installed]")
@click.option("--in-flight", default=None,
              help="Object storage (--url): GETs each reader thread or DataLoader worker keeps in flight, started "
                   "ahead in order (readers x this are in flight); a comma list is a sweep, each reader count at "
                   f"each.  [default: {','.join(map(str, DEFAULT_IN_FLIGHT))} with --url; 1 with --s3-client "
                   "s3torchconnector]")
@click.option("--workers", default=None,
              help="DataLoader workers (per GPU); a comma list is a sweep; 0 = the main process reads.  "
                   "[default: the workload's: 2,4,8]")
@click.option("--batch-size", type=int, default=None,
              help="DataLoader batch size (per GPU).  [default: the workload's: 256]")
@click.option("--prefetch-factor", type=int, default=None,
              help=f"DataLoader batches each worker keeps ready.  [default: {PREFETCH_FACTOR}]")
@click.option("--pipeline", default=None,
              help="The training runs' input pipeline: raw (iobench's reader: bytes into the batch, as DALI's file "
                   "reader feeds a GPU decode), torchvision (ImageFolder-style Dataset + RandomResizedCrop, flip, "
                   "ToTensor, Normalize + DataLoader: CPU decode), dali (DALI decode + crop + normalize), dali-raw "
                   "(DALI's file reader alone), or your own FILE.py:FUNC / package.module:FUNC (docs/pipelines.md); "
                   "a comma list is one training search each.  [default: the workload's: raw]")
@click.option("--decode/--no-decode", default=None,
              help="Decode in the replay too (torchvision's RandomResizedCrop + flip in iobench's workers, timed "
                   "apart), and train through --pipeline torchvision.  [default: the workload's: no-decode]")
@click.option("--model", type=MODEL, default=None,
              help="Model the GPUs train (see `iobench gpus`).  [default: the workload's: resnet50]")
@click.option("--gpu", type=GPU, default=None,
              help="Kind of GPU (see `iobench gpus`).  [default: the workload's: h200]")
@click.option("--rate", type=float, default=None, help="Samples/s one GPU consumes (instead of the table's).")
@click.option("--rate-kind", type=click.Choice(KINDS), default=None,
              help="Kind of table rate (see `iobench gpus`); not with --rate.  [default: the workload's: measured; "
                   "a workload without a kind takes the first its GPU and model have, in the order measured, "
                   "published, mlperf-storage]")
@click.option("--gpus", type=int, default=None,
              help="GPUs to ask about: does the storage feed them (and did this client)? Answered first, Yes, No or "
                   "Borderline, with a training run at exactly N.")
@click.option("--au-target", type=float, default=None,
              help="AU a GPU must reach to count as fed.  [default: the workload's: 0.90]")
@click.option("--consumer", type=click.Choice(["sleep", "cuda"]), default="sleep", show_default=True,
              help="How a GPU is stood for: a sleep of batch / rate, or a real training step on a local GPU.")
@click.option("--mitigations", is_flag=True,
              help="Also measure what LMDB, tar shards, fadvise, readahead and more readers buy (packs the dataset "
                   "once, inside it, under packed/).")
@click.option("--check", is_flag=True,
              help="Exit 1 (after a complete run) unless the storage feeds the GPUs asked about with --gpus N (its "
                   "figure covers their demand; without a cold run, this client's training run at N); 0 when it does.")
@click.option("--ranks", type=click.IntRange(min=1), default=None,
              help="Launch this many ranks on this host (torchrun's launcher, gloo): one distributed run, each rank a "
                   "GPU with its own DataLoader, a per-step allreduce. Across nodes: torchrun (docs/distributed.md).")
@click.option("--timeout", type=float, default=None,
              help="Distributed runs: seconds after which a rank that stopped answering ends the run (exit 3, what "
                   f"was gathered kept).  [default: {DEFAULT_RANK_TIMEOUT_S:.0f}]")
def run(**params: Any) -> None:
    """Replay a training job's reads on a mount: what the storage delivers and how many GPUs it feeds."""
    o = RunOptions.from_params(params)
    w = world()
    many = w is not None or o.ranks is not None
    if o.ranks is not None and w is not None and not os.environ.get("IOBENCH_RANKS"):
        raise UserError("--ranks launches ranks itself; under torchrun the ranks are its --nnodes x --nproc-per-node")
    wl = load(o.workload or DEFAULT).merged(
        files=o.files, size_dist=o.size_dist, classes=o.classes, engine=o.engine, batch_size=o.batch_size,
        decode=o.decode, pipeline=o.pipeline, epochs=o.epochs, model=o.model, gpu=o.gpu, rate=o.rate, kind=o.rate_kind,
        au_target=o.au_target, workers=o.workers, threads=o.threads)
    p = wl.pattern
    engine = p.engine
    notes: list[str] = []
    if engine == "dataloader" and importlib.util.find_spec("torch") is None:
        if o.engine == "dataloader":
            raise UserError("--engine dataloader needs PyTorch: pip install torch (a CPU build is enough)")
        notes.append("PyTorch is not installed: replayed with the thread engine, and GPUs fed is predicted, not "
                     "confirmed (pip install torch for DataLoader workers and training runs)")
        engine = "threads"
    if p.decode and engine != "dataloader":
        raise UserError("--decode needs --engine dataloader (decoding runs in its worker processes)")
    for name in _pipelines(o, wl):
        pipelines.check(pipelines.parse(name))
    orders = o.order or (p.order,)
    refuse(o, Case(engine, fallback=bool(notes), distributed=many, orders=orders))
    from iobench.session import check_outputs, measure, measure_rank  # a measured run's: not for a refusal or --help
    from iobench.ui import UI

    ui = UI(o.quiet, stdout_free=o.json_path == STDOUT)
    timeout_s = check_seconds(DEFAULT_RANK_TIMEOUT_S if o.timeout is None else o.timeout, "--timeout")
    if o.consumer == "cuda":
        _check_cuda(engine)
    settings = _settings(o, wl, engine, orders)
    if many:
        local_ranks = o.ranks
        if not local_ranks:
            assert w is not None  # many: --ranks, or else under torchrun
            local_ranks = w.local_world_size
        settings = _distributed(o, settings, local_ranks)
    if o.ranks is not None and w is None:  # the launcher: the ranks run this same command line
        # before P ranks start, not after (rank 0 checks them again)
        check_outputs(o.json_path, o.out, o.dataset, settings.workload)
        raise click.exceptions.Exit(launch(o.ranks, sys.argv[1:], timeout_s))
    shape = shape_of(o.files, o.size_dist, o.classes, o.seed, workload_shape=wl.dataset,
                     workload_named=o.workload is not None)
    result: Result | None
    if w is None:
        result = measure(settings, o.where, o.dataset, shape, o.json_path, o.out, ui, notes)
    else:
        result = measure_rank(w, timeout_s, settings, o.where, o.dataset, shape, o.json_path, o.out, ui, notes)
        if result is None:
            return
    assert result.verdict is not None
    if o.check and result.verdict.asked_fed is not True:  # not fed, or no valid run could say
        raise click.exceptions.Exit(EXIT_NOT_FED)


def _settings(o: RunOptions, wl: Workload, engine: str, orders: tuple[str, ...]) -> Settings:
    """What the run measures: the options given, else the workload's, else the defaults."""
    p = wl.pattern
    per_gpu, rate_source, rate_kind = wl.rate()
    rate_only = o.rate is not None and o.model is None and o.gpu is None
    return Settings(
        sources=list(o.source), orders=list(orders),
        concurrency=list(p.workers if engine == "dataloader" else p.threads), cache=list(o.cache),
        # s3torchconnector keeps one GET in flight per reader (its get_object blocks)
        in_flight=list(o.in_flight or (DEFAULT_IN_FLIGHT if o.url is not None and o.s3_client != "s3torchconnector"
                                       else (1,))),
        epochs=p.epochs, repeat=o.repeat, seed=0 if o.seed is None else o.seed,
        raw_baseline=o.fio is not False, metadata=o.metadata is not False,
        scale_files=SCALE_FILES if o.scale_files is None else o.scale_files,
        engine=engine, batch_size=p.batch_size,
        prefetch_factor=PREFETCH_FACTOR if o.prefetch_factor is None else o.prefetch_factor, decode=p.decode,
        pipelines=_pipelines(o, wl),
        workload=wl.path or wl.name,
        # --rate alone stands for "a GPU consuming R samples/s", not the workload's GPU and model
        model=None if rate_only else wl.consumer.model, gpu=None if rate_only else wl.consumer.gpu,
        rate_per_gpu=per_gpu, rate_source=rate_source, rate_kind=rate_kind, au_target=wl.consumer.au_target,
        gpus=o.gpus, consumer=o.consumer, mitigations=o.mitigations, io_timeout_s=o.io_timeout,
        follow_links=o.follow_links,
        fuse_view=str(o.mount.resolve()) if o.url is not None and o.mount is not None else None)


def _pipelines(o: RunOptions, wl: Workload) -> list[str]:
    """The training runs' pipelines: given, else the workload's; decode with no pipeline named trains through
    torchvision, the decode of a PyTorch job."""
    names = list(wl.pattern.pipeline)
    return ["torchvision"] if wl.pattern.decode and names == [pipelines.RAW] and o.pipeline is None else names


def _distributed(o: RunOptions, settings: Settings, local_ranks: int) -> Settings:
    """A distributed run is the training job itself: epochs through a DataLoader per rank, at one worker count."""
    from iobench.distributed.epochs import workers_per_rank  # the phases: only for a distributed run

    if settings.rate_per_gpu is None:
        raise UserError("a distributed run needs the GPUs' rate: give --gpu and --model, or --rate")
    workers = (settings.concurrency[0] if o.workers is not None
               else workers_per_rank(settings, local_ranks, usable_cpus()))
    return settings.model_copy(update={"concurrency": [workers], "in_flight": [1], "metadata": False,
                                       "raw_baseline": False, "mitigations": False, "repeat": 1})


def _check_cuda(engine: str) -> None:
    """--consumer cuda needs the DataLoader engine, torch with CUDA, a GPU and torchvision: say which is missing."""
    if engine != "dataloader":
        raise UserError("--consumer cuda needs --engine dataloader (and PyTorch)")
    if importlib.util.find_spec("torchvision") is None:
        raise UserError("--consumer cuda needs torchvision for the model: pip install torchvision")
    import torch  # deferred on purpose: only --consumer cuda needs it, and it takes seconds to load

    if not torch.cuda.is_available():
        raise UserError("--consumer cuda: no CUDA GPU here (the default --consumer sleep emulates one)")


@click.command("fio")
@measure_options(fio=True)
def fio_cmd(**params: Any) -> None:
    """Raw baseline alone: the real fio binary reading the dataset's files at each concurrency (with --url, the AWS
    CRT's native S3 client GETting every key at each number of requests in flight)."""
    from iobench.session import measure, require_fio
    from iobench.ui import UI

    o = RunOptions.from_params(params)
    if o.url is None:
        require_fio()
    settings = Settings(orders=[], concurrency=list(o.threads or FIO_THREADS), cache=list(o.cache), epochs=1,
                        seed=0 if o.seed is None else o.seed, replay=False, metadata=False, raw_baseline=True,
                        io_timeout_s=o.io_timeout, follow_links=o.follow_links)
    measure(settings, o.where, o.dataset, shape_of(o.files, o.size_dist, o.classes, o.seed), o.json_path, o.out,
            UI(o.quiet, stdout_free=o.json_path == STDOUT))
