"""The plan in words: the terminal text of a plan (`format_plan`), the lines that say what its GPUs and its dataset
are, and the warnings when per-GPU rates of different kinds are set side by side."""

from __future__ import annotations

import math
from collections.abc import Iterable
from io import StringIO

from iobench.answer.plan_figures import IMAGENET_FILES, CapacityPlan, rate_text
from iobench.gpu.rates import GIVEN, KIND_ALIASES, KINDS, canonical_gpu, canonical_model, first_kinds, kinds_of
from iobench.result import Result


def mixed_kinds(figures: Iterable[tuple[str, float | None, str | None]]) -> str | None:
    """A warning when figures set side by side rest on per-GPU rates of different kinds, else None.

    figures: (what the figure is, e.g. "this plan (h100, resnet50)" or a result's label; its per-GPU samples/s;
    its kind: a `gpus.KINDS` name or "given", e.g. from `rate_kind_of`). Figures without a rate or a kind are left
    out; kinds that differ on the same samples/s mix nothing (e.g. a result's own rate passed back as --rate).
    """
    known = [(what, float(rate), KIND_ALIASES.get(kind, kind)) for what, rate, kind in figures if rate and kind]
    kinds = {k for _, _, k in known}
    if len(kinds) < 2 or all(math.isclose(r, known[0][1], rel_tol=1e-6) for _, r, _ in known):
        return None
    order = [*KINDS, GIVEN]
    names = ", ".join(sorted(kinds, key=lambda k: order.index(k) if k in order else len(order)))
    listed = "; ".join(f"{what}: {rate_text(r)} samples/s per GPU ({k})" for what, r, k in known)
    return (f"this comparison mixes kinds of per-GPU rate ({names}): {listed}; GPU counts taken at one rate do not "
            "compare with counts taken at the other (use one --rate-kind for both)")


def kinds_apart(model: str, gpu: str, kind: str) -> str | None:
    """One line when other GPUs of `model` take other kinds of rate than `kind` without --rate-kind (each its
    first kind: `gpus.first_kinds`), so that their plans do not compare with this one; None when all take `kind`,
    or for a given rate (which names no GPU)."""
    if kind == GIVEN:
        return None
    here = canonical_gpu(gpu)
    others: dict[str, list[str]] = {}
    for g, k in first_kinds(model).items():
        if g != here and k != kind:
            others.setdefault(k, []).append(g)
    if not others:
        return None
    listed = "; ".join(f"{k} on {', '.join(sorted(others[k]))}" for k in KINDS if k in others)
    mine = kinds_of(model, gpu)
    shared = [f"{g} at --rate-kind {'|'.join(both)}" for g in sorted(g for gs in others.values() for g in gs)
              if (both := [k for k in mine if k in kinds_of(model, g)])]  # the kinds this GPU compares with g at
    how = f"compare with {', '.join(shared)}" if shared else f"none of them has a rate of a kind {here} has"
    return (f"{canonical_model(model)}'s rate is of another kind on other GPUs without --rate-kind ({listed}): their "
            f"plans do not compare with this {kind} one; {how}")


def figure(x: float) -> str:
    """A figure as the plan prints it: whole from 10 up, one decimal below."""
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:,.1f}"


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:,.1f} s"
    if s < 7200:
        return f"{s / 60:,.1f} min"
    return f"{s / 3600:,.1f} h"


def who(p: CapacityPlan) -> str:
    """What the plan's GPUs are: "H100 training resnet50 at 1,785.7 samples/s (mlperf-storage rate)", or, for a
    rate given with --rate, "a GPU consuming 100 samples/s (given rate)" (not a GPU model: the rate is the user's)."""
    if p.rate_kind == GIVEN:
        return f"a GPU consuming {rate_text(p.rate_per_gpu)} samples/s (given rate)"
    return f"{p.gpu.upper()} training {p.model} at {rate_text(p.rate_per_gpu)} samples/s ({p.rate_kind} rate)"


