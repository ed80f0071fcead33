"""One measured run, as `iobench run` and `iobench fio` ask for it (no click here: iobench.cli gives the Settings
and the dataset's Shape): where the outcome goes checked, the storage probed, the dataset picked or made and
locked, the result folder claimed, the phases run (iobench.phases.pipeline; a distributed run's rank 0:
iobench.distributed), the reports and the JSON written, also for a run cut short. Also the dataset work of
`iobench gen` and `iobench pack`."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from contextlib import nullcontext, suppress
from pathlib import Path

import numpy as np

from iobench import store
from iobench.answer.sizing import too_few_files
from iobench.answer.words import counted
from iobench.dataset import (
    GenSpec,
    Manifest,
    check_mount,
    generate,
    read_marker,
    spec_of,
)
from iobench.dataset import scan as scan_tree
from iobench.dataset.imagefolder import SCAN_THREADS
from iobench.distributed import epochs as job_epochs
from iobench.distributed.job import Job, RankLost, World
from iobench.errors import Interrupted, UserCodeError, UserError
from iobench.host.mounts import host_info
from iobench.host.stall import DEFAULT_IO_TIMEOUT_S, StorageStalled, run_finished
from iobench.output import STDOUT, check_apart, check_json_target, check_out_target, stdout_to_stderr, write_json
from iobench.phases.fio import FioMissing, fio_version
from iobench.phases.mitigations import restore_left_settings
from iobench.phases.pipeline import execute, now_iso
from iobench.report import write_reports
from iobench.result import Dataset, Host, Mount, Result, Settings
from iobench.safefs import fmt_bytes
from iobench.store import Location, lock
from iobench.ui import UI


@dataclasses.dataclass(frozen=True)
class Shape:
    """The dataset a command asks for under --mount: `spec` in full (the options given, else the workload's) and
    `asked`, the parts of it the user chose (typed, or set by a --workload they named)."""

    spec: GenSpec
    asked: frozenset[str]  # keys of GenSpec.as_dict(): files, size_dist, classes, seed

    def matches(self, params: dict) -> bool:
        want = self.spec.as_dict()
        return all(params.get(k) == want[k] for k in self.asked)


def probe(path: Location, timeout_s: float | None = DEFAULT_IO_TIMEOUT_S) -> None:
    """Ask the storage something it must answer itself before any work there (see Store.probe): one that already
    stopped answering ends in `timeout_s` with exit 3, not in a hang."""
    store.open(path, timeout_s=timeout_s or DEFAULT_IO_TIMEOUT_S).probe(timeout_s)


def require_fio() -> None:
    """`iobench fio` measures with the fio binary: refused before anything else when it is not installed."""
    if fio_version() is None:
        raise FioMissing()


def make(mount: Location, spec: GenSpec, ui: UI, threads: int | None = None,
         timeout_s: float = DEFAULT_IO_TIMEOUT_S) -> Manifest:
    """The dataset of this spec under `mount`: the one made earlier, or written now (with a progress bar); a
    bucket's requests bounded by `timeout_s` (--io-timeout)."""
    where = store.open(mount, timeout_s=timeout_s)
    where.check(writable=False)
    ui.info(f"dataset: {spec.files:,} JPEGs ({spec.dist.spec}) in {spec.classes} class folders under {mount}")
    what = where.items
    with ui.progress("gen", spec.files, what) as progress:
        rep = generate(where, spec, threads=threads, progress=progress)
    if rep.reused:
        ui.info(f"reusing the existing dataset {rep.manifest.root}")
    else:
        rate = rep.written_bytes / rep.seconds / 1e6 if rep.seconds else 0.0
        ui.info(f"wrote {rep.written:,} {what}, {fmt_bytes(rep.written_bytes)} in {rep.seconds:.1f} s "
                f"({rate:,.0f} MB/s{', synced' if where.client_cache else ''}) to {rep.manifest.root}")
    return rep.manifest


def pick(mount: Location, shape: Shape, ui: UI) -> GenSpec:
    """The dataset `run --mount` (and `fio`, `pack`) uses, by its whole shape: the one of the full shape (the
    workload's, with the options given), made or reused; where that is not there but some match every part the user
    chose (--files N, ...), the one nearest the full shape (`_nearest`), said which. The others are named in a note."""
    where = store.open(mount)
    where.check(writable=False)
    full = shape.spec
    found = {name: where.marker(name) for name in where.names()}
    chosen = full
    if full.name not in found and shape.asked:
        fits = [(name, m) for name, m in found.items() if m and shape.matches(m["params"])]
        nearest = _nearest(fits, full)
        if nearest is not None:
            name, marker = nearest
            chosen = spec_of(marker)
            of = (f": of the {len(fits)} that match what was asked, the one nearest the workload's shape "
                  f"({_shape_words(full.as_dict())})" if len(fits) > 1 else "")
            ui.info(f"using the dataset iobench made earlier: {where.location(name)} "
                    f"({_shape_words(marker['params'])}){of}")
    others = [name for name in found if name != chosen.name]
    if others:
        ui.info(f"other shapes under {where.root()}, not used: {', '.join(others[:4])}"
                f"{f' and {len(others) - 4} more' if len(others) > 4 else ''} (one is taken by its --files, "
                "--size-dist, --classes and --seed, or named with --dataset PATH)")
    return chosen


NEAREST = ("size_dist", "seed", "classes")  # what makes a dataset near the workload's, the sizes first


def _nearest(fits: list[tuple[str, dict]], full: GenSpec) -> tuple[str, dict] | None:
    """Of the datasets that match what was asked, the one nearest the full shape (its sizes, then seed, then
    classes); None where there is none, or two are as near (the full shape is made then: the order they are listed
    in never decides)."""
    want = full.as_dict()

    def score(marker: dict) -> tuple[bool, ...]:
        return tuple(marker["params"].get(k) == want[k] for k in NEAREST)

    ranked = sorted(fits, key=lambda f: score(f[1]), reverse=True)
    if not ranked or (len(ranked) > 1 and score(ranked[0][1]) == score(ranked[1][1])):
        return None
    return ranked[0]


def _shape_words(params: dict) -> str:
    return (f"--files {params['files']} --size-dist {params['size_dist']} --classes {params['classes']} "
            f"--seed {params['seed']}")


def scan_dataset(dataset: Path, ui: UI, follow_links: bool = False) -> Manifest:
    """An existing image tree (missing or unreadable: exit 3, like a missing mount), listed with a live line, its
    listing cached outside it (~/.cache/iobench/scans/); links out of it skipped unless `follow_links`."""
    check_mount(dataset, writable=False, what="dataset")
    t0, seen = time.perf_counter(), [0, 0]

    def found() -> str:  # there is no total to show a bar against: the count is the progress
        rate = seen[0] / max(time.perf_counter() - t0, 1e-9)
        return f"{seen[0]:,} images in {seen[1]:,} folders ({rate:,.0f} files/s)"

    def progress(files: int, folders: int) -> None:
        seen[:] = files, folders

    with ui.status("scan", found):
        return scan_tree(dataset, threads=SCAN_THREADS, progress=progress, cache=True, say=ui.info,
                         follow_links=follow_links)


def pack(mount: Location, dataset: Path | None, shape: Shape, formats: tuple[str, ...], shard_bytes: int,
         ui: UI) -> None:
    """`iobench pack`: the dataset (named, or picked by its shape and made when missing) packed in each format inside
    it (packed/lmdb, packed/tar-SIZE), under its lock (not while a run reads it)."""
    probe(dataset if dataset is not None else mount)
    spec = pick(mount, shape, ui) if dataset is None else None
    where = store.open(dataset if dataset is not None else mount)
    folder = store.dataset_location(where, dataset, spec.name if spec else None)
    with where.lock(folder) if folder is not None else nullcontext():
        if dataset is not None:
            manifest = scan_dataset(dataset, ui)
        else:
            assert spec is not None
            manifest = make(mount, spec, ui)
        for fmt in formats:
            with ui.progress(f"pack {fmt}", len(manifest), "files") as progress:
                rep = where.pack(manifest, fmt, shard_size=shard_bytes, progress=progress)
            how = "reused" if rep.reused else f"made in {rep.seconds:.1f} s"
            ui.out.print(f"{fmt}: {rep.path} ({rep.samples:,} samples, {fmt_bytes(rep.bytes)} "
                         f"in {where.items}, {how})", highlight=False)


def check_outputs(json_path: str | None, out: Path | None, dataset: Path | None = None,
                  workload: str | None = None) -> None:
    """Where a run's outcome goes can take it: the JSON file (or an open stdout), the result folder (an --out
    that exists must be empty); neither is the workload file read, nor inside the dataset (iobench.output)."""
    where = "--out" if out else "the result folder"
    check_apart([("--json", json_path), (where, out or Path("reports"))],  # first: a link to the input is the input
                [Path(workload)] if workload else [], dataset)
    check_json_target(json_path)
    check_out_target(out or Path("reports"), where, given=out is not None)


def _refuse_too_few(settings: Settings, files: int, job: Job | None, named: bool = False) -> None:
    """Known before anything is measured: a dataset too small for a run to count is refused, not measured as
    invalid runs (answer/sizing.too_few_files says the rule and the --files that meets it)."""
    why = too_few_files(settings, files, job.w.world_size if job is not None else None, named)
    if why:
        raise UserError(why)


def _capped_in_flight(settings: Settings, files: int) -> list[str]:
    """Said before measuring: each --in-flight value a run keeps fewer of (Settings.depth_for), and why."""
    said = []
    for conc in settings.concurrency:
        for depth in settings.in_flight:
            kept = settings.depth_for(conc, depth, files)
            if kept < depth:
                why = (f"a worker keeps its GETs within its batch (--batch-size {settings.batch_size})"
                       if settings.engine == "dataloader" and kept == settings.batch_size else
                       f"{files:,} objects give each reader {kept:,}")
                said.append(f"--in-flight {depth:,} at {counted(max(conc, 1), settings.reader[:-1])}: "
                            f"{kept:,} GETs in flight per reader, {max(conc, 1) * kept:,} in all: {why}")
    return said


def measure(settings: Settings, mount: Location, dataset: Path | None, shape: Shape, json_path: str | None,
            out: Path | None, ui: UI, notes: list[str] | None = None, job: Job | None = None) -> Result:
    """Check where the outcome goes, put back the device settings a killed run left changed, lock the dataset (one
    process per dataset), claim a result folder (NAME, NAME-2, ...) and measure (`_measure_here`); the JSON goes to
    `json_path` (- for stdout, alone) also when the run is cut short (complete: false)."""
    check_outputs(json_path, out, dataset, settings.workload)
    probe(dataset if dataset is not None else mount, settings.io_timeout_s)
    for line in restore_left_settings():
        ui.warn(line)
    spec = pick(mount, shape, ui) if dataset is None else None
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
            fstype, path = where.place(folder or dataset or mount)
            label = f"{fstype.replace('.', '-')}-{Path(path).name or 'root'}"
            out = lock.claim_folder(reports / f"{time.strftime('%Y%m%d-%H%M%S')}-{label}")
            made.insert(0, out)
        try:
            with stdout_to_stderr() if json_path == STDOUT else nullcontext():
                result, stopped = _measure_here(settings, mount, dataset, spec, out, ui, notes, job)
            if stopped is not None:
                # raised inside the lock, which then leaves its file alone (the storage may have stopped answering)
                if json_path is not None:
                    write_json(result.model_dump_json(indent=1, by_alias=True), json_path)
                raise stopped
        except BaseException:
            for p in made:  # nothing was measured: no empty result folder is left behind
                with suppress(OSError):
                    p.rmdir()
            raise
    if json_path is not None:
        write_json(result.model_dump_json(indent=1, by_alias=True), json_path)
    return result


def measure_rank(w: World, timeout_s: float, settings: Settings, mount: Location, dataset: Path | None, shape: Shape,
                 json_path: str | None, out: Path | None, ui: UI, notes: list[str]) -> Result | None:
    """One rank of a distributed run: rank 0 measures as a run does (the dataset, the result, the report) with
    the job's epochs; the others follow it (None). A rank that fails tells the others why before it leaves."""
    job = Job(w, timeout_s)
    try:
        if w.rank == 0:
            return measure(settings, mount, dataset, shape, json_path, out, ui, notes, job=job)
        job_epochs.follow(job, UI(quiet=True))
        return None
    except BaseException as exc:
        job.fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        if not isinstance(exc, KeyboardInterrupt):  # a stop is the launcher's: nothing to wait for
            job.close()  # first: rank 0's collective ends at once
            job.await_rank_0()
        raise
    finally:
        job.close()


def _measure_here(settings: Settings, mount: Location, dataset: Path | None, spec: GenSpec | None, out: Path,
                  ui: UI, notes: list[str] | None, job: Job | None = None) -> tuple[Result, Exception | None]:
    """Make or list the dataset, the Result's header (`notes`: the command's caveats, among its warnings), the phases,
    the outcome printed. Returns the result and, for a run cut short, the exception to raise once the JSON is out."""
    if dataset is not None:
        manifest = scan_dataset(dataset, ui, settings.follow_links)
        marker = read_marker(manifest.folder)
        made, params = bool(marker), marker.get("params") if marker else None
        ui.info(f"dataset: {dataset} ({len(manifest):,} image{'' if len(manifest) == 1 else 's'})")
    else:
        assert spec is not None
        manifest = make(mount, spec, ui, timeout_s=settings.io_timeout_s or DEFAULT_IO_TIMEOUT_S)
        made, params = True, spec.as_dict()

    _refuse_too_few(settings, len(manifest), job, named=dataset is not None)  # a tree's size is known once listed
    notes = [*(notes or []), *_capped_in_flight(settings, len(manifest))]
    where = store.open(manifest.root)
    mount_info = Mount(**where.describe(manifest.root))
    host = host_info()
    fits = where.client_cache and manifest.total_bytes < host["ram_bytes"]  # without one, nothing of it is kept
    result = Result(
        created=now_iso(), command=["iobench", *sys.argv[1:]], host=Host(**host), mount=mount_info,
        dataset=Dataset(path=str(manifest.root), files=len(manifest), bytes=manifest.total_bytes,
                        mean_bytes=round(float(manifest.sizes.mean()), 1),
                        median_bytes=float(np.median(manifest.sizes)), made_by_iobench=made, params=params,
                        fits_in_ram=fits, links_skipped=manifest.links_skipped,
                        links_followed=manifest.links_followed),
        settings=settings, remote=mount_info.family != "local", warnings=list(notes or []),
    )
    if fits:
        result.warnings.append(
            f"the dataset ({manifest.total_bytes / 1e9:.2f} GB) fits in this host's RAM "
            f"({host['ram_bytes'] / 1e9:.0f} GB): warm runs measure the page cache, not storage; cold runs "
            "evict it first. For storage figures that hold over many epochs use a dataset >= 5x RAM.")
    if not where.client_cache:
        result.warnings.append(
            "object storage has no client cache to drop: a cold epoch is the first read of each key in this run, a "
            "warm one the second; what the server caches (its RAM, flash tiers) is its own and stays.")
    elif result.remote:
        result.warnings.append(
            f"{mount_info.fstype} is a network/FUSE file system: cold runs evict this client's cache only; "
            "the server's cache may still hold the data.")
    for w in result.warnings:
        ui.warn(w)
    if os.geteuid() != 0:
        ui.info("not root: cold runs evict with posix_fadvise(DONTNEED) per file")

    result_path = out / "result.json"
    try:
        if job is None:
            execute(manifest, settings, result, result_path, ui)
        else:  # rank 0 of a distributed run: the job's epochs, every rank's figures gathered here
            job_epochs.lead(job, manifest, settings, result, ui)
            job_epochs.execute(job, manifest, settings, ui, result, result_path)
    except (Interrupted, StorageStalled, RankLost, UserCodeError) as exc:  # what was measured is saved
        write_reports(result, result_path.parent)  # opens with an "unfinished" banner
        return result, exc
    except UserError as exc:  # a read that failed mid-run (a key gone, ...): what was measured is saved, reported
        if not result_path.exists():
            raise
        write_reports(result, result_path.parent)
        return result, exc
    ui.summary(result)
    written = write_reports(result, result_path.parent)
    ui.say(f"result: {result_path}\nreport: {written[0]}")
    assert result.verdict is not None
    ui.verdict(result.verdict)
    if job is None:  # a rank's stop after its result is the launcher's (or torchrun's) to judge, as before
        run_finished()
    return result, None
