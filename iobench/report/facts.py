"""What a report says about a result, computed once for every writer (HTML, Markdown, the terminal summary):
the verdict and the runs that stand for it, the headline, the caveats, the environment, and each table as a
header and rows of text (`Table`). The writers only lay these out; none of them decides a figure or a word."""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from iobench.answer.client import verdict
from iobench.answer.plan import Implausible, Measured, plan
from iobench.answer.rules import (
    OVER_FIO_CPU,
    StorageFigure,
    au_cell,
    costlier_than_fio,
    cpu_saturated,
    cpu_words,
    raw_valid,
    replay_runs,
    storage_figure,
    storage_runs,
    supply_run,
    times,
)
from iobench.answer.words import counted, raw_baseline, raw_depth, raw_tool, raw_unit, server_cache_note
from iobench.errors import UserError
from iobench.report.format import engine, gb, ms, num, readers, when
from iobench.result import RawPoint, Result, Run, Verdict

SMALL_CLIENT_CPUS = 4
SMALL_DATASET = 100_000


@dataclass(frozen=True)
class Facts:
    """What a report says about one result, computed once for every writer."""

    label: str
    verdict: Verdict | None
    provisional: bool  # the verdict was computed here from an unfinished result
    storage: StorageFigure | None  # the one storage figure (fio's or a loader's): what every writer calls storage
    best_cold: Run | None  # the best valid cold loader run
    best_warm: Run | None
    main: Run | None  # the run whose timeline is shown (the supply run, else the best run)
    au_target: float  # the verdict's, else the settings'
    rate_per_gpu: float | None  # likewise
    need_per_gpu: float | None  # au_target x per-GPU rate
    caveats: list[str]


def facts(result: Result, label: str | None = None) -> Facts:
    v, provisional = result.verdict, False
    if v is None:
        try:
            v, provisional = verdict(result), not result.complete
        except (ValueError, StopIteration, ZeroDivisionError):
            v = None
    done = replay_runs(result)
    best_cold = max(storage_runs(result), key=lambda r: r.samples_per_s, default=None)
    best_warm = max((r for r in done if r.cache == "warm"), key=lambda r: r.samples_per_s, default=None)
    main = supply_run(result) or best_cold or max(done, key=lambda r: r.samples_per_s, default=None)
    rate = (v.rate_per_gpu if v and v.rate_per_gpu else None) or result.settings.rate_per_gpu
    tau = (v.au_target if v and v.au_target else None) or result.settings.au_target
    return Facts(label=label or default_label(result), verdict=v, provisional=provisional,
                 storage=storage_figure(result), best_cold=best_cold, best_warm=best_warm, main=main, au_target=tau,
                 rate_per_gpu=rate, need_per_gpu=tau * rate if rate else None, caveats=caveats(result, best_cold, v))


def default_label(result: Result) -> str:
    return f"{result.mount.fstype} at {result.mount.path}"


def labels(results: Sequence[Result], names: Sequence[str] | None = None) -> list[str]:
    """One distinct label per result: the given names; else one result's 'fstype at path'; else, side by side, short
    ones (`short_labels`). Every writer starts here, so this is where no results at all is refused."""
    if not results:
        raise UserError("no results to report")
    if names:
        if len(names) != len(results):
            raise UserError(f"{len(names)} names for {len(results)} results")
        return list(names)
    if len(results) == 1:
        return [default_label(results[0])]
    return short_labels(results)


LABEL_PATH = 24  # a mount path in a label longer than this is shortened in its middle


