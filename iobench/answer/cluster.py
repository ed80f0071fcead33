"""The figures of a distributed run that its answer (client.verdict, in the single client's sentences where they
say the same) reads: the epochs that decide, each host's CPU, the ranks' waits. The rules are rules.py's."""

from __future__ import annotations

from dataclasses import dataclass

from iobench.result import Cpu, Result, Run

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


def as_client(result: Result, x: HostCpu) -> tuple[Cpu, Result]:
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


def where_rank(result: Result, rank: int) -> str:
    return f"rank {rank} on {result.ranks[rank].host}" if rank < len(result.ranks) else f"rank {rank}"


def waits(result: Result, run: Run) -> tuple[float, float, float]:
    """Mean over the ranks in that epoch: data wait, allreduce wait, seconds."""
    es = [e for r in result.ranks for e in r.epochs if e.epoch == run.epoch]
    if not es:
        return 0.0, 0.0, run.seconds
    n = len(es)
    return (sum(e.data_wait_s for e in es) / n, sum(e.allreduce_s for e in es) / n, sum(e.seconds for e in es) / n)
