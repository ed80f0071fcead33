"""One client's answer in words: its first line (the storage's answer, then this client's), the evidence lines (the
storage, the need, MLPerf Storage's accelerators, this client), the lines when no valid run remains, and the notes
after the evidence."""

from __future__ import annotations

import math

from iobench import pipelines
from iobench.answer.client_figures import Asked, Ceiling, Count, Pipeline
from iobench.answer.rules import (
    MIN_BATCHES_PER_READER,
    MIN_SECONDS,
    MIN_TRAIN_STEPS,
    MITIGATION_NOTE,
    STARTUP_NOTE_S,
    UNSTABLE,
    StorageFigure,
    cpu_words,
    demand,
    floor_to,
    gpus_for,
    replay_runs,
    round_files,
    steady_rate,
    times,
    usable_cores,
)
from iobench.answer.words import (
    LIMIT_WORDS,
    gpu_short,
    gpus_short,
    raw_baseline,
    raw_tool,
    reader_unit,
    readers,
    server_cache_note,
)
from iobench.gpu.rates import rates
from iobench.result import Result, Run, Settings, Verdict

KIND_WORDS = {
    "measured": "measured by iobench's makers training on one H200 with synthetic data: a compute ceiling, not a "
                "measurement of yours",
    "published": "NVIDIA's published training rate",
    "mlperf-storage": "MLPerf Storage's emulated accelerator, a sleep per batch",
    "given": "given with --rate",
}
CLIENT_LIMIT = {"client-cpu": "its CPU is the limit", "input-pipeline": "its input pipeline is the limit",
                "storage": "the storage is the limit", "gpu": "the GPUs asked about are fed"}


def _cores(result: Result) -> str:
    usable = usable_cores(result)
    return f"{usable:g}-core " if usable else ""


def pipeline_label(result: Result) -> str:
    """The input pipeline this client's answer is for, in words ("torchvision pipeline (CPU decode)")."""
    s = result.settings
    return pipelines.parse((s.pipelines or [pipelines.RAW])[0]).label(gpu_decode=s.consumer == "cuda")


def first_line(result: Result, store: StorageFigure | None, storage: Count | None, client: Count, limit: str,
                other: str | None, asked: Asked | None, us: float | None = None) -> str:
    """The answer in one line: the storage's, then this client's. `us`: the CPU per sample of the pipeline's run,
    where its pipeline is named (a pipeline other than raw asked for): the pipeline and, when the CPU is the limit,
    that cost are said."""
    s = result.settings
    where = f"{result.mount.fstype} at {result.mount.path}"
    limit_words = CLIENT_LIMIT.get(limit, f"{LIMIT_WORDS.get(limit, limit)} is the limit")
    if us is not None and limit == "client-cpu":
        limit_words += f", {us:,.0f} us per sample"
    if other:
        limit_words += f" (or {LIMIT_WORDS.get(other, other)}: too near to tell)"
    named = f" with the {pipeline_label(result)}" if us is not None else ""
    client_part = f"this {_cores(result)}client feeds {client.words()}{named}" + (
        "" if limit == "gpu" else f": {limit_words}")
    if store is None or storage is None:
        storage_part = "no valid cold run measured the storage"
    elif store.lower_bound and storage.high == 0:  # "at least 0" says nothing: say what was measured
        storage_part = (f"the storage gave at least {store.samples_per_s:,.0f} samples/s cold (one client; one "
                        f"{gpu_short(s)} needs {s.au_target * (s.rate_per_gpu or 0):,.0f})")
    else:
        least = "at least " if store.lower_bound else ""
        storage_part = (f"the storage feeds {least}{gpus_short(s, storage.words(), storage.low)} "
                        f"({store.samples_per_s:,.0f} samples/s cold, one client)")
    if asked is None:
        return f"{where}: {storage_part}; {client_part}."
    n = s.gpus
    assert n is not None and s.rate_per_gpu is not None
    need = demand(n, s.rate_per_gpu, s.au_target)
    word = "Borderline" if asked.borderline else "Yes" if asked.fed else "No" if asked.fed is False else "Not shown"
    if asked.by == "client":
        fed = "fed" if asked.client_fed else "did not feed" if asked.client_fed is False else "may feed"
        return (f"{word}: this {_cores(result)}client {fed} {gpus_short(s, str(n), n)}{named} ({asked.words}); "
                f"{storage_part}.")
    assert store is not None
    gave = f"{store.samples_per_s:,.0f} samples/s cold{', at least' if store.lower_bound else ''}"
    if asked.fed:
        most = f" and up to {storage.words()}" if storage and storage.high > n else ""
        storage_words = (f"the storage feeds {gpus_short(s, str(n), n)}{most} ({n} need {need:,.0f} samples/s; it "
                         f"gave {gave})")
    elif asked.fed is False:
        storage_words = (f"{gpus_short(s, str(n), n)} need {need:,.0f} samples/s; the storage gave {gave} (enough for "
                         f"{storage.words() if storage else 0})")
    else:
        storage_words = (f"{gpus_short(s, str(n), n)} need {need:,.0f} samples/s; the storage gave {gave}"
                         + (" (this client's CPU set the pace: it may give more)" if store.lower_bound else
                            f", within its spread of that (enough for {storage.words() if storage else 0})"))
    client_words = f"this client fed them ({asked.words})" if asked.client_fed else f"{client_part} ({asked.words})"
    return f"{word}: {storage_words}; {client_words}."