def short_labels(results: Sequence[Result]) -> list[str]:
    """Labels for results side by side (a table's column heads): the mount's last folder and its file system
    ("sshfs-mnt (fuse.sshfs)"); where two are alike, the host first (on other hosts), else the mount's path,
    shortened in its middle (other mounts), else the date (the same mount); numbered where still alike."""
    def label(r: Result, host: bool, path: bool, date: bool) -> str:
        p = r.mount.path
        place = (p if len(p) <= LABEL_PATH else f"{p[:LABEL_PATH // 2 - 1]}…{p[-(LABEL_PATH // 2):]}") if path \
            else (Path(p).name or p)
        text = f"{r.host.hostname + ':' if host else ''}{place} ({r.mount.fstype})"
        return f"{text}, {when(r.created)[:16]}" if date else text

    shown = [[False, False, False] for _ in results]  # per result: its host, its whole path, its date
    for part, differs in enumerate((lambda r: r.host.hostname, lambda r: r.mount.path, None)):
        now = [label(r, *f) for r, f in zip(results, shown, strict=True)]
        for text in {x for x in now if now.count(x) > 1}:
            alike = [i for i, x in enumerate(now) if x == text]
            if differs is None or len({differs(results[i]) for i in alike}) > 1:
                for i in alike:
                    shown[i][part] = True
    out = [label(r, *f) for r, f in zip(results, shown, strict=True)]
    return [f"{x} #{i + 1}" if out.count(x) > 1 else x for i, x in enumerate(out)]


def caveats(result: Result, best: Run | None = None, v: Verdict | None = None) -> list[str]:
    """What a reader must know before trusting the figures, most important first."""
    out: list[str] = []
    if not result.complete:
        out.append("This run did not finish (complete: false): the figures cover only what was measured before it "
                   "stopped, and the verdict is provisional.")
    interrupted = [r for r in result.runs if not r.complete]
    if interrupted:
        out.append(f"{len(interrupted)} epoch(s) were interrupted: their figures cover the samples read.")
    out += result.warnings
    if result.remote and not any("server" in w for w in result.warnings):
        out.append(server_cache_note(result))
    cached_cold = [r for r in result.runs if r.cache == "cold" and r.measures in ("page-cache", "mixed")]
    if cached_cold:
        out.append(f"{len(cached_cold)} cold run(s) found the data already cached (measures: page-cache or mixed): "
                   "eviction did not take; they are not storage figures and the verdict leaves them out.")
    if any(r.cache == "warm" and r.measures == "page-cache" for r in result.runs):
        out.append("Warm figures were read from this client's RAM (page cache), not from the storage.")
    cpus = result.host.cpus or 0
    if cpus and cpus <= SMALL_CLIENT_CPUS:
        out.append(f"Small client: {cpus} CPU cores. iobench's readers share them, so this client may cap the "
                   "rates before the storage does; a training node has many more cores.")
    if best is not None and cpu_saturated(best.cpu, result):
        out.append(f"During the best cold run {cpu_words(best.cpu, result)}: the client CPU, not the storage, set "
                   "that pace.")
    costly = costlier_than_fio(result)
    if costly:
        r, b, x = max(costly, key=lambda c: c[2])
        # a DataLoader's reading does more than fio's (docs/performance.md, "the copy's alignment")
        landing = ("; a DataLoader's includes landing each batch's bytes in memory, as a training job's does, where "
                   "fio reads every file into one buffer") if r.engine == "dataloader" else ""
        out.append(f"iobench's own path cost more than {OVER_FIO_CPU:g}x fio's CPU per sample in {len(costly)} run(s) "
                   f"(the most: {num(x * (b.cpu_us_per_sample or 0), 1)} us of reading against fio's "
                   f"{num(b.cpu_us_per_sample, 1)} at {readers(r)}, {r.cache}, {x:.1f}x"
                   f"{landing}): where the client's CPU sets the pace, the "
                   "tool's own cost, not the storage, may be what limits.")
    if not result.host.root and any(r.cache == "cold" for r in result.runs):
        out.append("Not run as root: cold runs evicted file pages with posix_fadvise(DONTNEED); the dentry and "
                   "attribute caches were not dropped.")
    if result.dataset.files < SMALL_DATASET:
        out.append(f"Small dataset: {result.dataset.files:,} files ({result.dataset.bytes / 1e9:.2f} GB). Full-size "
                   f"datasets (ImageNet: {result.settings.scale_files:,} files) stress metadata and caches more.")
    if v is not None and v.client_gpus_fed is not None and not v.gpus_fed_confirmed:
        out.append("This client's GPUs fed is predicted from the sustained rate; no training run with emulated GPUs "
                   "confirmed it.")
    invalid = [r for r in result.runs if not r.valid]
    if invalid:
        out.append(f"{len(invalid)} run(s) are marked invalid and left out of the verdict: "
                   + "; ".join(f"epoch {r.epoch}, {r.invalid_reason}" for r in invalid[:3])
                   + ("; ..." if len(invalid) > 3 else "") + ".")
    if result.baseline and result.baseline.note:
        out.append(f"{raw_baseline(result)}: {result.baseline.note}")
    return out


