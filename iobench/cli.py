"""Command line: `iobench gen`, `iobench run`. Bad input ends in one line on stderr, never a traceback.

Exit codes a script can act on: 0 done; 1 done, but `run --check` found the GPUs asked about (--gpus N) not fed;
2 usage error; 3 the environment refused (mount missing, read-only, full, permission denied); 130 Ctrl-C (SIGINT)
and 143 SIGTERM, the partial result kept. `--json -` writes the JSON alone to stdout, every human line to stderr.

Why ~1,000 lines in one module: every command's options, the pairs refused and the checks done before anything
is measured are here, so what a user can type is read in one file; the work itself lives in the modules each
command calls (runner, distributed, dataset, pack, report, plan).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.table import Table

from iobench import __version__, store
from iobench.answer.rules import too_few_files
from iobench.dataset import (
    GenSpec,
    Manifest,
    default_classes,
    fmt_bytes,
    generate,
    kind_of,
    read_marker,
    scan,
    spec_of,
)
from iobench.dataset.imagefolder import SCAN_THREADS
from iobench.dataset.sizes import parse_dist, parse_size
from iobench.distributed import RankLost
from iobench.errors import EnvironmentRefused, UserError, explain_oserror
from iobench.host.mounts import host_info
from iobench.host.stall import DEFAULT_IO_TIMEOUT_S, StorageStalled
from iobench.phases.fio import FioMissing, fio_version
from iobench.phases.pipeline import Interrupted, execute, now_iso
from iobench.record.order import ORDERS
from iobench.result import Dataset, Host, Mount, Result, Settings
from iobench.safefs import write_file
from iobench.ui import UI

DEFAULT_FILES = 25_000  # the default workload's: every run of its sweep gets >= 10 batches per worker
STDOUT = "-"  # `--json -`: the JSON goes to stdout, alone
SCHEMA_FILE = Path(__file__).parent / "data" / "result.schema.json"  # shipped; `iobench schema --write` remakes it


def result_schema() -> dict[str, Any]:
    """JSON Schema of result.json, generated from the pydantic models of iobench/result.py: as written
    (serialization), so computed fields (runs[].kind) are in it."""
    return Result.model_json_schema(by_alias=True, mode="serialization")


def _writable(folder: Path, what: str) -> None:
    """An existing folder iobench must write in: refused (exit 3) when read-only or not writable."""
    if os.statvfs(folder).f_flag & os.ST_RDONLY:
        raise EnvironmentRefused(f"{what}: {folder} is on a read-only file system")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise EnvironmentRefused(f"{what}: cannot write in {folder} (permission denied)")


def _check_json_target(path: str | None, what: str = "--json") -> None:
    """Before anything is measured: the JSON file can be written (its folder exists and takes files), or stdout is
    open for `-`."""
    if path == STDOUT and 1 in CLOSED_AT_START:
        raise UserError(f"{what} -: stdout is closed: give a file name, or run with stdout open")
    if path is None or path == STDOUT:
        return
    p = Path(path)
    with contextlib.suppress(FileNotFoundError):
        mode = os.lstat(p).st_mode
        if not stat.S_ISREG(mode):  # a link or special file is never written through (safefs.write_file)
            raise UserError(f"{what} {path}: is {kind_of(mode)}, not a regular file; give a file name (or - for "
                            "stdout)")
    folder = p.parent
    if not folder.is_dir():
        raise UserError(f"{what} {path}: the folder {folder} does not exist")
    _writable(folder, f"{what} {path}")
    if p.exists() and not os.access(p, os.W_OK):
        raise EnvironmentRefused(f"{what} {path}: the file is not writable (permission denied)")


def _check_out_target(folder: Path, what: str = "--out") -> None:
    """Before anything is measured: the result folder exists and takes files, or can be made."""
    p = folder.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        raise UserError(f"{what} {folder}: {p} is a file, not a folder")
    _writable(p, f"{what} {folder}")


def _write_json(text: str, path: str) -> None:
    """JSON to a file (atomically) or, for `-`, to stdout."""
    if path == STDOUT:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        return
    try:
        write_file(Path(path), text if text.endswith("\n") else text + "\n")
    except OSError as exc:
        raise explain_oserror(exc, f"cannot write {path}") from exc


def _finite(x: Any) -> Any:
    """Something json.dumps writes as standard JSON: inf and nan become null (JSON has neither)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def _dump(data: Any) -> str:
    return json.dumps(_finite(data), indent=1, ensure_ascii=False)