def storage_line(result: Result, store: StorageFigure | None, best: Run | None, sat: int | None,
                  rising: bool) -> str:
    """The evidence line of the storage figure: what measured it, its p99, its sweep, its spread."""
    if store is None:
        return "Storage: no valid cold run, so no storage figure."
    text = f"Storage: {store.samples_per_s:,.0f} samples/s cold ({store.what}"
    if store.mb_per_s:
        text += f", {store.mb_per_s:,.0f} MB/s"
    text += ")"
    if store.lower_bound and store.run is not None and store.run.measures == "decode":
        text += ", at least: decoding took most of each reader's time while measuring it"
    elif store.lower_bound:
        cpu = store.run.cpu if store.run else store.raw.cpu if store.raw else None
        text += f", at least: {cpu_words(cpu, result)} while measuring it"
    if best is not None and store.run is not best:
        text += f"; the loaders' best {best.samples_per_s:,.0f} at {readers(best)} (p99 {best.timed.p99:.2f} ms)"
    elif best is not None:
        text += f"; p99 {best.timed.p99:.2f} ms"
    if best is not None and rising:
        text += f", still rising at the most {reader_unit(best)}"
    elif best is not None and sat is not None:
        text += f", saturating at ~{sat} {reader_unit(best)}"
    sp = store.spread
    if sp.measured:
        shown = -floor_to(-100 * sp.value, 1) if sp.value > UNSTABLE else floor_to(100 * sp.value, 1)
        text += f"; spread {shown:.1f}% {sp.words}" + (
            f": unstable, over the {UNSTABLE:.0%} MLPerf Storage allows; repeat on a quieter system"
            if sp.value > UNSTABLE else "")
    return text + "."


def throttle_line(result: Result, store: StorageFigure | None) -> list[str]:
    """The evidence line of a server that throttled (object storage: 503 SlowDown), where it did: how many of the
    requests at how many in flight, and what that makes the storage figure."""
    runs = [r for r in result.runs if r.throttled and r.kind == "replay"]
    if not runs:
        return raw_throttle_line(result, store)
    run = store.run if store and store.run and store.run.throttled else max(runs, key=lambda r: r.throttled)
    text = (f"Throttled: the server throttled {run.throttled:,} of {run.samples + run.throttled:,} requests "
            f"(503 SlowDown) at {run.in_flight:,} in flight, each retried after its pause")
    if len(runs) > 1:
        text += f" ({len(runs)} runs were throttled)"
    if store is not None and store.run is run:
        text += ("; the storage figure is the server's limit under throttling (what it lets this client have), "
                 "not what its media could give")
    return [text + "."]


def raw_throttle_line(result: Result, store: StorageFigure | None) -> list[str]:
    """The evidence line of a server that throttled the raw baseline (objects: its client's retries off, each 503
    counted), where it did and no loader run was throttled."""
    points = [p for p in (result.baseline.points if result.baseline else []) if p.throttled]
    if not points:
        return []
    p = store.raw if store and store.raw and store.raw.throttled else max(points, key=lambda x: x.throttled)
    text = (f"Throttled: the server throttled {p.throttled:,} of {p.samples + p.throttled:,} requests of the raw "
            f"baseline ({result.baseline.tool if result.baseline else 'awscrt'}) at {p.concurrency:,} in flight "
            "(503 SlowDown), each retried after its pause")
    if store is not None and store.raw is p:
        text += ("; the storage figure is the server's limit under throttling (what it lets this client have), "
                 "not what its media could give")
    return [text + "."]