def headline(result: Result, f: Facts) -> str:
    """The answer in one plain sentence, for the top of the report."""
    text = _headline(result, f)
    return f"Provisional (the run did not finish): {text[:1].lower()}{text[1:]}" if f.provisional else text


def _headline(result: Result, f: Facts) -> str:
    v = f.verdict
    if v is not None and v.answer:
        return v.answer
    raw = raw_best_point(result)
    if raw is not None:
        return (f"{raw_baseline(result)} only (no loader replay): {raw.samples_per_s:,.0f} {raw_unit(result)} "
                f"({raw.mb_per_s:,.0f} MB/s) cold at {raw_depth(raw_tool(result), raw.concurrency)}.")
    return "No storage figure: no valid cold (storage) run completed."


def raw_best_point(result: Result) -> RawPoint | None:
    return max((b for b in (result.baseline.points if result.baseline else []) if b.cache == "cold"),
               key=lambda b: b.samples_per_s, default=None)


def consumer_words(result: Result) -> str:
    if result.settings.consumer == "cuda":
        return "each training step a real step of the model on a local GPU"
    return "each training step a sleep of batch ÷ rate (as MLPerf Storage emulates a GPU)"


def steps_per_gpu(result: Result, r: Run) -> int:
    """Batches each emulated GPU consumed in a training run."""
    batch = r.batch_size or result.settings.batch_size or 1
    return math.ceil(r.samples / max(r.gpus or 1, 1) / batch)


def environment(result: Result) -> list[tuple[str, str]]:
    """Where, on what, with which settings and command: (name, value) rows."""
    m, d, h, s = result.mount, result.dataset, result.host, result.settings
    evictions = sorted({r.eviction for r in result.runs if r.eviction})
    details = ", ".join(f"{k}={v}" for k, v in m.details.items()) or "-"
    params = ", ".join(f"{k}={v}" for k, v in (d.params or {}).items()) or "-"
    cpus = f"{h.cpus} CPUs" if h.cpus else "CPUs unknown"
    rows: list[tuple[str, str]] = [
        ("mount", f"{m.path} ({m.source})"),
        ("file system", f"{m.fstype} — family {m.family}" + (" (network/FUSE: remote)" if result.remote else "")),
        ("mount options", m.options),
        ("device", f"{m.device or '-'}, read_ahead_kb {m.read_ahead_kb if m.read_ahead_kb is not None else '-'}"),
        ("file-system details", details),
    ]
    if m.unread:
        rows.append(("not read", "; ".join(m.unread)))
    rows += [
        ("cache states", ", ".join(s.cache) + (f" (cold by {', '.join(evictions)})" if evictions else "")),
        ("dataset", f"{d.files:,} files, {gb(d.bytes)}, mean {d.mean_bytes / 1000:,.1f} kB, median "
                    f"{d.median_bytes / 1000:,.1f} kB" + (" — fits in RAM" if d.fits_in_ram else "")),
        ("dataset path", d.path),
        ("made by", f"iobench gen ({params})" if d.made_by_iobench else "an existing tree (--dataset)"),
        ("workload", f"{s.workload or '-'}: engine {s.engine}, readers {', '.join(map(str, s.concurrency))}, "
                     f"orders {', '.join(s.orders) or '-'}, epochs {s.epochs}"
                     + (f", batch {s.batch_size}" if s.engine == "dataloader" else "")
                     + (", decode + augment" if s.decode else "")),
        ("GPU consumer", f"{(s.gpu or '-').upper()} x {s.model or '-'} at "
                         f"{num(s.rate_per_gpu)} samples/s, AU target {s.au_target:.0%}"
                         + (f", {s.gpus} GPUs asked" if s.gpus else "") + f"; {consumer_words(result)}"),
        ("client", f"{h.hostname}: {cpus}, {gb(h.ram_bytes)} RAM ({gb(h.ram_available_bytes)} available), "
                   f"kernel {h.kernel}, Python {h.python}, {'root' if h.root else 'not root'}"),
        ("when", f"{when(result.created)} → {when(result.finished)}"
                 + ("" if result.complete else " (unfinished)")),
        ("iobench", f"{h.iobench}, {result.schema_}"),
        ("to repeat", shlex.join(result.command)),
    ]
    return rows