def planned(p: CapacityPlan, result: Result | None = None) -> str:
    """The plan's dataset by name and size: "ImageNet-scale (1,281,167 files, 141 GB)", set apart from the dataset
    a result measured (usually far smaller)."""
    size = f"{p.dataset_files:,} files, {figure(p.dataset_bytes / 1e9)} GB"
    if result is not None and p.dataset_files == result.dataset.files:
        return f"the measured dataset ({size})"
    name = "ImageNet-scale" if p.dataset_files == IMAGENET_FILES else "the planned dataset"
    if result is None:
        return f"{name} ({size})"
    return (f"{name} ({size}), not the measured dataset ({result.dataset.files:,} files, "
            f"{figure(result.dataset.bytes / 1e9)} GB)")


def format_plan(p: CapacityPlan, width: int = 120) -> str:
    """The plan as terminal text (rich tables, no colour codes): demand, measured storage, what-ifs."""
    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None, soft_wrap=False)
    kind = f"{p.rate_kind} rate"
    nodes = f"{p.nodes} node{'s' if p.nodes != 1 else ''} of {p.gpus_per_node}"
    each = (f"each {who(p)}" if p.rate_kind == GIVEN else
            f"{p.gpu.upper()} training {p.model} at {rate_text(p.rate_per_gpu)} samples/s per GPU ({kind})")
    name = "ImageNet-scale" if p.dataset_files == IMAGENET_FILES else "planned"
    con.print(f"{p.gpus} GPUs ({nodes}), {each}; {name} dataset {p.dataset_files:,} files x "
              f"{p.mean_bytes / 1000:,.1f} kB mean ({p.mean_source}) = {p.dataset_bytes / 1e9:,.1f} GB",
              highlight=False)
    con.print(f"per-GPU rate ({p.rate_kind}): {rate_text(p.rate_per_gpu)} samples/s, "
              f"{p.rate_source.removeprefix(f'{p.rate_kind}: ')}", highlight=False)
    if p.kind_note:
        con.print(f"warning: {p.kind_note}", highlight=False)
    if p.measured is not None and p.measured.kind_warning:
        con.print(f"warning: {p.measured.kind_warning}", highlight=False)
    t = Table(title=f"what the storage must sustain for {p.gpus} GPUs at {rate_text(p.rate_per_gpu)} samples/s each "
                    f"({kind}; MB = 10^6 B)")
    t.add_column("")
    t.add_column(f"minimum: AU >= {p.au_target:.0%}", justify="right")
    t.add_column("full speed: AU 100%", justify="right")
    t.add_row("samples/s", figure(p.minimum_samples_per_s), figure(p.demand_samples_per_s))
    t.add_row("MB/s", figure(p.minimum_mb_per_s), figure(p.demand_mb_per_s))
    objects = p.measured is not None and p.measured.objects
    t.add_row("GETs/s (one per sample)" if objects else "file opens/s (one per sample)",
              figure(p.minimum_opens_per_s), figure(p.demand_opens_per_s))
    what = "CPU cores for decode + augment" if p.cpu_from is None else "CPU cores (measured on this client)"
    t.add_row(what, figure(p.cpu_cores_minimum), figure(p.cpu_cores_demand))
    t.add_row("  per node", figure(p.cpu_cores_minimum / p.nodes), figure(p.cpu_cores_demand / p.nodes))
    if p.cpu_from is not None:
        t.add_row("  per GPU", figure(p.cpu_cores_minimum / p.gpus), figure(p.cpu_cores_demand / p.gpus))
    t.add_row("epoch time", _duration(p.epoch_s_minimum), _duration(p.epoch_s_demand))
    con.print(t)
    if p.cpu_from is not None:
        con.print(f"CPU cores: {p.cpu_from}.", highlight=False)
    if objects:
        con.print(f"start-up: {p.startup_entries:,} keys to list (a map-style dataset lists its prefix, 1,000 keys a "
                  f"request: {-(-p.startup_entries // 1000):,} LIST requests) before the first batch.", highlight=False)
    else:
        con.print(f"start-up: {p.startup_entries:,} directory entries to list (ImageFolder scans every file) before "
                  "the first batch.", highlight=False)
    con.print(f"minimum = {p.au_target:.2f} x demand: with IO overlapping compute, AU = supply / demand (as the "
              "verdict and MLPerf Storage count); plan for full speed to leave no idle time.", highlight=False)
    m = p.measured
    if m is None:
        return buf.getvalue()
    unit = "in flight" if m.objects else "readers"  # objects: readers x --in-flight, the sweep's axis
    t = Table(title=f"measured: {m.label} ({m.cache}, {m.readers} {unit}, {m.engine})")
    t.add_column("")
    t.add_column("value", justify="right")
    t.add_row(f"sustained samples/s ({m.cache})", figure(m.samples_per_s))
    t.add_row(f"MB/s at the plan's mean ({p.mean_bytes / 1000:,.0f} kB)", figure(m.samples_per_s * p.mean_bytes / 1e6))
    fed = f"GPUs consuming {rate_text(p.rate_per_gpu)} samples/s" if p.rate_kind == GIVEN else f"{p.gpu.upper()} GPUs"
    t.add_row(f"{fed} it keeps at AU >= {p.au_target:.0%} (predicted, {kind})", str(m.gpus_supported))
    if m.verdict_gpus_fed is not None:
        how = "confirmed by training runs" if m.verdict_confirmed else "predicted"
        same = f"same {rate_text(p.rate_per_gpu)} samples/s"
        t.add_row(f"GPUs the measuring client fed, in the result's verdict ({same})", f"{m.verdict_gpus_fed} ({how})")
    if m.nodes_measured is not None and m.per_node_samples_per_s is not None:
        t.add_row(f"per client node ({m.nodes_measured} measured at once)", figure(m.per_node_samples_per_s))
    t.add_row(f"client nodes of {p.gpus_per_node} GPUs (predicted, {kind})", str(m.nodes_supported))
    t.add_row(f"headroom over the minimum for {p.gpus} GPUs", f"{m.headroom:.2f}x")
    t.add_row("spare (shortfall if negative) samples/s", figure(m.spare_samples_per_s))
    if m.startup_list_s is not None:
        t.add_row(f"listing {p.dataset_files:,} files (predicted)", _duration(m.startup_list_s))
    con.print(t)
    if m.cache_whatif:
        t = Table(title=f"prediction: part of the {name} dataset cached, F = 1 / (x/C + (1-x)/S), "
                        f"C = {figure(m.warm_samples_per_s or 0)} warm, S = {figure(m.samples_per_s)} cold")
        for col in ("cached fraction x", "samples/s (predicted)", f"GPUs fed (predicted, {kind})", ""):
            t.add_column(col, justify="left" if not col else "right")
        for w in m.cache_whatif:
            t.add_row(f"{w.fraction:.0%}", figure(w.samples_per_s), str(w.gpus), w.label)
        con.print(t)
    if m.concurrency_whatif:
        more = "requests in flight" if m.objects else "readers"
        at = f"(of {m.readers} kept)" if m.objects else f"at {m.readers} readers"
        t = Table(title=f"prediction: more {more}, Little's law: L = {m.in_flight or 0:.2f} in flight {at}, "
                        f"p50 {m.p50_ms:.3f} ms")
        for col in (unit, "L/W (uncapped)", "samples/s (predicted)", "measured", f"GPUs fed (predicted, {kind})"):
            t.add_column(col, justify="right")
        for c in m.concurrency_whatif:
            t.add_row(str(c.readers), figure(c.uncapped), figure(c.samples_per_s),
                      figure(c.measured) if c.measured is not None else "-", str(c.gpus))
        con.print(t)
        con.print(m.cap_reason, highlight=False)
        if m.in_flight_needed is not None:
            what = "GETs" if m.objects else "reads"
            con.print(f"in flight for the minimum: {figure(p.minimum_samples_per_s)} samples/s x {m.p50_ms:.3f} ms = "
                      f"{m.in_flight_needed:,.0f} {what} at once across the job (Little's law at the p50 measured at "
                      f"{m.readers} {unit}; a floor: latency grows as the storage nears its limit)", highlight=False)
    if m.scaling:
        t = Table(title="measured: the storage with more client nodes reading at once")
        for col in ("nodes", "ranks", "samples/s together", "per node", "per node vs the fewest", "job fed"):
            t.add_column(col, justify="right")
        for pt in m.scaling:
            t.add_row(str(pt.nodes), str(pt.ranks), figure(pt.samples_per_s), figure(pt.per_node),
                      f"{pt.per_node_vs_fewest:.0%}", "yes (lower bound)" if pt.fed else "no")
        con.print(t)
    if m.scaling_note:
        con.print(m.scaling_note, highlight=False)
    for note in m.notes:
        con.print(f"note: {note}", highlight=False)
    return buf.getvalue()
