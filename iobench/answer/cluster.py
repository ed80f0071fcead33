"""The verdict of a distributed run: does this storage feed the job's GPUs, and if not, what held the job back (the
storage, a node's CPU, the slowest rank, or the ranks' input pipeline where epochs read the page cache). The rules
are rules.py's."""

from __future__ import annotations

import math
from dataclasses import dataclass

from iobench.answer.rules import (
    CPU_SATURATED,
    MIN_SECONDS,
    MIN_TRAIN_STEPS,
    au_pct,
    cpu_saturated,
    cpu_words,
    demand,
    gpus_for,
    pct,
    round_files,
    steady_rate,
)
from iobench.answer.words import LIMITS, counted, dataset_line, gpu_short, gpus_short, left_out, said, server_cache_note
from iobench.result import Cpu, Result, Run, Verdict

STRAGGLER = 0.25  # the slowest rank's own pace 25% or more under the fastest's: the job waits on that rank


@dataclass(frozen=True)
class HostCpu:
    """One host's CPU in one epoch of a distributed run: its ranks (and their workers) together."""

    host: str
    cores: float  # cores its ranks used together
    usable: float  # cores a rank may use there (affinity, cgroup quota)
    busy_pct: float | None  # the host's busy %, as its ranks saw it
    iowait_pct: float | None


def host_cpu(result: Result, epoch: int) -> list[HostCpu]:
    """Per host, in `epoch`: the CPU its ranks used together, from `ranks[]`."""
    by_host: dict[str, list] = {}
    for rank in result.ranks:
        for e in rank.epochs:
            if e.epoch == epoch:
                by_host.setdefault(rank.host, []).append((rank, e))
    return [HostCpu(host, round(sum(e.cpu.iobench_cores or 0.0 for _, e in xs), 2),
                    min(r.cpus_usable for r, _ in xs),
                    max((e.cpu.system_busy_pct for _, e in xs if e.cpu.system_busy_pct is not None), default=None),
                    max((e.cpu.iowait_pct for _, e in xs if e.cpu.iowait_pct is not None), default=None))
            for host, xs in by_host.items()]


def _as_client(result: Result, x: HostCpu) -> tuple[Cpu, Result]:
    """One host's CPU as the single-client rule (verdict.cpu_saturated, cpu_words) reads it: its ranks' cores
    together, its busy %, and the cores they may use. The host's own core count is known for rank 0's host only
    (`host`; ranks[] holds no other's), so elsewhere only the cores the ranks used count, not the host's busy %."""
    cpus = result.host.cpus if x.host == result.host.hostname else None
    host = result.host.model_copy(update={"cpus": cpus, "cpus_usable": x.usable})
    return (Cpu(system_busy_pct=x.busy_pct, iowait_pct=x.iowait_pct, iobench_cores=x.cores),
            result.model_copy(update={"host": host}))


def job_runs(result: Result) -> list[Run]:
    """The epochs of a distributed result that decide: valid and complete, cold where any (warm ones read RAM)."""
    runs = [r for r in result.runs if r.ranks and r.valid and r.complete and r.au is not None]
    return [r for r in runs if r.cache == "cold"] or runs


def job_run(result: Result) -> Run | None:
    """The slowest of those: the job must get through each epoch."""
    return min(job_runs(result), key=lambda r: r.samples_per_s, default=None)


def _where_rank(result: Result, rank: int) -> str:
    return f"rank {rank} on {result.ranks[rank].host}" if rank < len(result.ranks) else f"rank {rank}"


def _waits(result: Result, run: Run) -> tuple[float, float, float]:
    """Mean over the ranks in that epoch: data wait, allreduce wait, seconds."""
    es = [e for r in result.ranks for e in r.epochs if e.epoch == run.epoch]
    if not es:
        return 0.0, 0.0, run.seconds
    n = len(es)
    return (sum(e.data_wait_s for e in es) / n, sum(e.allreduce_s for e in es) / n, sum(e.seconds for e in es) / n)