MONO_ROWS = ("to repeat", "mount options", "dataset path")  # environment rows that are commands and paths


# --------------------------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Table:
    """One table as every writer shows it: a title (the terminal's caption; the pages have a section heading
    instead), the header, and rows of text cells."""

    title: str
    head: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    left: int = 1  # the first `left` columns are text (aligned left); the others figures (aligned right) ...
    text_cols: tuple[int, ...] = ()  # ... but for these, text too
    wins: frozenset[tuple[int, int]] = frozenset()  # (row, column) cells holding the best value of their kind
    wide: tuple[int, ...] = ()  # columns only the HTML page shows: Markdown and the terminal stay narrow
    # The columns a narrow terminal keeps, most needed first, by header (a new column slots in by naming it where it
    # ranks); those not named go first, from the right. The terminal hides columns, never cuts a cell (`ranked`).
    keep: tuple[str, ...] = ()
    core: int = 0  # the first `core` of `keep` (what was run, samples/s, MB/s, p99) stay even if a text cell wraps

    def ranked(self) -> list[int]:
        """The columns, most needed first: those in `keep` in its order, then the others left to right."""
        named = [self.head.index(h) for h in self.keep if h in self.head]
        return named + [i for i in range(len(self.head)) if i not in named]

    def is_text(self, col: int) -> bool:
        return col < self.left or col in self.text_cols

    def narrow(self) -> Table:
        """The table without its `wide` columns (Markdown, the terminal)."""
        if not self.wide:
            return self
        keep = [i for i in range(len(self.head)) if i not in self.wide]
        new = {old: i for i, old in enumerate(keep)}
        return replace(self, head=tuple(self.head[i] for i in keep),
                       rows=tuple(tuple(row[i] for i in keep) for row in self.rows),
                       left=sum(1 for i in keep if i < self.left),
                       text_cols=tuple(new[i] for i in self.text_cols if i in new),
                       wins=frozenset((r, new[c]) for r, c in self.wins if c in new), wide=())


def _cells(*xs: object) -> tuple[str, ...]:
    return tuple(str(x) for x in xs)


