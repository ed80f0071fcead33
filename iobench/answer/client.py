"""The answer of a run on one client, in the order a buyer needs it (DESIGN: the answer's model):

1. **the storage's**: GPUs of the kind asked that the storage's measured capacity feeds at the AU target, from
   one client like this one (`Verdict.storage_gpus_fed`; "at least" when the client's CPU was saturated while
   measuring it). A 2-core test client that feeds no GPU must never make a storage that gives two GPUs' worth
   read as "0 GPUs";
2. **this client's**: what its input pipeline fed, confirmed by training runs where they ran
   (`Verdict.client_gpus_fed`), and what limits it; where its CPU is the limit, the cores a client needs per GPU
   at the CPU per sample measured here.

With --gpus N the first word answers for those N: "Yes", "No" or "Borderline", the storage's answer where a cold
run measured the storage, else this client's. Near a threshold the answer is "borderline" with its range: when a
figure (or an AU) is within its run-to-run spread of the line (verdict.Spread: over --repeat runs, the epochs,
fio's runs; else the 5% MLPerf Storage allows, said as assumed). A limit the evidence does not separate from
another beyond that spread is named with the other (`Verdict.limit_or`).

The first line stays under ~200 characters; the evidence follows as short lines, each sentence said once.
Every rule it reads is rules.py's. Here: `answer`, which sets the figures into the Verdict's fields and lines, and
`verdict`; the figures are in client_figures.py, the words in client_words.py."""

from __future__ import annotations

from iobench.answer.client_figures import (
    asked,
    asked_for,
    ceiling,
    client_count,
    cores_per_gpu,
    limit_of,
    pipeline,
    plateau_of,
    storage_gpus,
    view,
)
from iobench.answer.client_words import (
    advised_files,
    ceiling_line,
    client_line,
    first_line,
    mlperf_line,
    need_line,
    no_answer,
    note_lines,
    pipeline_line,
    storage_line,
    throttle_line,
)
from iobench.answer.cluster import cluster_verdict
from iobench.answer.rules import (
    ASSUMED,
    UNSTABLE,
    cpu_saturated,
    demand,
    gpus_for,
    run_spread,
    saturation,
    storage_figure,
    storage_runs,
    supply_run,
    training_runs,
)
from iobench.answer.words import dataset_line, gpus_short, raw_baseline, raw_unit
from iobench.pipelines import RAW
from iobench.result import Result, Verdict

CLIENT_SIDE = ("client-cpu", "input-pipeline")  # limits that name this client, not the storage or the GPUs


def answer(result: Result) -> Verdict:
    """One client's answer for the first input pipeline asked (--pipeline), with a line for each other one measured
    (each its own view of the result: `client_figures.view`); the storage's answer is the same for all."""
    names = result.settings.pipelines or [RAW]
    if names == [RAW]:
        return _answer(result, named=False)
    others = {n: _answer(view(result, n), named=True) for n in names[1:]}
    v = _answer(view(result, names[0]), named=True, extra=[pipeline_line(n, o) for n, o in others.items()])
    if others:
        v.pipelines_fed = {names[0]: v.client_gpus_fed, **{n: o.client_gpus_fed for n, o in others.items()}}
    return v