@contextmanager
def _stdout_to_stderr(active: bool) -> Iterator[None]:
    """While stdout is kept for the JSON (`--json -`), whatever else writes to file descriptor 1 (rich, fio,
    DataLoader worker processes, libraries) writes to stderr instead."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _int_list(text: str, what: str, minimum: int = 1) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise UserError(f"{what}: expected numbers like 1,4,16, got {text!r}") from None
    if not values or min(values) < minimum:
        raise UserError(f"{what}: values must be >= {minimum}, got {text!r}")
    return values





def _choices(text: str, allowed: tuple[str, ...], what: str, both: tuple[str, ...]) -> tuple[str, ...]:
    values = both if text == "both" else tuple(v.strip() for v in text.split(","))
    bad = [v for v in values if v not in allowed]
    if bad:
        raise UserError(f"{what}: unknown {', '.join(bad)} (use {', '.join(allowed)} or both)")
    return values


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="iobench")
def cli() -> None:
    """iobench: can this storage feed the GPUs of a training job that reads millions of small files?"""


def _gen_options(f, size_dist: str | None = "imagenet"):
    f = click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Seed of sizes, content and shuffles (>= 0).")(f)
    f = click.option("--classes", type=int, default=None,
                     help="Class folders (default: ~1,281 files per folder, as ImageNet).")(f)
    f = click.option("--size-dist", default=size_dist, show_default=size_dist is not None,
                     help="imagenet | fixed:110KiB | uniform:4KiB-256KiB" + ("" if size_dist else
                                                                             " [default: the workload's]"))(f)
    return f


def _spec(files: int, size_dist: str, classes: int | None, seed: int) -> GenSpec:
    if files < 1:
        raise UserError("--files must be >= 1")
    return GenSpec(files, parse_dist(size_dist), classes or default_classes(files), seed)


def _make(mount: Path, spec: GenSpec, ui: UI, threads: int | None = None) -> Manifest:
    where = store.open(mount)
    where.check(writable=False)
    ui.info(f"dataset: {spec.files:,} JPEGs ({spec.dist.spec}) in {spec.classes} class folders under {mount}")
    with ui.gen_progress(spec.files) as progress:
        rep = generate(where, spec, threads=threads, progress=progress)
    if rep.reused:
        ui.info(f"reusing the existing dataset {rep.manifest.root}")
    else:
        rate = rep.written_bytes / rep.seconds / 1e6 if rep.seconds else 0.0
        ui.info(f"wrote {rep.written:,} files, {fmt_bytes(rep.written_bytes)} in {rep.seconds:.1f} s "
                f"({rate:,.0f} MB/s, synced) to {rep.manifest.root}")
    return rep.manifest


@cli.command()
@click.option("--mount", type=Path, default=Path("."), show_default=True,
              help="Where to write the dataset (under MOUNT/iobench-data/).")
@click.option("--files", type=int, default=DEFAULT_FILES, show_default=True, help="Number of files.")
@_gen_options
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Writer threads (>= 1) [default: 32 on a network or FUSE file system, else 2 per core up to 8].")
@click.option("--quiet", is_flag=True, help="No progress output.")
def gen(mount: Path, files: int, size_dist: str, classes: int | None, seed: int, threads: int | None,
        quiet: bool) -> None:
    """Make a dataset of real, decodable JPEGs of exact, ImageNet-like sizes."""
    ui = UI(quiet)
    _probe(mount, DEFAULT_IO_TIMEOUT_S)
    store.open(mount).check(writable=True)
    manifest = _make(mount, _spec(files, size_dist, classes, seed), ui, threads)
    click.echo(str(manifest.root))


@dataclasses.dataclass(frozen=True)
class Shape:
    """The dataset a command asks for under --mount: `spec` in full (the options given, else the workload's) and
    `asked`, the parts of it the user chose (typed, or set by a --workload they named)."""

    spec: GenSpec
    asked: frozenset[str]  # keys of GenSpec.as_dict(): files, size_dist, classes, seed

    def matches(self, params: dict) -> bool:
        want = self.spec.as_dict()
        return all(params.get(k) == want[k] for k in self.asked)


def _shape(files: int | None, size_dist: str | None, classes: int | None, seed: int, *,
           workload_shape: Any = None, workload_named: bool = False) -> Shape:
    """The Shape from a command's options (click knows which were typed) and, for `run`, its workload's dataset."""
    ctx = click.get_current_context()
    asked = {key for key, name in (("files", "files"), ("size_dist", "size_dist"), ("classes", "classes"),
                                   ("seed", "seed")) if _given(ctx, name)}
    if workload_shape is not None:
        if workload_named:  # the workload's file says its dataset's shape: asked for as much as an option is
            asked |= {"files", "size_dist"} | ({"classes"} if workload_shape.classes is not None else set())
        files, size_dist, classes = workload_shape.files, workload_shape.size_dist, workload_shape.classes
    return Shape(_spec(files or DEFAULT_FILES, size_dist or "imagenet", classes, seed), frozenset(asked))


def _pick(mount: Path, shape: Shape, ui: UI) -> GenSpec:
    """The dataset `run --mount` (and `fio`, `pack`) uses, by its whole shape, never by its file count alone: the
    one of the full shape asked for; else the only one there that matches every part the user chose; else the full
    shape, made. Several that match what was chosen (none of them the full shape) is a one-line error naming them."""
    where = store.open(mount)
    where.check(writable=False)
    full = shape.spec
    found = [(name, where.marker(name)) for name in where.names()]
    if any(name == full.name for name, _ in found):
        return full
    fits = [(name, m) for name, m in found if m and shape.matches(m["params"])]
    if len(fits) > 1:
        names = "; ".join(f"{name} ({_shape_words(m['params'])})" for name, m in fits[:4])
        raise UserError(f"several datasets under {where.root()} match the shape asked for: {names}"
                        f"{' and more' if len(fits) > 4 else ''}: pick one with --files, --size-dist, --classes and "
                        "--seed, or name it with --dataset PATH")
    if fits:
        name, marker = fits[0]
        assert marker is not None
        ui.info(f"using the dataset iobench made earlier: {where.location(name)} ({_shape_words(marker['params'])})")
        return spec_of(marker)
    if found:
        ui.info(f"no dataset of the shape asked for under {where.root()} yet (other shapes there: "
                f"{', '.join(name for name, _ in found[:4])}{' and more' if len(found) > 4 else ''}): making it")
    return full


def _shape_words(params: dict) -> str:
    return (f"--files {params['files']} --size-dist {params['size_dist']} --classes {params['classes']} "
            f"--seed {params['seed']}")


def _run_options(f):
    """Options shared by `run` and `fio`: where, what, how concurrent, which cache states, where to."""
    for opt in reversed([
        click.option("--mount", type=Path, default=Path("."), show_default=True,
                     help="File system to measure; the dataset lives under MOUNT/iobench-data/."),
        click.option("--dataset", type=Path, default=None,
                     help="An existing image tree (e.g. an ImageFolder) to read instead of a generated one."),
        click.option("--files", type=int, default=None,
                     help=f"Files of the dataset under --mount: with --size-dist, --classes and --seed, its shape (the "
                          f"dataset of that shape is used, or made) [default: the workload's; {DEFAULT_FILES:,} for "
                          "the default]."),
        lambda f: _gen_options(f, size_dist=None),
        click.option("--threads", "threads_", default=None,
                     help="Reader threads (fio jobs); a comma list is a sweep [default: the workload's; fio: "
                          "1,4,16,64]."),
        click.option("--cache", "cache_", default="both", show_default=True, help="cold | warm | both"),
        click.option("--json", "json_path", default=None,
                     help="Also write the result JSON here; - writes it to stdout, alone (every other line goes to "
                          "stderr)."),
        click.option("--out", type=Path, default=None,
                     help="Result folder [default: reports/<timestamp>-<fstype>-<mount>/]."),
        click.option("--quiet", is_flag=True,
                     help="Print only the verdict line (nothing at all with --json -); errors still go to stderr."),
    ]):
        f = opt(f)
    return f


@cli.command()
@_run_options
@click.option("--workload", default=None,
              help="Named workload or a .toml file: dataset shape, read pattern, GPU consumer "
                   "[default: imagenet-resnet50]; options given here override it. See `iobench workloads`.")
@click.option("--order", "order_", default=None, help="sequential | shuffled | both [default: the workload's]")
@click.option("--source", "source_", default="files", show_default=True,
              help="files | lmdb | tar, or a list: the same sweep on each layout (packed beside the dataset once).")
@click.option("--epochs", type=int, default=None,
              help="Epochs per (order, concurrency, cache state) and per training run; with several, each figure is "
                   "the mean of the epochs after the first (steady state), never the best.")
@click.option("--repeat", "repeat_", type=int, default=1, show_default=True,
              help="Measure the replay sweep N times: each figure is the mean over them, with its standard deviation "
                   "and spread (over 5% is flagged unstable).")
@click.option("--fio/--no-fio", "fio_", default=True, show_default=True,
              help="Raw fio baseline on the same files (when fio is installed).")
@click.option("--metadata/--no-metadata", "metadata_", default=True, show_default=True,
              help="Metadata phase: list, stat, open+close.")
@click.option("--scale-files", type=int, default=1_281_167, show_default=True,
              help="Dataset size for start-up projections (ImageNet-1k train).")
@click.option("--engine", type=click.Choice(["threads", "dataloader"]), default=None,
              help="Thread pool, or a torch DataLoader with worker processes [default: the workload's; "
                   "threads when torch is not installed].")
@click.option("--workers", "workers_", default=None,
              help="DataLoader workers (per GPU); a comma list is a sweep; 0 = the main process reads.")
@click.option("--batch-size", type=int, default=None, help="DataLoader batch size (per GPU).")
@click.option("--prefetch-factor", type=int, default=2, show_default=True,
              help="DataLoader batches each worker keeps ready.")
@click.option("--decode/--no-decode", default=None, help="Also decode + RandomResizedCrop + flip each sample (CPU).")
@click.option("--model", default=None, help="Model the GPUs train (see `iobench gpus`).")
@click.option("--gpu", default=None, help="Kind of GPU: v100, a100, h100, h200 (see `iobench gpus`).")
@click.option("--rate", type=float, default=None, help="Samples/s one GPU consumes (instead of the table's).")
@click.option("--rate-kind", type=click.Choice(["measured", "published", "mlperf-storage"]), default=None,
              help="Kind of table rate (see `iobench gpus`) [default: the workload's, else the first kind the GPU and "
                   "model have: measured, published, mlperf-storage]; not with --rate.")
@click.option("--gpus", "gpus_", type=int, default=None,
              help="GPUs to ask about: does the storage feed them (and did this client)? Answered first, Yes, No or "
                   "Borderline, with a training run at exactly N.")
@click.option("--au-target", type=float, default=None, help="AU a GPU must reach to count as fed [default: 0.90].")
@click.option("--consumer", type=click.Choice(["sleep", "cuda"]), default="sleep", show_default=True,
              help="How a GPU is stood for: a sleep of batch / rate, or a real training step on a local GPU.")
@click.option("--mitigations", "mitigations_", is_flag=True,
              help="Also measure what LMDB, tar shards, fadvise, readahead and more readers buy (packs the dataset "
                   "beside it once).")
@click.option("--check", "check_", is_flag=True,
              help="Exit 1 (after a complete run) unless the storage feeds the GPUs asked about with --gpus N (its "
                   "figure covers their demand; without a cold run, this client's training run at N); 0 when it does.")
@click.option("--io-timeout", "io_timeout", type=float, default=60.0, show_default=True,
              help="Seconds without a finished read after which the storage counts as stalled: the run ends there "
                   "(exit 3), the epoch kept with complete false, readers stuck in IO left behind.")
@click.option("--ranks", type=click.IntRange(min=1), default=None,
              help="Launch this many ranks on this host (torchrun's launcher, gloo): one distributed run, each rank a "
                   "GPU with its own DataLoader, a per-step allreduce. Across nodes: torchrun (docs/distributed.md).")
@click.option("--timeout", "timeout_", type=float, default=None,
              help="Distributed runs: seconds after which a rank that stopped answering ends the run (exit 3, what "
                   "was gathered kept) [default: 300].")
def run(mount: Path, dataset: Path | None, files: int | None, size_dist: str | None, classes: int | None, seed: int,
        threads_: str | None, cache_: str, json_path: str | None, out: Path | None, quiet: bool,
        workload: str | None, order_: str | None, source_: str, epochs: int | None, fio_: bool, metadata_: bool,
        scale_files: int,
        engine: str | None, workers_: str | None, batch_size: int | None, prefetch_factor: int, decode: bool | None,
        model: str | None, gpu: str | None, rate: float | None, gpus_: int | None, au_target: float | None,
        consumer: str, mitigations_: bool, rate_kind: str | None, check_: bool, repeat_: int,
        io_timeout: float, ranks: int | None, timeout_: float | None) -> None:
    """Replay a training job's reads on a mount: what the storage delivers and how many GPUs it feeds."""
    from iobench.workload import DEFAULT, load

    ui = UI(quiet, stdout_free=json_path == STDOUT)
    if repeat_ < 1:
        raise UserError(f"--repeat must be >= 1, got {repeat_}")
    if not io_timeout > 0 or math.isinf(io_timeout):
        raise UserError(f"--io-timeout must be a number of seconds > 0, got {io_timeout:g}")
    if prefetch_factor < 1 or (gpus_ is not None and gpus_ < 1):
        raise UserError("--prefetch-factor and --gpus must be >= 1")
    from iobench import distributed

    w = distributed.world()
    many = w is not None or ranks is not None
    if check_ and gpus_ is None and not many:
        raise UserError("--check needs --gpus N: it exits 1 when N GPUs are not fed")
    if timeout_ is not None and not many:
        raise UserError("--timeout applies to a distributed run (--ranks P, or under torchrun); a stalled storage "
                        "is --io-timeout")
    timeout_s = DEFAULT_RANK_TIMEOUT_S if timeout_ is None else timeout_
    if not timeout_s > 0 or math.isinf(timeout_s):
        raise UserError(f"--timeout must be a number of seconds > 0, got {timeout_s:g}")
    if ranks is not None and w is not None and not os.environ.get("IOBENCH_RANKS"):
        raise UserError("--ranks launches ranks itself; under torchrun the ranks are its --nnodes x --nproc-per-node")
    wl = load(workload or DEFAULT).merged(
        files=files, size_dist=size_dist, classes=classes, engine=engine, batch_size=batch_size, decode=decode,
        epochs=epochs, model=model, gpu=gpu, rate=rate, kind=rate_kind, au_target=au_target,
        workers=_int_list(workers_, "--workers", minimum=0) if workers_ else None,
        threads=_int_list(threads_, "--threads") if threads_ else None)
    p = wl.pattern
    engine_name = p.engine
    notes: list[str] = []
    if engine_name == "dataloader" and importlib.util.find_spec("torch") is None:
        if engine == "dataloader":
            raise UserError("--engine dataloader needs PyTorch: pip install torch (a CPU build is enough)")
        notes.append("PyTorch is not installed: replayed with the thread engine, and GPUs fed is predicted, not "
                     "confirmed (pip install torch for DataLoader workers and training runs)")
        engine_name = "threads"
    if p.decode and engine_name != "dataloader":
        raise UserError("--decode needs --engine dataloader (decoding runs in its worker processes)")
    _refuse_inapplicable(click.get_current_context(), engine_name, fallback=bool(notes))
    if consumer == "cuda":
        _check_cuda(engine_name)
    per_gpu, rate_source, rate_kind = wl.rate()
    rate_only = rate is not None and model is None and gpu is None
    settings = Settings(
        sources=list(_choices(source_, ("files", "lmdb", "tar"), "--source", ("files", "lmdb", "tar"))),
        orders=list(_choices(order_, ORDERS, "--order", ORDERS)) if order_ else [p.order],
        concurrency=list(p.workers if engine_name == "dataloader" else p.threads),
        cache=list(_choices(cache_, ("cold", "warm"), "--cache", ("cold", "warm"))),
        epochs=p.epochs, repeat=repeat_, seed=seed, fio=fio_, metadata=metadata_, scale_files=scale_files,
        engine=engine_name,
        batch_size=p.batch_size, prefetch_factor=prefetch_factor, decode=p.decode, workload=wl.path or wl.name,
        # --rate alone stands for "a GPU consuming R samples/s", not the workload's GPU and model
        model=None if rate_only else wl.consumer.model, gpu=None if rate_only else wl.consumer.gpu,
        rate_per_gpu=per_gpu, rate_source=rate_source,
        rate_kind=rate_kind, au_target=wl.consumer.au_target, gpus=gpus_, consumer=consumer, mitigations=mitigations_,
        io_timeout_s=io_timeout)
    if many:
        local_ranks = ranks
        if not local_ranks:
            assert w is not None  # many: --ranks, or else under torchrun
            local_ranks = w.local_world_size
        settings = _distributed_settings(click.get_current_context(), settings, engine_name, local_ranks)
    if ranks is not None and w is None:  # the launcher: the ranks run this same command line
        _check_outputs(json_path, out)  # before P ranks start, not after (rank 0 checks them again)
        raise click.exceptions.Exit(distributed.launch(ranks, sys.argv[1:], timeout_s))
    shape = _shape(files, size_dist, classes, seed, workload_shape=wl.dataset, workload_named=workload is not None)
    result: Result | None
    if w is None:
        result = _measure(settings, mount, dataset, shape, json_path, out, ui, notes)
    else:
        result = _rank(w, timeout_s, settings, mount, dataset, shape, json_path, out, ui, notes)
        if result is None:
            return
    assert result.verdict is not None
    if check_ and result.verdict.asked_fed is not True:  # not fed, or no valid run could say
        raise click.exceptions.Exit(EXIT_NOT_FED)


DEFAULT_RANK_TIMEOUT_S = 300.0


def _distributed_settings(ctx: click.Context, settings: Settings, engine: str, local_ranks: int) -> Settings:
    """A distributed run is the training job itself: shuffled epochs through a DataLoader per rank, at one worker
    count, with a GPU consumer. Options for the phases it does not run are refused (one line each)."""
    from iobench.distributed import workers_per_rank
    from iobench.host.mounts import usable_cpus

    if engine != "dataloader":
        raise UserError("a distributed run reads through a DataLoader per rank, as training does: it needs PyTorch "
                        "and does not take --engine threads")
    # Judged on the value: a switch that turns a phase off (--no-fio, --no-metadata) is never refused.
    for name, opt in (("threads_", "--threads"), ("fio_", "--fio"), ("metadata_", "--metadata"),
                      ("mitigations_", "--mitigations"), ("gpus_", "--gpus"), ("scale_files", "--scale-files")):
        if _given(ctx, name) and ctx.params.get(name) is not False:
            raise UserError(f"{opt} does not apply to a distributed run (its GPUs are its ranks; it measures the "
                            "job's epochs only): run it without --ranks or torchrun")
    if ctx.params.get("repeat_", 1) != 1:
        raise UserError("--repeat does not apply to a distributed run: give --epochs N")
    if settings.sources != ["files"] or settings.orders != ["shuffled"]:
        raise UserError("a distributed run reads the files in a fresh shuffle each epoch: --source and --order "
                        "other than files and shuffled do not apply")
    if _given(ctx, "workers_") and len(settings.concurrency) > 1:
        raise UserError("a distributed run reads at one --workers count per rank: give one value")
    if settings.rate_per_gpu is None:
        raise UserError("a distributed run needs the GPUs' rate: give --gpu and --model, or --rate")
    workers = (settings.concurrency[0] if _given(ctx, "workers_")
               else workers_per_rank(settings, local_ranks, usable_cpus()))
    return settings.model_copy(update={"concurrency": [workers], "metadata": False, "fio": False, "mitigations": False,
                                   "repeat": 1})


def _rank(w, timeout_s: float, settings: Settings, mount: Path, dataset: Path | None, shape: Shape,
          json_path: str | None, out: Path | None, ui: UI, notes: list[str]) -> Result | None:
    """One rank of a distributed run: rank 0 measures as a run does (the dataset, the result, the report) with
    the job's epochs; the others follow it. A rank that fails tells the others why before it leaves."""
    from iobench import distributed

    job = distributed.Job(w, timeout_s)
    try:
        if w.rank == 0:
            return _measure(settings, mount, dataset, shape, json_path, out, ui, notes, job=job)
        distributed.follow(job, UI(quiet=True))
        return None
    except BaseException as exc:
        job.fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        raise
    finally:
        job.close()


def _given(ctx: click.Context, name: str) -> bool:
    """The user typed this option (not its default, not the workload's); a key no parameter has is a bug here."""
    if name not in ctx.params:
        raise KeyError(f"_given: no parameter {name!r} in `iobench {ctx.info_name}`")
    return ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE


def _refuse_inapplicable(ctx: click.Context, engine: str, fallback: bool) -> None:
    """Every option given is honoured or refused: one line for each pair that does not apply."""
    p = ctx.params
    why = " (PyTorch is not installed, so the thread engine replays)" if fallback else ""
    if engine == "dataloader" and _given(ctx, "threads_"):
        raise UserError("--threads sets the thread engine's readers; the DataLoader engine takes --workers "
                        "(or give --engine threads)")
    if engine == "threads":
        for name, opt in (("workers_", "--workers"), ("batch_size", "--batch-size"),
                          ("prefetch_factor", "--prefetch-factor")):
            if _given(ctx, name):
                raise UserError(f"{opt} applies to the DataLoader engine; the thread engine takes --threads{why}")
    if p.get("dataset") is not None:
        for name, opt in (("mount", "--mount"), ("files", "--files"), ("size_dist", "--size-dist"),
                          ("classes", "--classes")):
            if _given(ctx, name):
                raise UserError(f"{opt} shapes or places a generated dataset; --dataset reads an existing one: "
                                "give one or the other")
    if not p.get("metadata_") and _given(ctx, "scale_files"):
        raise UserError("--scale-files projects the metadata phase's listing; it does not apply with --no-metadata")
    if p.get("rate") is not None and p.get("consumer") == "cuda":
        raise UserError("--consumer cuda trains the real model on a local GPU, whose rate is measured: --rate does "
                        "not apply")
    if p.get("mitigations_") and p.get("cache_") == "warm":
        raise UserError("--mitigations are measured cold: they do not apply with --cache warm")


@cli.command("fio")
@_run_options
def fio_cmd(mount: Path, dataset: Path | None, files: int | None, size_dist: str | None, classes: int | None,
            seed: int, threads_: str | None, cache_: str, json_path: str | None, out: Path | None,
            quiet: bool) -> None:
    """Raw baseline alone: the real fio binary reading the dataset's files at each concurrency."""
    if fio_version() is None:
        raise FioMissing()
    settings = Settings(orders=[], concurrency=list(_int_list(threads_ or "1,4,16,64", "--threads")),
                    cache=list(_choices(cache_, ("cold", "warm"), "--cache", ("cold", "warm"))),
                    epochs=1, seed=seed, replay=False, metadata=False, fio=True)
    _measure(settings, mount, dataset, _shape(files, size_dist, classes, seed), json_path, out,
             UI(quiet, stdout_free=json_path == STDOUT))


def _scan(dataset: Path, ui: UI) -> Manifest:
    """An existing image tree: one that is missing is the environment refusing (exit 3), like a missing mount.
    A tree iobench did not make is listed with a live line on stderr (files and folders so far) and its listing
    cached outside it (~/.cache/iobench/scans/: the next run stats its folders only)."""
    if not dataset.exists():
        raise EnvironmentRefused(f"dataset {dataset} does not exist")
    if not dataset.is_dir():
        raise EnvironmentRefused(f"dataset {dataset} is not a directory")
    with _scan_progress(ui) as progress:
        return scan(dataset, threads=SCAN_THREADS, progress=progress, cache=True, say=ui.info)


@contextmanager
def _scan_progress(ui: UI) -> Iterator[Callable[[int, int], None]]:
    """A live line for a scan, as gen's (rich, on stderr, gone when done): files found, folders listed, the rate.
    There is no total to show a bar against: the count is the progress."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.fields[found]}"),
                  TimeElapsedColumn(), console=ui.err, disable=ui.quiet or not ui.err.is_terminal,
                  transient=True) as prog:
        task = prog.add_task("scan", total=None, found="")
        t0 = time.perf_counter()

        def update(files: int, folders: int) -> None:
            rate = files / max(time.perf_counter() - t0, 1e-9)
            prog.update(task, found=f"{files:,} images in {folders:,} folders ({rate:,.0f} files/s)")

        yield update


def _measure(settings: Settings, mount: Path, dataset: Path | None, shape: Shape, json_path: str | None,
             out: Path | None, ui: UI, notes: list[str] | None = None, job=None) -> Result:
    """Check where the outcome goes, then measure (`_measure_here`); the JSON goes to `json_path` (- for stdout)
    also when the run is interrupted (complete: false). With `--json -` nothing else reaches stdout meanwhile.

    One process per dataset (iobench.store.lock: another one running on it is refused, exit 3, naming it); each run gets
    a result folder of its own (made exclusively: NAME, NAME-2, ...); an --out that holds a result is refused.
    A device setting a killed run left changed is put back first, before the mount's settings are recorded."""
    from contextlib import nullcontext, suppress

    from iobench.phases.mitigations import restore_left_settings
    from iobench.store import lock

    _check_outputs(json_path, out)
    _probe(dataset if dataset is not None else mount, settings.io_timeout_s)
    for line in restore_left_settings():
        ui.warn(line)
    spec = _pick(mount, shape, ui) if dataset is None else None
    if spec is not None:  # the dataset's size is known: a run too small to count is refused before it is made
        _refuse_too_few(settings, spec.files, job)
    where = store.open(dataset if dataset is not None else mount)
    folder = store.dataset_location(where, dataset, spec.name if spec else None)
    with where.lock(folder) if folder is not None else nullcontext():
        made: list[Path] = []
        if out is None:
            reports = Path("reports")
            if not reports.exists():
                made.append(reports)
            label = _label(*where.place(folder or dataset or mount))
            out = lock.claim_folder(reports / f"{time.strftime('%Y%m%d-%H%M%S')}-{label}")
            made.insert(0, out)
        try:
            with _stdout_to_stderr(json_path == STDOUT):
                result, stopped = _measure_here(settings, mount, dataset, spec, out, ui, notes, job)
            if stopped is not None:
                # raised inside the lock, which then leaves its file alone (the storage may have stopped answering)
                if json_path is not None:
                    _write_json(result.model_dump_json(indent=1, by_alias=True), json_path)
                raise stopped
        except BaseException:
            for p in made:  # nothing was measured: no empty result folder is left behind
                with suppress(OSError):
                    p.rmdir()
            raise
    if json_path is not None:
        _write_json(result.model_dump_json(indent=1, by_alias=True), json_path)
    return result


def _refuse_too_few(settings: Settings, files: int, job) -> None:
    """Known before anything is measured: a dataset too small for a run to count is refused, not measured as
    invalid runs (verdict.too_few_files says the rule and the --files that meets it)."""
    why = too_few_files(settings, files, job.w.world_size if job is not None else None)
    if why:
        raise UserError(why)


def _check_outputs(json_path: str | None, out: Path | None) -> None:
    """Where a run's outcome goes can take it: the JSON file (or an open stdout), the result folder (one that
    already holds a result is refused)."""
    from iobench.store import lock

    _check_json_target(json_path)
    _check_out_target(out or Path("reports"), "--out" if out else "the result folder")
    if out is not None:
        lock.refuse_used_out(out)


def _probe(path: Path, timeout_s: float | None) -> None:
    """Ask the storage something it must answer itself (statvfs, stat, a listing) in a watched child, before any
    work there: a mount that already stopped answering ends in `timeout_s` with exit 3, not in a hang."""
    from iobench.host.bounded import in_child

    def ask(beat: np.ndarray) -> None:
        with contextlib.suppress(OSError):  # a missing or unreadable path is said later, in words of its own
            os.statvfs(path)
            beat[0] += 1
            os.stat(path)
            beat[0] += 1
            with os.scandir(path) as entries:
                next(entries, None)
        beat[0] += 1

    in_child(ask, timeout_s, f"checking {path}", name=b"iobench-probe")


def _measure_here(settings: Settings, mount: Path, dataset: Path | None, spec: GenSpec | None, out: Path | None,
                  ui: UI, notes: list[str] | None, job=None) -> tuple[Result, Exception | None]:
    """Pick or make the dataset, describe where it lives, run the settings' phases, print the outcome.
    `notes` are caveats the command found before measuring; they go into the result's warnings.
    Returns the result and, when the run was interrupted or the storage stalled, the exception to raise once the
    JSON is out."""
    if dataset is not None:
        manifest, made, params = _scan(dataset, ui), False, None
        marker = read_marker(manifest.root)
        if marker:
            made, params = True, marker.get("params")
        ui.info(f"dataset: {dataset} ({len(manifest):,} images)")
    else:
        assert spec is not None
        manifest, made, params = _make(mount, spec, ui), True, spec.as_dict()

    _refuse_too_few(settings, len(manifest), job)  # an existing tree's size is known once listed
    mount_info = Mount(**store.open(manifest.root).describe(manifest.root))
    host = host_info()
    fits = manifest.total_bytes < host["ram_bytes"]
    result = Result(
        created=now_iso(), command=["iobench", *sys.argv[1:]], host=Host(**host), mount=mount_info,
        dataset=Dataset(path=str(manifest.root), files=len(manifest), bytes=manifest.total_bytes,
                        mean_bytes=round(float(manifest.sizes.mean()), 1),
                        median_bytes=float(np.median(manifest.sizes)), made_by_iobench=made, params=params,
                        fits_in_ram=fits),
        settings=settings, remote=mount_info.family != "local", warnings=list(notes or []),
    )
    if fits:
        result.warnings.append(
            f"the dataset ({manifest.total_bytes / 1e9:.2f} GB) fits in this host's RAM "
            f"({host['ram_bytes'] / 1e9:.0f} GB): warm runs measure the page cache, not storage; cold runs "
            "evict it first. For storage figures that hold over many epochs use a dataset >= 5x RAM.")
    if result.remote:
        result.warnings.append(
            f"{mount_info.fstype} is a network/FUSE file system: cold runs evict this client's cache only; "
            "the server's cache may still hold the data.")
    for w in result.warnings:
        ui.warn(w)
    if os.geteuid() != 0:
        ui.info("not root: cold runs evict with posix_fadvise(DONTNEED) per file")

    label = _label(mount_info.fstype, mount_info.path)
    result_path = (out or Path("reports") / f"{time.strftime('%Y%m%d-%H%M%S')}-{label}") / "result.json"
    from iobench.report import write_reports

    try:
        if job is None:
            execute(manifest, settings, result, result_path, ui)
        else:  # rank 0 of a distributed run: the job's epochs, every rank's figures gathered here
            from iobench import distributed

            distributed.lead(job, manifest, settings, result, ui)
            distributed.execute(job, manifest, settings, ui, result, result_path)
    except (Interrupted, StorageStalled, RankLost) as exc:
        write_reports(result, result_path.parent)  # opens with an "unfinished" banner
        return result, exc
    ui.summary(result)
    written = write_reports(result, result_path.parent)
    ui.say(f"result: {result_path}\nreport: {written[0]}")
    assert result.verdict is not None
    ui.verdict(result.verdict)
    return result, None


@cli.command()
@click.option("--mount", type=Path, default=Path("."), show_default=True, help="Where the dataset lives.")
@click.option("--dataset", type=Path, default=None, help="The dataset folder (instead of finding it under --mount).")
@click.option("--files", type=int, default=None,
              help=f"Files of the dataset under --mount: with the three below, its shape (as gen made it) "
                   f"[default: {DEFAULT_FILES:,}].")
@_gen_options
@click.option("--format", "formats", default="lmdb,tar", show_default=True, help="lmdb | tar | lmdb,tar")
@click.option("--shard-size", default="256MiB", show_default=True, help="Tar shard size.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def pack(mount: Path, dataset: Path | None, files: int | None, size_dist: str, classes: int | None, seed: int,
         formats: str, shard_size: str, quiet: bool) -> None:
    """Pack a dataset as mitigations do: an LMDB and/or WebDataset-style tar shards, beside it."""
    from contextlib import nullcontext

    from iobench.sources import pack as packing

    ui = UI(quiet)
    # every option value is checked before any work: a bad --shard-size must not wait for the LMDB to be built
    chosen = _choices(formats, ("lmdb", "tar"), "--format", ("lmdb", "tar"))
    try:
        shard_bytes = parse_size(shard_size)
    except UserError as exc:
        raise UserError(f"--shard-size: {exc}") from None
    if shard_bytes < 1:
        raise UserError(f"--shard-size must be more than 0, got {shard_size!r}")
    _probe(dataset if dataset is not None else mount, DEFAULT_IO_TIMEOUT_S)
    if files is not None and files < 1:
        raise UserError("--files must be >= 1")
    ctx = click.get_current_context()
    shaped = [opt for name, opt in (("files", "--files"), ("size_dist", "--size-dist"), ("classes", "--classes"),
                                    ("seed", "--seed")) if _given(ctx, name)]
    if dataset is not None and shaped:
        raise UserError(f"{shaped[0]} picks a dataset under --mount by its shape; --dataset names one: give one or the "
                        "other")
    spec = _pick(mount, _shape(files, size_dist, classes, seed), ui) if dataset is None else None
    where = store.open(dataset if dataset is not None else mount)
    folder = store.dataset_location(where, dataset, spec.name if spec else None)
    with where.lock(folder) if folder is not None else nullcontext():  # not while a run reads it
        if dataset is not None:
            manifest = _scan(dataset, ui)
        else:
            assert spec is not None
            manifest = _make(mount, spec, ui)
        for fmt in chosen:
            with ui.gen_progress(len(manifest)) as progress:
                rep = (packing.pack_lmdb(manifest, progress=progress) if fmt == "lmdb" else
                       packing.pack_tar(manifest, shard_size=shard_bytes, progress=progress))
            how = "reused" if rep.reused else f"made in {rep.seconds:.1f} s"
            ui.out.print(f"{fmt}: {rep.path} ({rep.samples:,} samples, {packing.fmt_bytes(rep.bytes)} on disk, {how})",
                         highlight=False)


@cli.command()
@click.argument("results", nargs=-1, required=True, type=Path)
@click.option("--html", "html_path", type=Path, default=None,
              help="HTML report [default: report.html beside the (first) result].")
@click.option("--md", "md_path", type=Path, default=None, help="Markdown report [default: report.md beside it].")
@click.option("--csv", "csv_path", type=Path, default=None, help="Also a CSV: one row per measured run.")
@click.option("--name", "names", multiple=True, help="A name per result, in order [default: FSTYPE at MOUNT].")
def report(results: tuple[Path, ...], html_path: Path | None, md_path: Path | None, csv_path: Path | None,
           names: tuple[str, ...]) -> None:
    """Report from result files: one self-contained HTML page with plots, and Markdown (several files: compared)."""
    from iobench import report as reporting

    loaded = reporting.load_results(results)
    if html_path is None and md_path is None:
        folder = results[0] if results[0].is_dir() else results[0].parent
        stem = "report" if len(loaded) == 1 else "compare"
        html_path, md_path = folder / f"{stem}.html", folder / f"{stem}.md"
    ui = UI()
    for path in reporting.write(loaded, html_path, md_path, csv_path, names=names or None):
        ui.out.print(f"{path.suffix.lstrip('.')}: {path}", highlight=False)


@cli.command()
@click.argument("results", nargs=-1, required=True, type=Path)
@click.option("--html", "html_path", type=Path, default=None,
              help="HTML comparison [default: reports/<timestamp>-compare/compare.html].")
@click.option("--md", "md_path", type=Path, default=None, help="Markdown comparison [default: beside the HTML].")
@click.option("--csv", "csv_path", type=Path, default=None,
              help="CSV, one row per run [default: beside the default HTML].")
@click.option("--name", "names", multiple=True, help="A name per result, in order [default: FSTYPE at MOUNT].")
@click.option("--json", "json_path", default=None,
              help="Also write the comparison as JSON here (- for stdout): the headline and, per system, its label, "
                   "verdict and best runs.")
def compare(results: tuple[Path, ...], html_path: Path | None, md_path: Path | None, csv_path: Path | None,
            names: tuple[str, ...], json_path: str | None) -> None:
    """Pre-purchase view: several mounts or systems side by side on the same workload, the winner per metric."""
    from iobench import report as reporting

    if len(results) < 2:
        raise UserError("compare needs two or more result files (for one, use `iobench report`)")
    _check_json_target(json_path)
    loaded = reporting.load_results(results)
    if html_path is None and md_path is None:
        folder = Path("reports") / f"{time.strftime('%Y%m%d-%H%M%S')}-compare"
        html_path, md_path = folder / "compare.html", folder / "compare.md"
        csv_path = csv_path or folder / "compare.csv"
    ui = UI(stdout_free=json_path == STDOUT)
    for path in reporting.write(loaded, html_path, md_path, csv_path, names=names or None):
        ui.out.print(f"{path.suffix.lstrip('.')}: {path}", highlight=False)
    fs = [reporting.facts(r, n) for r, n in zip(loaded, reporting.labels(loaded, names or None), strict=True)]
    headline = reporting.compare_headline(loaded, fs, [f.label for f in fs])
    ui.out.print(headline, highlight=False)
    if json_path is not None:
        systems = [{"label": f.label, "result": str(path), "fstype": r.mount.fstype, "mount": r.mount.path,
                    "complete": r.complete, "provisional": f.provisional,
                    "verdict": f.verdict.model_dump(mode="json") if f.verdict else None,
                    "best_cold": _run_figures(f.best_cold), "best_warm": _run_figures(f.best_warm)}
                   for path, r, f in zip(results, loaded, fs, strict=True)]
        _write_json(_dump({"headline": headline, "systems": systems}), json_path)


def _run_figures(run: Any) -> dict[str, Any] | None:
    """The figures of one measured run a comparison sets side by side."""
    if run is None:
        return None
    return {"samples_per_s": run.samples_per_s, "mb_per_s": run.mb_per_s, "engine": run.engine,
            "readers": run.concurrency, "workers": run.workers, "cache": run.cache, "order": run.order,
            "source": run.source, "p50_ms": run.latency_ms.p50, "p99_ms": run.latency_ms.p99}


@cli.command("plan")
@click.option("--gpu", required=True, help="Kind of GPU: v100, a100, h100, h200, b200, mi355 (see `iobench gpus`).")
@click.option("--gpus", "gpus_", type=int, required=True, help="How many GPUs train at once.")
@click.option("--model", required=True, help="Model they train: resnet50, vit_b_16, unet3d, retinanet, ... (see "
                                              "`iobench gpus`).")
@click.option("--dataset-files", type=int, default=1_281_167, show_default=True,
              help="Samples in the dataset (ImageNet-1k train's count, whatever the model; MLPerf Storage v3.0's "
                   "retinanet has 1,170,301 by default).")
@click.option("--mean-kb", type=float, default=None,
              help="Mean sample size in kB (1,000 B) [default: the result's dataset mean where it ran this model "
                   "or the model trains on ImageNet-sized images, else the model's own (MLPerf Storage v3.0's "
                   "unet3d 146,600.6, cosmoflow 2,828.5, retinanet 323.0), else ImageNet's 110]; the plan says "
                   "which.")
@click.option("--au-target", type=float, default=0.9, show_default=True,
              help="AU a GPU must reach to count as fed (MLPerf Storage: 0.90 for resnet50 and unet3d, 0.85 for "
                   "retinanet, 0.70 for cosmoflow).")
@click.option("--rate", type=float, default=None, help="Samples/s one GPU consumes (instead of the table's).")
@click.option("--rate-kind", type=click.Choice(["measured", "published", "mlperf-storage"]), default=None,
              help="Kind of table rate (see `iobench gpus`) [default: the first kind the GPU and model have, in "
                   "the order measured, published, mlperf-storage; printed beside the rate]; not with --rate.")
@click.option("--gpus-per-node", type=int, default=8, show_default=True, help="GPUs per client node.")
@click.option("--result", "result_paths", type=Path, multiple=True,
              help="A result file (or its folder): how many GPUs and nodes the measured storage supports, headroom, "
                   "and what-ifs (part of the dataset cached, more readers). Repeat it with distributed results at "
                   "1, 2, ... nodes: how the storage scaled with clients.")
@click.option("--json", "json_path", default=None,
              help="Also write the plan as JSON here (- for stdout): its fields, nodes, and `measured` with --result.")
def plan_cmd(gpu: str, gpus_: int, model: str, dataset_files: int, mean_kb: float | None, au_target: float,
             rate: float | None, rate_kind: str | None, gpus_per_node: int, result_paths: tuple[Path, ...],
             json_path: str | None) -> None:
    """Capacity arithmetic: what N GPUs training a model ask of the storage; with --result, what it supports."""
    from iobench.answer.plan import format_plan, plan
    from iobench.report import load_results

    _check_json_target(json_path)
    results = load_results(result_paths) if result_paths else []
    if len(results) > 1 and any(r.distributed is None for r in results):
        raise UserError("several --result are read as a scaling series: each must be a distributed run (--ranks or "
                        "torchrun); give one result otherwise")
    # of a series, the result with the most nodes is the one planned from
    result = max(results, key=lambda r: r.distributed.nodes if r.distributed else 0) if results else None
    try:
        p = plan(gpu, gpus_, model, dataset_files=dataset_files, mean_kb=mean_kb, au_target=au_target, rate=rate,
                 result=result, gpus_per_node=gpus_per_node, kind=rate_kind, series=results)
    except ValueError as exc:
        raise UserError(f"plan: {exc}") from None
    ui = UI(stdout_free=json_path == STDOUT)
    click.echo(format_plan(p, width=ui.out.width), nl=False, err=ui.stdout_free)
    if json_path is not None:
        _write_json(_dump({**dataclasses.asdict(p), "nodes": p.nodes}), json_path)


@cli.command()
@click.option("--rate-kind", type=click.Choice(["measured", "published", "mlperf-storage"]), default=None,
              help="List rows of this kind only [default: all].")
@click.option("--json", "json_path", default=None,
              help="Also write the rows as JSON here (- for stdout): a list of {model, gpu, samples_per_s, batch, "
                   "precision, source, kind}.")
def gpus(rate_kind: str | None, json_path: str | None) -> None:
    """Per-GPU training consumption rates iobench knows, each with its kind and source."""
    from iobench.gpu.rates import H200_FILE, KINDS, kinds_of, lookup, rates

    _check_json_target(json_path)
    ui = UI(stdout_free=json_path == STDOUT)
    rows = rates(rate_kind)
    notes = list(dict.fromkeys(r.note for r in rows))  # each source once, numbered as first used
    t = Table(title="training samples/s per GPU (--model, --gpu, --rate-kind); \\[n]: the sources below")
    for col in ("model", "gpu", "samples/s", "batch", "kind", "what the source gives"):
        t.add_column(col, justify="right" if col in ("samples/s", "batch") else "left", overflow="fold")
    for r in rows:
        t.add_row(r.model, r.gpu, f"{r.samples_per_s:,.1f}", str(r.batch), r.kind,
                  f"{r.detail} [{notes.index(r.note) + 1}]")
    ui.out.print(t)
    for n, note in enumerate(notes, 1):
        ui.out.print(f"[{n}] {note}", highlight=False, markup=False)
    several = sorted({(r.model, r.gpu) for r in rates() if len(kinds_of(r.model, r.gpu)) > 1})
    taken = "; ".join(f"{m} on {g} takes {lookup(m, g).kind}" for m, g in several)
    ui.out.print(f"Without --rate-kind a model and GPU take the first kind they have, in the order {', '.join(KINDS)}"
                 + (f" ({taken})." if taken else "."), highlight=False, markup=False)
    ui.out.print(f"The H200 measurement behind the measured rows ships with iobench: {H200_FILE}", highlight=False,
                 soft_wrap=True, markup=False)
    if json_path is not None:
        _write_json(_dump([r.model_dump(mode="json") for r in rows]), json_path)


@cli.command("gpu-rate")
@click.option("--model", default="resnet50", show_default=True, help="A torchvision.models name.")
@click.option("--batch", type=int, default=256, show_default=True, help="Samples per step.")
@click.option("--steps", type=int, default=30, show_default=True, help="Timed steps (after 10 warm-up steps).")
@click.option("--device", default="cuda", show_default=True, help="Where to train (cuda, cuda:1, ...).")
@click.option("--quiet", is_flag=True, help="Print the rate alone (for `iobench run --rate $(...)`).")
def gpu_rate(model: str, batch: int, steps: int, device: str, quiet: bool) -> None:
    """Measure a model's training samples/s on this host's GPU (synthetic data, bf16, channels_last)."""
    from iobench.gpu.benchmark import measure

    rate = measure(model, batch=batch, steps=steps, device=device)
    if quiet:
        click.echo(f"{rate:.1f}")
    else:
        click.echo(f"{model} on {device}: {rate:,.1f} training samples/s at batch {batch} "
                   f"(use it with: iobench run --model {model} --rate {rate:.1f})")


@cli.command()
@click.option("--json", "json_path", default=None,
              help="Also write them as JSON here (- for stdout): a list of {name, description, workload}, the "
                   "workload parsed (dataset, pattern, consumer; null when its file is invalid).")
def workloads(json_path: str | None) -> None:
    """Named workloads shipped with iobench (dataset shape, read pattern, GPU consumer)."""
    from iobench.workload import available, load

    _check_json_target(json_path)
    ui = UI(stdout_free=json_path == STDOUT)
    t = Table(title="workloads (--workload NAME or a .toml path)")
    t.add_column("name")
    t.add_column("what it is", overflow="fold")
    rows = []
    for name, description in available():
        t.add_row(name, description)
        try:
            parsed = load(name).model_dump(mode="json")
        except UserError:
            parsed = None
        rows.append({"name": name, "description": description, "workload": parsed})
    ui.out.print(t)
    if json_path is not None:
        _write_json(_dump(rows), json_path)


@cli.command()
@click.option("--write", is_flag=True,
              help="Regenerate the shipped iobench/data/result.schema.json instead of printing (after a change to "
                   "iobench/result.py).")
def schema(write: bool) -> None:
    """JSON Schema of the result file (result.json), generated from the models of iobench/result.py."""
    text = json.dumps(result_schema(), indent=1) + "\n"
    if write:
        write_file(SCHEMA_FILE, text)
        click.echo(f"wrote {SCHEMA_FILE}", err=True)
    else:
        click.echo(text, nl=False)


@cli.command()
@click.option("--mount", type=Path, default=Path("."), show_default=True,
              help="The mount whose MOUNT/iobench-data/ to clean.")
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
def clean(mount: Path, dry_run: bool) -> None:
    """Remove iobench's datasets and packs under MOUNT/iobench-data/ (only folders carrying iobench's marker)."""
    _probe(mount, DEFAULT_IO_TIMEOUT_S)
    where = store.open(mount)
    done = where.clean(dry_run=dry_run)
    if not done:
        click.echo(f"nothing to clean under {where.root()}")
    for entry in done:
        click.echo(entry.line(dry_run))


def _check_cuda(engine: str) -> None:
    """--consumer cuda needs the DataLoader engine, torch with CUDA, a GPU and torchvision: say which is missing."""
    if engine != "dataloader":
        raise UserError("--consumer cuda needs --engine dataloader (and PyTorch)")
    if importlib.util.find_spec("torchvision") is None:
        raise UserError("--consumer cuda needs torchvision for the model: pip install torchvision")
    import torch

    if not torch.cuda.is_available():
        raise UserError("--consumer cuda: no CUDA GPU here (the default --consumer sleep emulates one)")


def _label(fstype: str, path: str) -> str:
    name = Path(path).name or "root"
    return f"{fstype.replace('.', '-')}-{name}"


CLOSED_AT_START: set[int] = set()  # of stdin, stdout, stderr: those closed when iobench started (main)


def _reopen_closed_std_fds() -> set[int]:
    """Put /dev/null on stdin, stdout or stderr where the caller closed it (`>&-`): else the next file iobench opens
    (a result, a dataset file) would get that number and what is printed would be written into it. Returns the ones
    that were closed."""
    closed = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            closed.add(fd)
    if 1 in closed:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's stdout, for its whole life
    if 2 in closed:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    return closed


EXIT_NOT_FED = 1  # run --check: the GPUs asked about are not fed
EXIT_USAGE = 2  # bad option values, options that do not apply
EXIT_REFUSED = 3  # the environment refused: mount missing or not a folder, read-only, no space, permission denied


def main() -> None:
    """Entry point: map every expected failure to one line and an exit code (see the module's docstring)."""
    def err(msg: str) -> None:
        click.echo(f"iobench: {msg}", err=True)

    CLOSED_AT_START.update(_reopen_closed_std_fds())
    stopped_by = [signal.SIGINT]

    def terminate(signum: int, frame: object) -> None:
        stopped_by[0] = signal.SIGTERM  # exits 143, not 130
        raise KeyboardInterrupt  # SIGTERM as Ctrl-C: keep what was measured, restore settings

    signal.signal(signal.SIGTERM, terminate)
    try:
        # non-standalone: a command's click.exceptions.Exit(code) comes back as the return value
        code = cli.main(prog_name="iobench", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:  # usage errors too: one line, not click's three
        err(f"error: {exc.format_message()}")
        sys.exit(EXIT_USAGE)
    except Interrupted as exc:
        err(str(exc))
        sys.exit(128 + stopped_by[0])
    except (KeyboardInterrupt, click.Abort):
        err("interrupted" if stopped_by[0] == signal.SIGINT else "terminated (SIGTERM)")
        sys.exit(128 + stopped_by[0])
    except EnvironmentRefused as exc:
        err(f"error: {exc}")
        sys.exit(EXIT_REFUSED)
    except UserError as exc:
        err(f"error: {exc}")
        sys.exit(EXIT_USAGE)
    except OSError as exc:
        explained = explain_oserror(exc, "stopped")
        err(f"error: {explained}")
        sys.exit(EXIT_REFUSED if isinstance(explained, EnvironmentRefused) else EXIT_USAGE)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
