"""What a measured result says against a plan: the storage's rate read from it (the storage figure, a distributed
job's, or the warm rate), the GPUs and nodes it supports, its notes, and the cache and concurrency what-ifs."""

from __future__ import annotations

import math
from collections import defaultdict

from iobench.answer.client_figures import asked, ceiling
from iobench.answer.cluster import job_run
from iobench.answer.plan_figures import (
    CACHE_FRACTIONS,
    CONCURRENCY_STEPS,
    MAX_GPUS,
    CacheWhatIf,
    CapacityPlan,
    ConcurrencyWhatIf,
    Implausible,
    Measured,
    cache_mix_rate,
    gpus_supported,
    littles_law,
)
from iobench.answer.plan_words import figure, mixed_kinds, planned, who
from iobench.answer.rules import RISING, replay_runs, storage_figure, storage_runs
from iobench.answer.words import raw_depth, raw_tool
from iobench.answer.words import readers as readers_of
from iobench.gpu.rates import KIND_ALIASES, kind_of_source
from iobench.result import Result, Run


def rate_kind_of(result: Result) -> str | None:
    """The kind of per-GPU rate a result ran with: `settings.rate_kind`, or for results written before that field,
    what `settings.rate_source` says ("given with --rate", "measured on ...", "published: ...",
    "mlperf-storage-emulated: ..."); None when the result has no rate or the source does not say."""
    s = result.settings
    if s.rate_kind:
        return KIND_ALIASES.get(s.rate_kind, s.rate_kind)
    return kind_of_source(s.rate_source) if s.rate_per_gpu or s.rate_source else None


def from_result(p: CapacityPlan, result: Result, pipeline: str | None = None) -> Measured | None:
    """What `result` says the storage gives, set against `p`'s demand; None when it has no run to tell. The CPU per
    sample is that of input pipeline `pipeline` (default: the result's first)."""
    runs = replay_runs(result)
    pool = storage_runs(result)
    warm = [r for r in runs if r.cache == "warm"]
    notes: list[str] = []
    job = job_run(result) if result.distributed is not None else None
    fig = storage_figure(result) if job is None else None
    ref: Run | None
    if job is not None:  # many clients at once: the job's figure, not one client's best
        ref, cache, pool, warm = job, job.cache, [], []
    elif fig is not None:  # the storage figure (fio's or a loader's); the loaders' best for Little's law
        ref = max(pool, key=lambda r: r.samples_per_s) if pool else None
        cache = "cold"
    elif warm:
        ref = max(warm, key=lambda r: r.samples_per_s)
        cache = "warm"
        notes.append("no cold (storage) run in the result: the figures below are the warm rate, from the page "
                     "cache, not the storage")
    else:
        return None
    assert ref is not None or fig is not None
    s = fig.samples_per_s if fig is not None else ref.samples_per_s  # type: ignore[union-attr]
    point = fig.run or fig.raw if fig is not None else ref
    assert point is not None
    readers = point.in_flight if isinstance(point, Run) else point.concurrency  # objects: readers x --in-flight
    engine = point.engine if isinstance(point, Run) else raw_tool(result)
    # C, the cache rate: warm runs that really read from the page cache (a FUSE or NFS client may not keep it)
    c_rate = max((r.samples_per_s for r in warm if r.measures == "page-cache"), default=None)
    if cache == "cold" and warm and c_rate is None:
        notes.append("no warm run read from the page cache (this client does not cache this mount's data): no cache "
                     "rate C was measured, so there is no cache what-if")
    supported = gpus_supported(s, p.rate_per_gpu, p.au_target)
    v = result.verdict
    same = (v is not None and v.client_gpus_fed is not None and v.rate_per_gpu is not None
            and math.isclose(v.rate_per_gpu, p.rate_per_gpu) and math.isclose(v.au_target or 0, p.au_target))
    if same and v is not None and v.client_gpus_fed is not None and v.client_gpus_fed > MAX_GPUS:
        raise Implausible(f"its verdict's {v.client_gpus_fed:,.3g} GPUs fed is more than {MAX_GPUS:,}")
    if abs(result.dataset.mean_bytes - p.mean_bytes) > 0.1 * p.mean_bytes:
        notes.append(f"the measured dataset's mean sample ({result.dataset.mean_bytes / 1000:,.0f} kB) differs from "
                     f"the plan's ({p.mean_bytes / 1000:,.0f} kB) by more than 10%: samples/s may not carry over")
    objects = result.mount.objects
    if objects:
        notes.append("object storage: no client cache to evict; the server's own cache may have served part of the "
                     "cold rate")
    elif result.remote:
        notes.append("network/FUSE mount: cold runs evicted this client's cache only; the server's cache may have "
                     "served part of the cold rate")
    if not result.complete:
        notes.insert(0, "the result is of an unfinished run (complete: false): its figures cover only what was "
                        "measured before it stopped")
    d = result.distributed
    if d is None:
        notes.append("measured from one client: whether the storage gives each of several client nodes this rate at "
                     "once was not measured")
    else:
        notes.append(f"measured with {d.nodes} client node{'s' if d.nodes > 1 else ''} reading at once ({d.world_size} "
                     f"ranks, {d.workers} DataLoader workers each): {s / d.nodes:,.0f} samples/s per node; more "
                     "nodes than that were not measured")
        if v is not None and v.asked_fed:
            notes.append("the job's GPUs were fed in that run: its rate is what they asked for, a lower bound of what "
                         "the storage gives")
    startup = None
    if result.metadata:
        per_file = max(m.list_s / m.files for m in result.metadata if m.files)
        startup = per_file * p.dataset_files
    m = Measured(
        label=f"{result.mount.fstype} at {result.mount.path}", samples_per_s=s, cache=cache,
        readers=readers, engine=engine, p50_ms=(point.timed if isinstance(point, Run) else point.latency_ms).p50,
        dataset_mean_bytes=result.dataset.mean_bytes, gpus_supported=supported,
        nodes_supported=supported // p.gpus_per_node, headroom=s / p.minimum_samples_per_s,
        spare_samples_per_s=s - p.minimum_samples_per_s,
        verdict_gpus_fed=v.client_gpus_fed if same and v is not None else None,
        verdict_confirmed=bool(same and v is not None and v.gpus_fed_confirmed),
        warm_samples_per_s=c_rate, startup_list_s=startup, notes=notes,
        nodes_measured=d.nodes if d else None, per_node_samples_per_s=s / d.nodes if d else None, objects=objects)
    s_rate = result.settings.rate_per_gpu or (v.rate_per_gpu if v is not None else None)
    extra: dict = {"kind_warning": mixed_kinds([
        (f"this plan ({who(p)})", p.rate_per_gpu, p.rate_kind),
        (f"the result ({m.label}, {result.settings.gpu or '?'} on {result.settings.model or '?'})", s_rate,
         rate_kind_of(result))])}
    top = ceiling(result, pipeline) if job is None else None  # one client's CPU per sample; a job's is per rank
    if top is not None:
        extra.update(cpu_us_per_sample=top.cpu_us_per_sample, decode_cpu_us_per_sample=top.decode_us,
                     cpu_readers=readers_of(top.run), cpu_pipeline=pipeline or asked(result),
                     cpu_decoded=top.decodes)
    if cache == "cold" and c_rate:
        extra["cache_whatif"] = _cache_whatif(p, result, s, c_rate)
    if cache == "cold" and job is None and ref is not None:  # Little's law over one client's loaders; a job has none
        extra.update(_concurrency_whatif(p, ref, pool, c_rate, _highest_seen(result)))
        # the requests a job keeps in flight to get the plan's minimum, by Little's law at the latency of the point
        # the storage figure comes from (m.p50_ms, the one the sentence names; a floor: a request's latency grows
        # as the storage nears its limit)
        extra["in_flight_needed"] = p.minimum_samples_per_s * m.p50_ms / 1000.0 if m.p50_ms else None
    return Measured(**{**m.__dict__, **extra})