def runs_table(result: Result) -> Table:
    """Every measured run: the sweep, the training runs and the mitigations, in the order measured."""
    rows = tuple(_cells(
        engine(r) + (f" [{r.mitigation}]" if r.mitigation else ""), r.order, _readers_cell(r),
        r.cache + ("" if r.complete else " (interrupted)") + ("" if r.valid else " (invalid)"), r.measures,
        num(r.samples_per_s), num(r.mb_per_s, 1),
        *(ms(getattr(r.latency_ms, k)) if r.latency_ms else "-" for k in ("p50", "p99", "p999", "max")),
        num(r.cpu.iobench_cores, 2), num(r.cpu_us_per_sample, 1), num(r.efficiency, 2), r.gpus or "-", au_cell(r.au))
        + ((num(r.in_flight), num(r.throttled)) if result.mount.objects else ())
        for r in result.runs)
    # object storage: the requests in flight (readers x --in-flight) and the throttled answers retried
    objects = ("in flight", "throttled") if result.mount.objects else ()
    vs = f"vs {raw_tool(result)}"  # each run's efficiency: against what ran as the raw baseline (ui.VS finds it)
    # p90 is left to the latency chart: a table that fits the page has a column fewer
    return Table(f"{result.mount.fstype} at {result.mount.path}: {result.dataset.files:,} files, "
                 f"{result.dataset.bytes / 1e9:.2f} GB (MB = 10^6 B)",
                 ("engine", "pattern", "readers", "cache", "measures", "samples/s", "MB/s", "p50 ms", "p99 ms",
                  "p99.9 ms", "max ms", "cores used", "CPU us/sample", vs, "GPUs", "AU", *objects),
                 rows, left=5, wide=(11,),
                 keep=("engine", "pattern", "readers", *objects[:1], "cache", "samples/s", "MB/s", "p99 ms",
                       "measures", *objects[1:], "AU", "GPUs", vs, "CPU us/sample", "p50 ms", "max ms",
                       "p99.9 ms"), core=7 + len(objects[:1]))


def _readers_cell(r: Run) -> str:
    """The runs table's readers: '4 workers' (its engine column says DataLoader, its GPUs column the GPUs), '16
    threads' (the requests in flight in a column of their own)."""
    return counted(r.concurrency, "thread") if r.reader == "threads" else counted(r.workers or 0, "worker")


def metadata_table(result: Result) -> Table | None:
    if not result.metadata:
        return None
    m0 = result.metadata[0]
    rows = tuple(_cells(m.cache, f"{m.list_s:.3f}", num(m.stat_per_s), ms(m.stat_ms.p99), num(m.open_close_per_s),
                        ms(m.open_close_ms.p99), f"{m.projected_list_s:,.1f} s") for m in result.metadata)
    # object storage: the same figures, of requests (LIST pages, HEAD, a first-byte GET)
    items, dirs, stat, opens = (("keys", "LIST requests, one request at a time", "HEAD", "first byte")
                                if result.mount.objects else ("files", "folders, one thread", "stat", "open+close"))
    return Table(f"metadata: {m0.files:,} {items} in {m0.dirs:,} {dirs}",
                 ("cache", "list s", f"{stat}/s", f"{stat} p99 ms", f"{opens}/s", f"{opens} p99 ms",
                  f"listing {m0.scale_files:,} {items} (predicted)"), rows)


def raw_table(result: Result) -> Table | None:
    b = result.baseline
    if b is None or not b.points:
        return None
    rows = tuple(_cells(x.concurrency, x.cache + ("" if raw_valid(x) else " (invalid)"), num(x.samples_per_s),
                        num(x.mb_per_s, 1), ms(x.latency_ms.p50), ms(x.latency_ms.p99), x.samples) for x in b.points)
    fio = b.tool == "fio"  # else the raw S3 client: every key GET once per point
    depth, unit, op = ("jobs", "files", "read") if fio else ("in flight", "objects", "GET")
    return Table(f"fio {b.tool_version or ''} on {b.points[0].samples:,} of the files" if fio else
                 f"{b.tool} {b.tool_version or ''} GETting all {b.points[0].samples:,} objects",
                 (depth, "cache", f"{unit}/s", "MB/s", f"{op} p50 ms", f"{op} p99 ms", unit), rows, left=0,
                 text_cols=(1,), wide=(6,))


def efficiency_table(result: Result) -> Table | None:
    """Each loader run against fio at the same concurrency and cache state."""
    eff = [r for r in replay_runs(result) if r.efficiency is not None]
    if not eff:
        return None
    rows = tuple(_cells(readers(r), r.cache, num(r.samples_per_s), num(r.efficiency, 2)) for r in eff)
    tool = raw_tool(result)
    return Table(f"efficiency: iobench's loader against {tool} at the same concurrency and cache state",
                 ("readers", "cache", "samples/s", f"samples/s ÷ {tool} files/s"), rows, left=2)