def _answer(result: Result, named: bool, extra: list[str] | None = None) -> Verdict:
    """The answer of a result of one pipeline; `named`: the pipeline is named in the first line (a pipeline other
    than raw was asked for); `extra`: evidence lines of the other pipelines."""
    s = result.settings
    invalid = [r for r in result.runs if not r.valid]
    store = storage_figure(result)
    pipe = pipeline(result)
    pool = storage_runs(result)
    best = max(pool, key=lambda r: r.samples_per_s) if pool else None
    family = [r for r in pool if best and (r.order, r.engine, r.source) == (best.order, best.engine, best.source)]
    sat, rising = saturation(family)
    fields: dict = dict(
        storage_samples_per_s=store.samples_per_s if store else None, storage_from=store.what if store else None,
        storage_is_lower_bound=bool(store and store.lower_bound),
        storage_spread=round(store.spread.value, 4) if store else None,
        storage_spread_measured=bool(store and store.spread.measured),
        pipeline_samples_per_s=pipe.samples_per_s if pipe else None, pipeline_from=pipe.what if pipe else None,
        cpu_saturated=cpu_saturated(pipe.run.cpu if pipe else None, result),
        client_pipeline=asked(result), pipeline_cpu_us_per_sample=pipe.run.cpu_us_per_sample if pipe else None,
        model=s.model, gpu=s.gpu, rate_per_gpu=s.rate_per_gpu, rate_kind=s.rate_kind, au_target=s.au_target,
        gpus_asked=s.gpus, best_samples_per_s=best.samples_per_s if best else None,
        best_mb_per_s=best.mb_per_s if best else None, best_concurrency=best.concurrency if best else None,
        saturates_at=sat, still_rising=rising, order=best.order if best else None,
        unstable=bool(store and store.spread.measured and store.spread.value > UNSTABLE))
    if s.gpus is not None and s.rate_per_gpu:
        fields["demand_samples_per_s"] = round(demand(s.gpus, s.rate_per_gpu, s.au_target), 2)
    where = f"{result.mount.fstype} at {result.mount.path}"
    notes = note_lines(result, invalid)
    if store is None and pipe is None:
        first, *reasons = no_answer(result, invalid)
        reasons += dataset_line(result)
        reasons += extra or []
        return Verdict(text="\n".join([first, *reasons, *notes]), answer=first, evidence=reasons, **fields)
    evidence = [storage_line(result, store, best, sat, rising), *throttle_line(result, store), *dataset_line(result)]
    if s.rate_per_gpu is None or pipe is None:  # `iobench fio` (no loader), or no GPU consumer to count
        if pipe is None and store is not None and s.replay and s.rate_per_gpu:  # the raw baseline counted, no loader
            fed = storage_gpus(store, s.rate_per_gpu, s.au_target)
            first = (f"{where}: the storage feeds {'at least ' if store.lower_bound else ''}"
                     f"{gpus_short(s, fed.words(), fed.low)} ({store.samples_per_s:,.0f} samples/s cold, "
                     f"{store.what}); no loader run counted, so this client was not measured.")
            first_invalid = invalid[0].invalid_reason if invalid else "none was made"
            evidence += [need_line(s), f"For this client's answer, read more: --files {advised_files(result):,} or "
                                        f"more (no loader run counted; the first: {first_invalid}).", *(extra or [])]
            fields.update(storage_gpus_fed=fed.value, evidence=evidence,
                          storage_gpus_range=[fed.low, fed.high] if fed.borderline else None)
            return Verdict(text="\n".join([first, *evidence, *notes]), answer=first, **fields)
        if pipe is None and store is not None:
            first = (f"{raw_baseline(result)} only: {where} gives {store.samples_per_s:,.0f} {raw_unit(result)} cold "
                     f"({store.what}).")
        else:
            assert pipe is not None
            first = (f"{where} gives {store.samples_per_s:,.0f} samples/s cold ({store.what}); this client's pipeline "
                     f"delivered {pipe.samples_per_s:,.0f}." if store else
                     f"{where}: no cold run, so no storage figure; this client's pipeline delivered "
                     f"{pipe.samples_per_s:,.0f} samples/s.")
        if pipe is not None:
            evidence.append(client_line(result, pipe, named))
        evidence += extra or []
        return Verdict(text="\n".join([first, *evidence, *notes]), answer=first, evidence=evidence, **fields)

    rate, tau = s.rate_per_gpu, s.au_target
    # how far this client's rate (and so an AU) moves between identical runs: its replay configuration's spread
    supply = supply_run(result)
    pipe_spread = run_spread(result, supply) if supply is not None else store.spread if store else ASSUMED
    storage_count = storage_gpus(store, rate, tau) if store else None
    capacity = min(x for x in (store.samples_per_s if store else None, pipe.samples_per_s) if x is not None)
    client = client_count(result, capacity, pipe_spread)
    asked_n = asked_for(result, store, pipe_spread, capacity)
    limit, other, why = limit_of(result, store, pipe, pipe_spread, rising, plateau_of(result, sat, best),
                               asked_n.client_fed if asked_n else None)
    if storage_count is not None and client.value > storage_count.value and limit in CLIENT_SIDE:
        # never "the storage feeds 2 ... this client feeds 3: its input pipeline is the limit": the client fed more
        # than the storage's cold figure only where it read faster than that (warm, or within a spread)
        limit, other, why = "storage", None, (
            f"Limit: the storage: this client's {client.words()} rest on reads faster than the storage's cold figure "
            f"({pipe.what}); read cold, the storage feeds {storage_count.words()}.")
    evidence.append(need_line(s))
    if s.rate_kind == "mlperf-storage" and store is not None:
        evidence += mlperf_line(s, store)
    evidence.append(client_line(result, pipe, named))
    predicted = gpus_for(capacity, rate, tau)
    if client.confirmed and client.value < predicted:
        over = [r for r in training_runs(result) if r.gpus == client.value + 1]
        batch = over[-1].batch_size or s.batch_size if over else s.batch_size
        evidence.append(f"The measured rates would feed {predicted}, but the training run at {client.value + 1} "
                        f"starved: each GPU waits on its own loader between steps (a batch of {batch} every "
                        f"{1000 * batch / rate:,.1f} ms), a cost the rates alone do not show.")
    evidence.append(why)
    if limit == "client-cpu" or other == "client-cpu":
        top = ceiling(result)
        if top is not None:
            evidence.append(ceiling_line(top))
        cores = cores_per_gpu(result, pipe, rate, tau)
        if cores is not None:
            evidence.append(cores)
    for count, spread in ((storage_count, store.spread if store else ASSUMED), (client, pipe_spread)):
        if count is not None and count.borderline:
            evidence.append(f"Borderline ({count.words()}): {count.near}, within the run-to-run spread "
                            f"({100 * spread.value:.1f}% {spread.words}).")
        elif count is not None and count.close:
            evidence.append(f"Near the line: {count.near} (within {UNSTABLE:.0%}, what MLPerf Storage lets repeats "
                            f"differ by): one run measures no spread, so whether identical runs give {count.value} "
                            "too is not shown; --repeat 3 measures it.")
    evidence += extra or []
    first = first_line(result, store, storage_count, client, limit, other, asked_n,
                       pipe.run.cpu_us_per_sample if named else None)
    fields.update(limit=limit, limit_or=other, evidence=evidence,
                  storage_gpus_fed=storage_count.value if storage_count else None,
                  storage_gpus_range=[storage_count.low, storage_count.high] if storage_count and
                  storage_count.borderline else None,
                  client_gpus_fed=client.value, gpus_fed=client.value, gpus_fed_confirmed=client.confirmed,
                  client_gpus_range=[client.low, client.high] if client.borderline else None,
                  borderline=bool(client.borderline or (storage_count and storage_count.borderline)
                                  or (asked_n and asked_n.borderline)))
    if asked_n is not None:
        fields.update(asked_fed=asked_n.fed, asked_by=asked_n.by, asked_client_fed=asked_n.client_fed,
                      asked_confirmed=asked_n.confirmed)
    return Verdict(text="\n".join([first, *evidence, *notes]), answer=first, **fields)


def verdict(result: Result) -> Verdict:
    """The answer of a result: the cluster's for a distributed run (answer/cluster.py), else one client's
    (`answer`)."""
    if result.distributed is not None:
        return cluster_verdict(result)
    return answer(result)