def need_line(s: Settings) -> str:
    """The evidence line of what one GPU (and the GPUs asked about) need."""
    assert s.rate_per_gpu is not None
    need = s.au_target * s.rate_per_gpu
    kind = KIND_WORDS.get(s.rate_kind or "", s.rate_kind or "rate")
    text = f"Need: {need:,.0f} samples/s per {gpu_short(s)}, {s.au_target:.0%} of {s.rate_per_gpu:,.0f} ({kind})"
    if s.gpus is not None:
        text += f"; {s.gpus:,} need {demand(s.gpus, s.rate_per_gpu, s.au_target):,.0f}"
    return text + "."


def mlperf_line(s: Settings, store: StorageFigure) -> list[str]:
    """With an MLPerf Storage workload, the storage's answer in each of its emulated accelerators too, at its AU
    rule: iobench's emulation of the workload, never an MLPerf Storage result."""

    rows = [r for r in rates("mlperf-storage") if r.model == s.model]
    if not rows:
        return []
    counts = ("at least " if store.lower_bound else "") + ", ".join(
        f"{gpus_for(store.samples_per_s, r.samples_per_s, s.au_target)} {r.gpu.upper()}" for r in rows)
    return [f"As MLPerf Storage's {s.model} workload emulates them (iobench's emulation, not an MLPerf Storage "
            f"result): the storage feeds {counts} at AU >= {s.au_target:.0%} from one client."]


def client_line(result: Result, pipe: Pipeline, named: bool = False) -> str:
    """The evidence line of this client's pipeline and its CPU (`named`: which pipeline, and its CPU per sample)."""
    which = f"the {pipeline_label(result)}" if named else "its input pipeline"
    us = f", {pipe.run.cpu_us_per_sample:,.0f} us of CPU per sample" if named and pipe.run.cpu_us_per_sample else ""
    return (f"This client: {which} delivered {pipe.samples_per_s:,.0f} samples/s ({pipe.what}{us}); "
            f"{cpu_words(pipe.run.cpu, result)}.")


def pipeline_line(name: str, v: Verdict) -> str:
    """The evidence line of another pipeline measured (--pipeline a,b): what this client fed with it."""
    label = pipelines.parse(name).label()
    if v.pipeline_samples_per_s is None or v.client_gpus_fed is None:
        return f"With the {label}: no valid training run, so no answer for this client with it."
    fed = (f"{v.client_gpus_range[0]}-{v.client_gpus_range[1]}" if v.client_gpus_range else f"{v.client_gpus_fed}")
    limit = CLIENT_LIMIT.get(v.limit or "", f"{LIMIT_WORDS.get(v.limit or '', v.limit)} is the limit")
    us = f", {v.pipeline_cpu_us_per_sample:,.0f} us of CPU per sample" if v.pipeline_cpu_us_per_sample else ""
    return (f"With the {label}: this client feeds {fed}: {limit} ({v.pipeline_samples_per_s:,.0f} samples/s "
            f"delivered{us}).")


def ceiling_line(c: Ceiling) -> str:
    """The evidence line of this client's CPU ceiling: its cores over the CPU per sample measured."""
    what = ("reading and decoding" if c.decodes else "reading") if c.decode_us is None else \
        f"reading and decoding, {c.decode_us:,.1f} us of it decoding"
    return (f"This client's CPU ceiling: ~{c.samples_per_s:,.0f} samples/s = its {c.cores:g} cores / "
            f"{c.cpu_us_per_sample:,.1f} us of CPU per sample ({what}, measured at {readers(c.run)}): the most its "
            "CPU could deliver on this path.")


def no_answer(result: Result, invalid: list[Run]) -> list[str]:
    """The lines when no valid run remains: the answer (none, and what would give one: a --files that meets every
    rule it names at the rates measured), then why."""
    s = result.settings
    raw = [b for b in (result.baseline.points if result.baseline else []) if b.cache == "cold"]
    if not s.replay and raw:
        fastest = max(b.samples_per_s for b in raw)
        files = round_files(max(2 * MIN_SECONDS * fastest, 2 * result.dataset.files))
        return [f"{raw_baseline(result)} only, and no storage figure: read more, --files {files:,} or more.",
                f"Every cold {raw_tool(result)} run lasted under {MIN_SECONDS} s (the fastest read {fastest:,.0f} "
                "files/s; a cold run cannot loop over its files)."]
    if not invalid:
        return [f"No replay run was measured on {result.mount.fstype} at {result.mount.path}: no answer."]
    files = advised_files(result)
    more = (f"--files {files:,} or more" if result.dataset.made_by_iobench and s.replay
            else f"a dataset of {files:,} files or more")
    return [f"No valid measurement, so no GPU count: read more, {more}.",
            f"{len(invalid)} run(s) left out; the first: {invalid[0].invalid_reason}.",
            f"{files:,} files give each reader {MIN_BATCHES_PER_READER} batches or more and an epoch of "
            f"{MIN_SECONDS} s or more at twice the fastest rate measured."]