def mitigations_table(result: Result) -> Table | None:
    ms_ = result.mitigations
    if not ms_:
        return None
    gets = any(m.requests is not None for m in ms_)  # object storage: each row's GETs too
    rows = tuple(_cells(m.name + ("" if m.valid else " (invalid)"), m.source, num(m.samples_per_s),
                        f"{m.speedup:.2f}x", gb(m.extra_bytes) if m.extra_bytes else "-",
                        f"{m.pack_s:.1f} s" if m.pack_s else "-", m.gpus_fed if m.gpus_fed is not None else "-",
                        *((num(m.requests), ms(m.first_byte_ms), ms(m.request_ms)) if gets else ()),
                        m.note or m.invalid_reason or "") for m in ms_)
    valid = [i for i, m in enumerate(ms_) if m.valid]  # an invalid row is shown, never the best
    best = max(valid, key=lambda i: ms_[i].speedup, default=None)
    return Table("mitigations: cold, same pattern and readers as the baseline",
                 ("mitigation", "source", "samples/s (cold)", "speed-up", "extra space", "pack time", "GPUs fed",
                  *(("GETs", "first byte p50 ms", "GET p50 ms") if gets else ()), "note"), rows, left=2,
                 text_cols=(10 if gets else 7,),
                 wins=frozenset({(best, 3)}) if best is not None and ms_[best].speedup > 1 else frozenset(),
                 wide=(5,))


def fuse_view_table(result: Result) -> Table | None:
    """`run --url --mount`: the same epoch read as objects and as files through the FUSE view, side by side."""
    f = result.fuse_view
    if f is None:
        return None
    runs = {r.mitigation: r for r in result.runs if r.mitigation in ("objects", "fuse-view")}
    rows = []
    objects, files = f.objects_samples_per_s, f.files_samples_per_s
    for key, label, mine, other in (("objects", f"objects: a GET per sample ({result.mount.path})", objects, files),
                                    ("fuse-view", f"files: the FUSE view ({f.fstype} at {f.mount})", files, objects)):
        r = runs.get(key)
        if r is None:
            continue
        rows.append(_cells(label + ("" if r.valid else " (invalid)"), num(r.samples_per_s), num(r.mb_per_s, 1),
                           ms(r.opened.p50), ms(r.timed.p50), ms(r.timed.p99),
                           times(mine / other) if other else "-"))
    best = 0 if f.faster == "objects" else 1
    return Table(f"objects vs files on the same storage: {f.cache}, {f.readers} readers, the same shuffled order",
                 ("read as", "samples/s", "MB/s", "first byte / open p50 ms", "p50 ms", "p99 ms", "vs the other"),
                 tuple(rows), left=1, wins=frozenset({(best, 1)}) if len(rows) == 2 else frozenset())


def training_table(result: Result) -> Table | None:
    train = [r for r in result.runs if r.kind == "training"]
    if not train:
        return None
    tau = result.settings.au_target
    rows = tuple(_cells(r.gpus, num(r.consumer_rate), readers(r), r.cache, steps_per_gpu(result, r), r.epochs,
                        au_cell(r.au), au_cell(r.au_min), num(r.samples_per_s),
                        ("fed" if r.au is not None and r.au >= tau else "starved")
                        + ("" if r.complete else " (interrupted)") + ("" if r.valid else " (invalid)"))
                 for r in train)
    return Table("training runs (emulated GPUs)",
                 ("GPUs", "each GPU consumes (samples/s)", "loaders (per GPU)", "cache", "batches per GPU", "epochs",
                  "AU", "lowest AU", "samples/s", "outcome"), rows, left=0, text_cols=(2, 3, 9), wide=(2, 3))