def cluster_verdict(result: Result) -> Verdict:
    """Two answers, as for one client (client.py): the storage's, for all the job's clients together (the GPUs its
    rate to them feeds; at least that many unless the storage was the limit), then the job's (the GPUs its ranks
    kept fed, the slowest rank setting the pace) and what held it back."""
    s = result.settings
    d = result.distributed
    assert d is not None and s.rate_per_gpu is not None
    nodes = f"{counted(d.world_size, 'rank')} on {counted(d.nodes, 'node')}"
    pool = job_runs(result)
    invalid = [r for r in result.runs if r.ranks and not r.valid]
    need = demand(d.world_size, s.rate_per_gpu, s.au_target)
    fields: dict = dict(gpus_asked=d.world_size, demand_samples_per_s=round(need, 2))
    notes = [server_cache_note(result)] if result.remote else []
    if d.shared_page_cache:
        notes.append("Ranks shared a host's page cache.")
    notes += left_out(invalid, "epoch")
    if not pool:
        why = invalid[0].invalid_reason if invalid else "no epoch finished"
        advised = _advised(result)
        first = f"No valid distributed epoch ({why}), so no answer for {nodes}: read more, --files {advised:,} or more."
        evidence = [f"{advised:,} files give each rank {MIN_TRAIN_STEPS + 1} batches of {s.batch_size} or more and "
                    f"epochs of {MIN_SECONDS} s or more at twice the fastest rate measured."]
        return said(s, first, evidence, notes, **fields)
    temp = pool[0].cache  # cold, or warm where no cold epoch was valid
    run = min(pool, key=lambda r: r.samples_per_s)  # the slowest valid epoch decides: the job must get through each
    fed = all((r.au or 0.0) >= s.au_target for r in pool)
    any_cold = any(r.cache == "cold" for r in result.runs if r.ranks)
    state = "cold" if temp == "cold" else ("warm (from the page cache: no cold epoch was valid)" if any_cold
                                           else "warm (from the page cache)")
    workers = counted(d.workers, "DataLoader worker")
    tau = f">= {s.au_target:.0%} busy"
    au = f"AU {au_pct(run.au or 0.0)}, lowest rank {au_pct(run.au_min or 0.0)}"
    per_node = run.samples_per_s / d.nodes
    data_wait, allreduce, seconds = _waits(result, run)
    evidence = [
        f"Cluster: {run.samples_per_s:,.0f} samples/s ({run.mb_per_s:,.0f} MB/s) read by {nodes} together, "
        f"{per_node:,.0f} per node, {workers} per rank, {state} (epoch {run.epoch}, the slowest of "
        f"{counted(len(pool), temp + ' epoch')}); every sample read exactly once across the ranks: "
        f"{'yes' if run.read_once else 'no'}.",
        f"Need: {s.au_target * s.rate_per_gpu:,.0f} samples/s per {gpu_short(s)}; the job's {d.world_size} need "
        f"{need:,.0f}.",
        f"Ranks: each waited {data_wait:,.2f} s for data and {allreduce:,.2f} s at the per-step allreduce in a "
        f"{seconds:,.2f} s epoch (means); the slowest ({_where_rank(result, run.slowest_rank or 0)}) kept "
        f"{pct(1 - (run.straggler_spread or 0.0))} of the fastest one's pace.",
        *dataset_line(result),
    ]
    hosts = host_cpu(result, run.epoch)
    busy = [x for x in hosts if cpu_saturated(*_as_client(result, x))]
    ram = run.cache == "warm" and run.measures != "storage"  # read (or may have) the page cache: not the storage
    if hosts:
        top = busy[0] if busy else max(hosts, key=lambda x: x.cores / x.usable if x.usable else 0.0)
        evidence.append(f"CPU: on the busiest node, {top.host}, {cpu_words(*_as_client(result, top))}.")
    if fed:
        limit = "gpu"
        job_gpus, confirmed = d.world_size, True
        why = (f"Limit: the GPUs: every {temp} epoch kept them {tau}; what more GPUs would get was not "
               "measured (run with more ranks).")
    else:
        job_gpus, confirmed = min(gpus_for(run.samples_per_s, s.rate_per_gpu, s.au_target), d.world_size - 1), False
        if busy:
            limit = "client-cpu"
            why = (f"Limit: a node's CPU: {busy[0].host}'s cores were >= {CPU_SATURATED:.0%} busy (see CPU); "
                   + ("these epochs read the page cache, so the storage was not measured." if ram else
                      "the storage may give more to clients with more cores or fewer ranks."))
        elif (run.straggler_spread or 0.0) >= STRAGGLER:
            limit = "slowest-rank"
            why = (f"Limit: the slowest rank: {_where_rank(result, run.slowest_rank or 0)} read at "
                   f"{pct(1 - (run.straggler_spread or 0.0))} of the fastest rank's pace, and every step waits for it "
                   "at the allreduce (see ranks[] for its host's mount and CPU).")
        else:  # ram: the page cache gave these samples, so what the storage gives was not measured
            limit = "input-pipeline" if ram else "storage"
            pace = (f"the ranks kept an even pace (within {pct(run.straggler_spread or 0.0)}) and spent "
                    f"{pct(data_wait / seconds if seconds else 0.0)} of the epoch waiting for data")
            why = (f"Limit: the ranks' input pipeline, not the storage: these epochs read the page cache, so the "
                   f"storage was not measured; {pace} at {counted(d.workers, 'worker')} per rank, no node's CPU "
                   "saturated. Run --cache cold for the storage's figure." if ram else
                   f"Limit: the storage: {pace}, no node's CPU saturated; at {counted(d.workers, 'worker')} per rank "
                   "(more workers per rank were not measured).")
    evidence.append(why)
    # the storage's answer: what its rate to all these clients feeds; at least that while something else held the
    # job back (the GPUs took what they asked, a CPU or a rank was slower than the storage)
    storage = None if ram else run.samples_per_s
    at_least = fed or limit != "storage"
    storage_gpus = gpus_for(storage, s.rate_per_gpu, s.au_target) if storage is not None else None
    if storage is not None and at_least and storage_gpus == 0:  # "at least 0" says nothing: say what was measured
        storage_part = (f"the storage gave at least {storage:,.0f} samples/s {temp} to {nodes} (one "
                        f"{gpu_short(s)} needs {s.au_target * s.rate_per_gpu:,.0f})")
    elif storage is not None and storage_gpus is not None:
        least = "at least " if at_least else ""
        storage_part = (f"the storage feeds {least}{gpus_short(s, str(storage_gpus), storage_gpus)} ({storage:,.0f} "
                        f"samples/s {temp} to {nodes})")
    else:
        storage_part = "no cold epoch measured the storage"
    if fed:
        first = f"Yes: {storage_part}; the job fed all its GPUs ({au})."
    else:
        held = "a node's CPU" if limit == "client-cpu" else LIMITS[limit].said
        first = (f"No: {gpus_short(s, str(d.world_size), d.world_size)} need {need:,.0f} samples/s; {storage_part}; "
                 f"the job fed {job_gpus} of its {d.world_size}: {held} is the limit.")
    return said(s, first, evidence, notes, limit=limit, storage_samples_per_s=storage, storage_is_lower_bound=at_least,
                storage_from=f"{nodes}, {d.workers} DataLoader workers per rank, {temp}",
                storage_gpus_fed=storage_gpus, client_gpus_fed=job_gpus, pipeline_samples_per_s=run.delivered_per_s,
                pipeline_from=f"epoch {run.epoch} of the job", cpu_saturated=bool(busy), gpus_fed_confirmed=confirmed,
                asked_fed=fed, asked_by="storage" if storage is not None else "client", asked_client_fed=fed,
                asked_confirmed=True, best_samples_per_s=run.samples_per_s, best_mb_per_s=run.mb_per_s,
                best_concurrency=d.workers, order="shuffled", **fields)


def _advised(result: Result) -> int:
    """--files that give each rank MIN_TRAIN_STEPS + 1 batches and epochs of MIN_SECONDS at twice the fastest
    rate the job's epochs reached (the rule of client.advised_files, per rank)."""
    s, d = result.settings, result.distributed
    assert d is not None
    need = (MIN_TRAIN_STEPS + 1) * s.batch_size * d.world_size
    fastest = max((steady_rate(r) for r in result.runs if r.ranks), default=0.0)
    return round_files(max(need, math.ceil(2 * MIN_SECONDS * fastest)))