def _cache_whatif(p: CapacityPlan, result: Result, storage: float, cached: float) -> list[CacheWhatIf]:
    rows = [CacheWhatIf(x, cache_mix_rate(x, cached, storage),
                        gpus_supported(cache_mix_rate(x, cached, storage), p.rate_per_gpu, p.au_target))
            for x in CACHE_FRACTIONS]
    ram = result.host.ram_bytes
    if ram and p.dataset_bytes:
        x = min(1.0, ram / p.dataset_bytes)
        f = cache_mix_rate(x, cached, storage)
        rows.append(CacheWhatIf(x, f, gpus_supported(f, p.rate_per_gpu, p.au_target),
                                label=f"this client's RAM ({figure(ram / 1e9)} GB) over {planned(p, result)}"))
        rows.sort(key=lambda r: (r.fraction, r.label))
    return rows


def _highest_seen(result: Result) -> tuple[float, str] | None:
    """The highest rate of any complete run or fio job in the result, and what it was."""
    seen = [(r.samples_per_s, f"{r.cache} {r.mitigation or r.source}, "
                              + (f"{r.in_flight} in flight" if r.source == "objects" else f"{r.concurrency} readers"))
            for r in result.runs if r.complete and r.gpus is None]
    tool = raw_tool(result)
    seen += [(b.samples_per_s, f"{tool} {b.cache}, {raw_depth(tool, b.concurrency)}")
             for b in (result.baseline.points if result.baseline else [])]
    return max(seen) if seen else None


def _concurrency_whatif(p: CapacityPlan, ref: Run, pool: list[Run], warm: float | None,
                        seen: tuple[float, str] | None = None) -> dict:
    """Little's law from the reference (best cold) run, capped by what was seen (see the module docstring)."""
    same = [r for r in pool if r.order == ref.order]
    by_c: dict[int, list[float]] = defaultdict(list)
    for r in same:
        by_c[r.in_flight].append(r.samples_per_s)  # the readers; for objects x --in-flight
    means = {c: sum(v) / len(v) for c, v in sorted(by_c.items())}
    concs = list(means)
    rising = len(concs) < 2 or (ref.in_flight == concs[-1] and means[concs[-1]] > RISING * means[concs[-2]])
    if not rising:
        unit = "requests in flight" if ref.source == "objects" else "readers"
        cap, reason = ref.samples_per_s, (f"capped at the best cold rate: the sweep ({', '.join(map(str, concs))} "
                                          f"{unit}) stopped rising, so more {unit} bought nothing there")
    elif warm:
        cap, reason = warm, "capped at the best warm rate: what this client's readers reached from RAM"
    elif seen:
        cap, reason = seen[0], (f"capped at the highest rate this client reached in any run of the result "
                                f"({seen[1]}): no run read from RAM to show the client's own ceiling")
    else:
        cap, reason = None, "not capped: no run measured this client's own ceiling"
    w = ref.timed.p50 / 1000.0
    in_flight = ref.samples_per_s * w if w > 0 else None
    rows = []
    for k in CONCURRENCY_STEPS:
        c = ref.in_flight * k
        if in_flight is None:
            break
        uncapped = littles_law(in_flight * c / ref.in_flight, w)
        pred = min(uncapped, cap) if cap is not None else uncapped
        rows.append(ConcurrencyWhatIf(c, pred, uncapped, means.get(c), gpus_supported(pred, p.rate_per_gpu,
                                                                                      p.au_target)))
    return {"concurrency_whatif": rows, "in_flight": in_flight, "cap": cap, "cap_reason": reason}