def ranks_table(result: Result) -> Table | None:
    """A distributed run: each rank's own figures per epoch (the runs table holds the job's)."""
    if not result.ranks:
        return None
    rows = tuple(_cells(r.rank, r.host, e.epoch, e.cache + ("" if e.complete else " (interrupted)"),
                        num(e.samples), num(e.samples_per_s), f"{e.data_wait_s:.2f}", f"{e.allreduce_s:.2f}",
                        au_cell(e.au), ms(e.latency_ms.p50), ms(e.latency_ms.p99), num(e.cpu.iobench_cores, 2))
                 for r in result.ranks for e in r.epochs)
    d = result.distributed
    where = f"{d.world_size} ranks on {d.nodes} node{'s' if d.nodes > 1 else ''}, " if d else ""
    return Table(f"ranks: {where}each its own DataLoader and GPU, a per-step allreduce",
                 ("rank", "host", "epoch", "cache", "samples", "samples/s", "data wait s", "allreduce s", "AU",
                  "p50 ms", "p99 ms", "cores used"), rows, left=2, text_cols=(3,), wide=(11,))


def stats_table(result: Result) -> Table | None:
    """Each configuration over the repeats (`--repeat N`): mean, spread, stable or not."""
    if not any(st.repeats > 1 for st in result.stats):
        return None
    rows = tuple(_cells(st.engine, st.readers, st.cache, st.repeats, num(st.mean_samples_per_s),
                        num(st.std_samples_per_s), "-" if st.spread is None else f"{100 * st.spread:.1f}%",
                        "UNSTABLE (> 5%)" if st.unstable else "yes") for st in result.stats)
    return Table(f"over {result.settings.repeat} repeats: steady-state samples/s (epochs after the first)",
                 ("engine", "readers", "cache", "repeats", "mean", "std", "spread", "stable"), rows,
                 text_cols=(2, 7))


def tables(result: Result) -> dict[str, Table | None]:
    """One result's tables by name (None: nothing to show), in the terminal's order: each writer shows those it has a
    place for."""
    return {"metadata": metadata_table(result), "runs": runs_table(result) if result.runs else None,
            "stats": stats_table(result), "raw": raw_table(result), "efficiency": efficiency_table(result),
            "mitigations": mitigations_table(result), "fuse_view": fuse_view_table(result),
            "training": training_table(result), "ranks": ranks_table(result)}


# --------------------------------------------------------------------------------------------- what-ifs


def whatifs(result: Result) -> Measured | None:
    """The plan's what-ifs for this result's own GPU consumer (None without one or without a cold run)."""
    s = result.settings
    if not s.rate_per_gpu:
        return None
    try:
        m = plan(s.gpu or "gpu", 1, s.model or "model", au_target=s.au_target, rate=s.rate_per_gpu,
                 result=result).measured
    except Implausible:  # figures no plan prints (a rate of 0.001 samples/s per GPU): the report goes without them
        return None
    return m if m is not None and m.cache == "cold" else None


def cache_whatif_table(m: Measured) -> Table | None:
    if not m.cache_whatif:
        return None
    rows = tuple(_cells(f"{w.fraction:.0%}", num(w.samples_per_s), w.gpus, w.label) for w in m.cache_whatif)
    return Table("part of the dataset cached (predicted)",
                 ("cached fraction x", "samples/s (predicted)", "GPUs fed (predicted)", ""), rows, text_cols=(3,))


def readers_whatif_table(m: Measured) -> Table | None:
    if not m.concurrency_whatif:
        return None
    rows = tuple(_cells(w.readers, num(w.samples_per_s), num(w.measured), w.gpus)
                 for w in m.concurrency_whatif)
    return Table("more readers (predicted)", ("readers", "samples/s (predicted)", "measured", "GPUs fed (predicted)"),
                 rows, left=0)


def whatif_gpu_note(result: Result, m: Measured) -> str:
    text = ("GPUs fed (predicted) = samples/s ÷ (AU target × per-GPU rate), the arithmetic the verdict uses without "
            "training runs.")
    v = result.verdict
    if v is not None and v.gpus_fed_confirmed and v.client_gpus_fed is not None \
            and v.client_gpus_fed < m.gpus_supported:
        text += (f" Here the training runs measured {v.client_gpus_fed} at today's rate where the arithmetic says "
                 f"{m.gpus_supported}: read these as upper bounds.")
    return text