def advised_files(result: Result) -> int:
    """A dataset size that meets every rule a run is judged by, at the rates this result measured: 10 batches per
    reader at the most readers, 11 steps per GPU for the GPUs asked about, and an epoch of MIN_SECONDS at twice
    the fastest steady rate any of its runs reached (`steady_rate`: a short epoch is mostly its DataLoader's
    start-up, and a bigger one reads faster)."""
    s = result.settings
    batch = s.batch_size if s.engine == "dataloader" else 1
    need = MIN_BATCHES_PER_READER * batch * max(max(s.concurrency or [1]), 1)
    if s.gpus:
        need = max(need, (MIN_TRAIN_STEPS + 1) * batch * s.gpus)
    fastest = max((steady_rate(r) for r in result.runs), default=0.0)
    need = max(need, math.ceil(2 * MIN_SECONDS * fastest), result.dataset.files + 1)
    return round_files(need)


def note_lines(result: Result, invalid: list[Run]) -> list[str]:
    """Lines after the evidence: remote cache, warm figures, invalid runs, start-up, mitigations."""
    out = []
    if result.remote:
        out.append(server_cache_note(result))
    warm = [r for r in replay_runs(result) if r.cache == "warm"]
    if warm:
        w = max(warm, key=lambda r: r.samples_per_s)
        kind = {"page-cache": "from the page cache", "storage": "re-read, not from this client's cache",
                "mixed": "partly from the page cache"}.get(w.measures, "cache state unknown")
        out.append(f"Warm ({kind}): {w.samples_per_s:,.0f} samples/s at {readers(w)}.")
    if invalid:
        out.append(f"{len(invalid)} run(s) were too short, not cold, or changed under the run, and were left out "
                   "(marked invalid).")
    out += _startup_note(result) + _mitigation_note(result) + _fuse_note(result)
    return out


def _startup_note(result: Result) -> list[str]:
    """Listing cost at full scale, when it would exceed a minute."""
    if not result.metadata:
        return []
    m = max(result.metadata, key=lambda x: x.projected_list_s)
    if m.projected_list_s < STARTUP_NOTE_S:
        return []
    if result.mount.objects:
        return [f"Start-up: listing {m.scale_files:,} keys ({-(-m.scale_files // 1000):,} LIST requests of 1,000) "
                f"would take ~{m.projected_list_s / 60:,.1f} min ({m.cache}, predicted from {m.files:,} keys) before "
                "the first batch."]
    return [f"Start-up: listing {m.scale_files:,} files as ImageFolder does would take ~{m.projected_list_s / 60:,.1f}"
            f" min ({m.cache}, predicted from {m.files:,} files) before the first batch."]


def _mitigation_note(result: Result) -> list[str]:
    """The valid mitigation that buys the most, when it buys at least 10%."""
    better = [m for m in result.mitigations if m.name != "baseline" and m.valid and m.speedup >= MITIGATION_NOTE]
    if not better:
        return ["No mitigation measured bought 10% or more."] if result.mitigations else []
    m = max(better, key=lambda x: x.speedup)
    cost = f", for {m.extra_bytes / 1e9:.2f} GB more space" if m.extra_bytes else ""
    fed = f" (enough for {m.gpus_fed} GPUs by the rates, not a training run)" if m.gpus_fed is not None else ""
    return [f"Best mitigation: {m.name}, {times(m.speedup)} the baseline's samples/s{fed}{cost}."]


def _fuse_note(result: Result) -> list[str]:
    """`run --url --mount`: which way of reading the same bucket was faster, and by how much."""
    f = result.fuse_view
    if f is None:
        return []
    files = f"files through the FUSE view {f.mount} ({f.fstype}): {f.files_samples_per_s:,.0f} samples/s"
    objects = f"objects by GETs: {f.objects_samples_per_s:,.0f} samples/s"
    first, second = (files, objects) if f.faster == "files" else (objects, files)
    flag = "" if f.valid else " (an epoch of the two is invalid: see the runs)"
    return [f"Objects vs files on the same storage ({f.cache}, {f.readers} readers): {f.faster} are {times(f.ratio)} "
            f"as fast; {first}, {second}{flag}."]
