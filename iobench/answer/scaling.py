"""`iobench plan` from distributed results: the storage as several client nodes measured it at once, instead of
one client's figure carried over to many. With results at 1, 2, ... nodes, how the storage scaled with clients.

The figure a distributed result gives is the job's: the slowest valid cold epoch's samples/s, all ranks together
(as its verdict reads it). Per node = that / nodes. When the job was fed (its GPUs were the limit) the figure is a
lower bound: the storage kept up, and what it could give more was not measured."""

from __future__ import annotations

from dataclasses import dataclass

from iobench.answer.cluster import job_run
from iobench.result import Result

EVEN = 0.9  # per-node rate at more nodes >= 90% of that at the fewest: the storage scaled with its clients


@dataclass(frozen=True)
class ScalePoint:
    """One distributed result in a scaling series."""

    nodes: int
    ranks: int
    samples_per_s: float  # the job's, all ranks together
    per_node: float
    per_node_vs_fewest: float  # per_node / per_node at the fewest nodes measured: 1.0 scales linearly
    fed: bool  # the job's GPUs were fed: samples_per_s is then a lower bound of what the storage gives


def point(result: Result) -> ScalePoint | None:
    d = result.distributed
    run = job_run(result)
    if d is None or run is None:
        return None
    fed = bool(result.verdict and result.verdict.asked_fed)
    return ScalePoint(d.nodes, d.world_size, run.samples_per_s, run.samples_per_s / d.nodes, 1.0, fed)


def scaling(results: list[Result]) -> list[ScalePoint]:
    """The results' points by node count (for one count, the last given), each against the fewest nodes'."""
    points = {p.nodes: p for p in (point(r) for r in results) if p is not None}
    ordered = [points[n] for n in sorted(points)]
    if not ordered:
        return []
    base = ordered[0].per_node
    return [ScalePoint(p.nodes, p.ranks, p.samples_per_s, p.per_node, p.per_node / base if base else 0.0, p.fed)
            for p in ordered]


def scaling_sentence(points: list[ScalePoint]) -> str | None:
    """How the storage scaled with client nodes, from two or more points; None from fewer."""
    if len(points) < 2:
        return None
    first, last = points[0], points[-1]
    if last.per_node_vs_fewest >= EVEN:
        how = "scaled with its clients"
    elif last.samples_per_s > first.samples_per_s * 1.1:
        how = "scaled less than linearly"
    else:
        how = "did not scale: more clients shared the same rate"
    bound = " (lower bounds where the job was fed)" if any(p.fed for p in points) else ""
    return (f"measured at {', '.join(str(p.nodes) for p in points)} nodes: the storage {how}: "
            f"{first.samples_per_s:,.0f} samples/s at {first.nodes} node{'s' if first.nodes > 1 else ''} "
            f"({first.per_node:,.0f} per node), {last.samples_per_s:,.0f} at {last.nodes} ({last.per_node:,.0f} per "
            f"node, {last.per_node_vs_fewest:.0%} of the first's){bound}")
