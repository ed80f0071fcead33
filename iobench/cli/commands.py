"""The commands besides `run` and `fio`: gen, pack and clean (a dataset under a mount), report and compare (from
result files), plan, gpus and gpu-rate (capacity arithmetic and the rates behind it), workloads and schema."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from iobench import report as reporting
from iobench import store
from iobench.answer.plan import format_plan, plan
from iobench.cli.options import (
    DEFAULT_FILES,
    FOLDER,
    FORMAT,
    GPU,
    MODEL,
    Renamed,
    check_seconds,
    gen_options,
    s3_options,
    shape_of,
    spec,
)
from iobench.dataset.sizes import parse_size
from iobench.errors import UserError
from iobench.gpu import benchmark
from iobench.gpu.rates import H200_FILE, KINDS, kinds_of, lookup, rates
from iobench.host.stall import DEFAULT_IO_TIMEOUT_S
from iobench.output import STDOUT, check_apart, check_json_target, check_report_files, dump, write_json
from iobench.result import Result
from iobench.safefs import fmt_bytes, write_file
from iobench.ui import UI
from iobench.workload import available

SCHEMA_FILE = Path(__file__).parent.parent / "data" / "result.schema.json"  # shipped; `schema --write` remakes it


def result_schema() -> dict[str, Any]:
    """JSON Schema of result.json, generated from the pydantic models of iobench/result.py: as written
    (serialization), so computed fields (runs[].kind) are in it."""
    return Result.model_json_schema(by_alias=True, mode="serialization")


@click.command()
@click.option("--mount", type=FOLDER, default=None,
              help="Where to write the dataset (under MOUNT/iobench-data/).  [default: .]")
@click.option("--files", type=int, default=DEFAULT_FILES, show_default=True, help="Number of files.")
@s3_options
@gen_options("  [default: imagenet]")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Writer threads (>= 1) [default: 32 on a network or FUSE file system or object storage, else 2 "
                   "per core up to 8].")
@click.option("--io-timeout", type=float, default=DEFAULT_IO_TIMEOUT_S, show_default=True,
              help="Seconds the storage may take to answer one request (a PUT, the first check) before gen ends "
                   "(exit 3).")
@click.option("--quiet", is_flag=True, help="No progress output.")
def gen(mount: Path | None, url: str | None, endpoint_url: str | None, profile: str | None, s3_client: str | None,
        files: int, size_dist: str | None, classes: int | None, seed: int | None, threads: int | None,
        io_timeout: float, quiet: bool) -> None:
    """Make a dataset of real, decodable JPEGs of exact, ImageNet-like sizes (files, or objects with --url)."""
    from iobench.session import make, probe  # gen, pack and clean: what a measured run imports, the others need not

    ui = UI(quiet)
    check_seconds(io_timeout)
    where = store.at(mount, url, endpoint_url, profile, s3_client)
    probe(where, io_timeout)
    store.open(where, timeout_s=io_timeout).check(writable=True)
    manifest = make(where, spec(files, size_dist, classes, seed), ui, threads, timeout_s=io_timeout)
    click.echo(str(manifest.root))


@click.command()
@click.option("--mount", type=FOLDER, default=None, help="Where the dataset lives.  [default: .]")
@s3_options
@click.option("--dataset", type=FOLDER, default=None, help="The dataset folder (instead of finding it under --mount).")
@click.option("--files", type=int, default=None,
              help=f"Files of the dataset under --mount: with the three below, its shape (as gen made it) "
                   f"[default: {DEFAULT_FILES:,}].")
@gen_options("  [default: imagenet]")
@click.option("--format", "formats", type=FORMAT, default=None,
              help="The packs to make: lmdb, tar, or a comma list.  [default: lmdb,tar; tar with --url]")
@click.option("--shard-size", default="256MiB", show_default=True, help="Tar shard size.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def pack(mount: Path | None, url: str | None, endpoint_url: str | None, profile: str | None, s3_client: str | None,
         dataset: Path | None, files: int | None, size_dist: str | None, classes: int | None, seed: int | None,
         formats: tuple[str, ...] | None, shard_size: str, quiet: bool) -> None:
    """Pack a dataset as mitigations do: an LMDB and/or WebDataset-style tar shards, inside it (packed/; with --url,
    tar shards uploaded under the dataset's prefix)."""
    from iobench.session import pack as packing

    where = store.at(mount, url, endpoint_url, profile, s3_client)
    if formats is None:
        formats = ("tar",) if url is not None else ("lmdb", "tar")
    if url is not None and "lmdb" in formats:
        raise UserError("--format lmdb: an LMDB is a file a process maps, not made in object storage; --url packs "
                        "tar shards (--format tar)")
    if url is not None and dataset is not None:
        raise UserError("--url places the datasets in a bucket; --dataset reads an existing tree on a mount: give "
                        "one or the other")
    # every option value is checked before any work: a bad --shard-size must not wait for the LMDB to be built
    shard_bytes = _size(shard_size, "--shard-size")
    shape = shape_of(files, size_dist, classes, seed)  # --files 0 is refused here
    shaped = [opt for opt, value in (("--files", files), ("--size-dist", size_dist), ("--classes", classes),
                                     ("--seed", seed)) if value is not None]
    if dataset is not None and shaped:
        raise UserError(f"{shaped[0]} picks a dataset under --mount by its shape; --dataset names one: give one or the "
                        "other")
    packing(where, dataset, shape, formats, shard_bytes, UI(quiet))


def _size(text: str, opt: str) -> int:
    """A size as --size-dist writes one (256MiB, 110kB), in bytes, more than 0: else one line naming `opt`."""
    try:
        size = parse_size(text)
    except UserError as exc:
        raise UserError(f"{opt}: {exc}") from None
    if size < 1:
        raise UserError(f"{opt} must be more than 0, got {text!r}")
    return size


@click.command()
@click.option("--mount", type=FOLDER, default=None,
              help="The mount whose MOUNT/iobench-data/ to clean.  [default: .]")
@s3_options
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.option("--yes", "-y", is_flag=True,
              help="Remove without asking (where stdin is not a terminal, clean removes nothing without it).")
def clean(mount: Path | None, url: str | None, endpoint_url: str | None, profile: str | None, s3_client: str | None,
          dry_run: bool, yes: bool) -> None:
    """Remove iobench's datasets and packs under MOUNT/iobench-data/ (only folders carrying iobench's marker), or
    under --url's prefix (only the objects iobench wrote): what would go is listed, with its size, and asked about
    first (unless --yes)."""
    from iobench.session import probe

    at = store.at(mount, url, endpoint_url, profile, s3_client)
    probe(at)
    where = store.open(at)
    listed = where.clean(dry_run=True)
    if not listed:
        click.echo(f"nothing to clean under {where.root()}")
    for entry in listed:
        click.echo(entry.line(dry_run=True))
    doomed = [e for e in listed if e.removed]
    if dry_run or not doomed:
        return
    what = (f"{len(doomed)} {where.entry}{'s' if len(doomed) > 1 else ''} "
            f"({fmt_bytes(sum(e.bytes for e in doomed))} in {sum(e.files for e in doomed):,} {doomed[0].unit})")
    if not yes:
        if sys.stdin is None or not sys.stdin.isatty():
            raise UserError(f"nothing removed: clean asks before it removes {what}, and stdin is not a terminal; "
                            "give --yes to remove them")
        if not click.confirm(f"remove {what}?", default=False):
            click.echo("nothing removed")
            return
    asked = {e.path for e in doomed}
    for entry in where.clean(dry_run=False):
        if entry.path in asked:  # what was listed as kept is not listed again
            click.echo(entry.line(dry_run=False))


@click.command()
@click.argument("results", nargs=-1, required=True, type=Path)
@click.option("--html", "html_path", type=Path, default=None,
              help="HTML report [default: report.html beside the (first) result].")
@click.option("--md", "md_path", type=Path, default=None, help="Markdown report [default: report.md beside it].")
@click.option("--csv", "csv_path", type=Path, default=None, help="Also a CSV: one row per measured run.")
@click.option("--name", "names", multiple=True, help="A name per result, in order [default: FSTYPE at MOUNT].")
def report(results: tuple[Path, ...], html_path: Path | None, md_path: Path | None, csv_path: Path | None,
           names: tuple[str, ...]) -> None:
    """Report from result files: one self-contained HTML page with plots, and Markdown (several files: compared)."""
    if html_path is None and md_path is None:
        folder = results[0] if results[0].is_dir() else results[0].parent
        stem = "report" if len(results) == 1 else "compare"
        html_path, md_path = folder / f"{stem}.html", folder / f"{stem}.md"
    outputs = [("--html", html_path), ("--md", md_path), ("--csv", csv_path)]
    check_report_files(outputs, map(reporting.result_file, results))
    loaded = reporting.load_results(results)
    ui = UI()
    for path in reporting.write(loaded, html_path, md_path, csv_path, names=names or None):
        ui.out.print(f"{path.suffix.lstrip('.')}: {path}", highlight=False)


@click.command()
@click.argument("results", nargs=-1, required=True, type=Path)
@click.option("--html", "html_path", type=Path, default=None,
              help="HTML comparison  [default: reports/<timestamp>-compare/compare.html; none with --json -]")
@click.option("--md", "md_path", type=Path, default=None, help="Markdown comparison  [default: beside the HTML]")
@click.option("--csv", "csv_path", type=Path, default=None,
              help="CSV, one row per run  [default: beside the default HTML]")
@click.option("--name", "names", multiple=True, help="A name per result, in order  [default: FSTYPE at MOUNT]")
@click.option("--json", "json_path", default=None,
              help="Also write the comparison as JSON here (- for stdout, and then no other file): the headline and, "
                   "per system, its label, verdict and best runs.")
def compare(results: tuple[Path, ...], html_path: Path | None, md_path: Path | None, csv_path: Path | None,
            names: tuple[str, ...], json_path: str | None) -> None:
    """Pre-purchase view: several mounts or systems side by side on the same workload, the winner per metric."""
    if len(results) < 2:
        raise UserError("compare needs two or more result files (for one, use `iobench report`)")
    to_stdout = json_path == STDOUT
    if html_path is None and md_path is None and not to_stdout:
        folder = Path("reports") / f"{time.strftime('%Y%m%d-%H%M%S')}-compare"
        html_path, md_path = folder / "compare.html", folder / "compare.md"
        csv_path = csv_path or folder / "compare.csv"
    outputs = [("--html", html_path), ("--md", md_path), ("--csv", csv_path), ("--json", json_path)]
    check_report_files(outputs, map(reporting.result_file, results))
    check_json_target(json_path)
    loaded = reporting.load_results(results)
    _refuse_the_same_twice(results, loaded)
    written = reporting.write(loaded, html_path, md_path, csv_path, names=names or None)
    ui = UI(stdout_free=to_stdout)
    fs = [reporting.facts(r, n) for r, n in zip(loaded, reporting.labels(loaded, names or None), strict=True)]
    headline = reporting.compare_headline(loaded, fs, [f.label for f in fs])
    ui.out.print(headline, highlight=False)
    ui.table(reporting.compare_table(loaded, fs)[0])
    for path in written:
        ui.out.print(f"{path.suffix.lstrip('.')}: {path}", highlight=False)
    if json_path is not None:
        systems = [{"label": f.label, "result": str(path), "fstype": r.mount.fstype, "mount": r.mount.path,
                    "complete": r.complete, "provisional": f.provisional,
                    "verdict": f.verdict.model_dump(mode="json") if f.verdict else None,
                    "best_cold": _run_figures(f.best_cold), "best_warm": _run_figures(f.best_warm)}
                   for path, r, f in zip(results, loaded, fs, strict=True)]
        write_json(dump({"headline": headline, "systems": systems}), json_path)


def _refuse_the_same_twice(paths: tuple[Path, ...], loaded: list[Result]) -> None:
    """A result compared with itself (the same file twice, or a copy of it: the same run's start, host and mount)
    names no winner: it is refused."""
    seen: dict[tuple[str, ...], Path] = {}
    for path, r in zip(paths, loaded, strict=True):
        key = (str(r.created), r.host.hostname, r.mount.path, r.dataset.path)
        if key in seen:
            raise UserError(f"{seen[key]} and {path} are the same result (the run of {r.created} on "
                            f"{r.host.hostname}): compare two different results")
        seen[key] = path


def _run_figures(run: Any) -> dict[str, Any] | None:
    """The figures of one measured run a comparison sets side by side."""
    if run is None:
        return None
    return {"samples_per_s": run.samples_per_s, "mb_per_s": run.mb_per_s, "engine": run.engine,
            "readers": run.concurrency, "workers": run.workers, "cache": run.cache, "order": run.order,
            "source": run.source, "p50_ms": run.latency_ms.p50, "p99_ms": run.latency_ms.p99}


@click.command("plan")
@click.option("--gpu", type=GPU, required=True, help="Kind of GPU (see `iobench gpus`).")
@click.option("--gpus", "gpus_", type=int, required=True, help="How many GPUs train at once.")
@click.option("--model", type=MODEL, required=True, help="Model they train (see `iobench gpus`).")
@click.option("--files", "dataset_files", cls=Renamed, old=("--dataset-files",), type=int, default=1_281_167,
              show_default=True,
              help="Samples in the dataset (ImageNet-1k train's count, whatever the model; MLPerf Storage v3.0's "
                   "retinanet has 1,170,301 by default).")
@click.option("--mean-size", default=None,
              help="Mean sample size, as --size-dist writes sizes (110kB, 97KiB, 2MiB); the plan says which it "
                   "took.  [default: the result's dataset mean where it ran this model or the model trains on "
                   "ImageNet-sized images, else the model's own (MLPerf Storage v3.0's unet3d 146,600.6kB, "
                   "cosmoflow 2,828.5kB, retinanet 323.0kB), else ImageNet's 110kB]")
@click.option("--mean-kb", type=float, default=None, hidden=True)  # the old spelling of --mean-size, in kB
@click.option("--au-target", type=float, default=0.9, show_default=True,
              help="AU a GPU must reach to count as fed (MLPerf Storage: 0.90 for resnet50 and unet3d, 0.85 for "
                   "retinanet, 0.70 for cosmoflow).")
@click.option("--rate", type=float, default=None, help="Samples/s one GPU consumes (instead of the table's).")
@click.option("--rate-kind", type=click.Choice(KINDS), default=None,
              help="Kind of table rate (see `iobench gpus`) [default: the first kind the GPU and model have, in "
                   "the order measured, published, mlperf-storage; printed beside the rate]; not with --rate.")
@click.option("--gpus-per-node", type=int, default=8, show_default=True, help="GPUs per client node.")
@click.option("--result", "result_paths", type=Path, multiple=True,
              help="A result file (or its folder): how many GPUs and nodes the measured storage supports, headroom, "
                   "and what-ifs (part of the dataset cached, more readers). Repeat it with distributed results at "
                   "1, 2, ... nodes: how the storage scaled with clients.")
@click.option("--pipeline", default=None,
              help="With --result: the input pipeline whose measured CPU per sample plans the client's cores (one "
                   "its training runs went through: raw, torchvision, dali, dali-raw, FILE.py:FUNC).  [default: the "
                   "result's first]")
@click.option("--json", "json_path", default=None,
              help="Also write the plan as JSON here (- for stdout): its fields, nodes, and `measured` with --result.")
def plan_cmd(gpu: str, gpus_: int, model: str, dataset_files: int, mean_size: str | None, mean_kb: float | None,
             au_target: float, rate: float | None, rate_kind: str | None, gpus_per_node: int,
             result_paths: tuple[Path, ...], pipeline: str | None, json_path: str | None) -> None:
    """Capacity arithmetic: what N GPUs training a model ask of the storage; with --result, what it supports."""
    check_apart([("--json", json_path)], map(reporting.result_file, result_paths))
    check_json_target(json_path)
    if mean_size is not None:
        if mean_kb is not None:
            raise UserError("--mean-kb is the old spelling of --mean-size: give one")
        mean_kb = _size(mean_size, "--mean-size") / 1000
    if pipeline is not None and not result_paths:
        raise UserError("--pipeline picks the measured CPU per sample of a result's pipeline: give --result")
    results = reporting.load_results(result_paths) if result_paths else []
    if len(results) > 1 and any(r.distributed is None for r in results):
        raise UserError("several --result are read as a scaling series: each must be a distributed run (--ranks or "
                        "torchrun); give one result otherwise")
    # of a series, the result with the most nodes is the one planned from
    result = max(results, key=lambda r: r.distributed.nodes if r.distributed else 0) if results else None
    try:
        p = plan(gpu, gpus_, model, dataset_files=dataset_files, mean_kb=mean_kb, au_target=au_target, rate=rate,
                 result=result, gpus_per_node=gpus_per_node, kind=rate_kind, series=results, pipeline=pipeline)
    except ValueError as exc:
        raise UserError(f"plan: {exc}") from None
    ui = UI(stdout_free=json_path == STDOUT)
    click.echo(format_plan(p, width=ui.out.width), nl=False, err=ui.stdout_free)
    if json_path is not None:
        write_json(dump({**dataclasses.asdict(p), "nodes": p.nodes}), json_path)


@click.command()
@click.option("--rate-kind", type=click.Choice(KINDS), default=None,
              help="List rows of this kind only [default: all].")
@click.option("--json", "json_path", default=None,
              help="Also write the rows as JSON here (- for stdout): a list of {model, gpu, samples_per_s, batch, "
                   "precision, source, kind}.")
def gpus(rate_kind: str | None, json_path: str | None) -> None:
    """Per-GPU training consumption rates iobench knows, each with its kind and source."""
    check_json_target(json_path)
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
        write_json(dump([r.model_dump(mode="json") for r in rows]), json_path)


@click.command("gpu-rate")
@click.option("--model", default="resnet50", show_default=True, help="A torchvision.models name.")
@click.option("--batch-size", "batch", cls=Renamed, old=("--batch",), type=int, default=256, show_default=True,
              help="Samples per step.")
@click.option("--steps", type=int, default=30, show_default=True, help="Timed steps (after 10 warm-up steps).")
@click.option("--device", default="cuda", show_default=True, help="Where to train (cuda, cuda:1, ...).")
@click.option("--quiet", is_flag=True, help="Print the rate alone (for `iobench run --rate $(...)`).")
def gpu_rate(model: str, batch: int, steps: int, device: str, quiet: bool) -> None:
    """Measure a model's training samples/s on this host's GPU (synthetic data, bf16, channels_last)."""
    rate = benchmark.measure(model, batch=batch, steps=steps, device=device)
    if quiet:
        click.echo(f"{rate:.1f}")
    else:
        click.echo(f"{model} on {device}: {rate:,.1f} training samples/s at batch {batch} "
                   f"(use it with: iobench run --model {model} --rate {rate:.1f})")


@click.command()
@click.option("--json", "json_path", default=None,
              help="Also write them as JSON here (- for stdout): a list of {name, description, workload}, the "
                   "workload parsed (dataset, pattern, consumer; null when its file is invalid).")
def workloads(json_path: str | None) -> None:
    """Named workloads shipped with iobench (dataset shape, read pattern, GPU consumer)."""
    check_json_target(json_path)
    ui = UI(stdout_free=json_path == STDOUT)
    t = Table(title="workloads (--workload NAME or a .toml path)")
    t.add_column("name")
    t.add_column("what it is", overflow="fold")
    rows = []
    for name, description, parsed in available():  # each file read once, for the table and the JSON
        t.add_row(name, description)
        rows.append({"name": name, "description": description,
                     "workload": parsed.model_dump(mode="json") if parsed else None})
    ui.out.print(t)
    if json_path is not None:
        write_json(dump(rows), json_path)


@click.command()
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
