"""The one-line answer: what the storage delivers, at what concurrency it saturates."""

from __future__ import annotations

from collections import defaultdict

from iobench.result import Result, Run, Verdict

SATURATION = 0.9  # a concurrency "saturates" the storage when it reaches 90% of the best rate


def replay_runs(result: Result) -> list[Run]:
    """The sweep's complete runs: not the training runs (gpus set), not the mitigations (measured apart)."""
    return [r for r in result.runs if r.complete and r.samples and r.gpus is None and r.mitigation is None]


def storage_runs(result: Result) -> list[Run]:
    """Replay runs that measured the storage: cold, and the eviction took (or could not be checked); the shuffled
    ones when there are any, as training reads."""
    cold = [r for r in replay_runs(result) if r.cache == "cold" and r.measures in ("storage", "unknown")]
    return [r for r in cold if r.order == "shuffled"] or cold


def _mean_by_concurrency(runs: list[Run]) -> dict[int, float]:
    rates: dict[int, list[float]] = defaultdict(list)
    for r in runs:
        rates[r.concurrency].append(r.samples_per_s)
    return {c: sum(v) / len(v) for c, v in sorted(rates.items())}


def verdict(result: Result) -> Verdict:
    done = replay_runs(result)
    pool = storage_runs(result)
    where = f"{result.mount.fstype} at {result.mount.path}"
    warm = [r for r in done if r.cache == "warm"]
    warm_note = ""
    if warm:
        w = max(warm, key=lambda r: r.samples_per_s)
        kind = {"page-cache": "from the page cache", "storage": "re-read, not from this client's cache",
                "mixed": "partly from the page cache"}.get(w.measures, "cache state unknown")
        w_unit = "threads" if w.workers is None else "DataLoader workers"
        warm_note = f" Warm ({kind}): {w.samples_per_s:,.0f} files/s at {w.concurrency} {w_unit}."
    if not pool:
        gpu_fields = _gpus_fed(result)
        sentence = gpu_fields.pop("sentence", "")
        return Verdict(text=(f"{sentence} " if sentence else "") + f"No cold (storage) run was measured on {where}: "
                            f"no storage figure.{warm_note}{_startup_note(result)}",
                       best_samples_per_s=None, best_mb_per_s=None, best_concurrency=None,
                       saturates_at=None, order=None, **gpu_fields)
    best = max(pool, key=lambda r: r.samples_per_s)
    means = _mean_by_concurrency([r for r in pool if r.order == best.order])
    top = max(means.values())
    saturates = next(c for c, v in means.items() if v >= SATURATION * top) if len(means) > 1 else None
    unit = "threads" if best.workers is None else "DataLoader workers"
    what = "files/s" if best.source == "files" else f"samples/s from {best.source}"
    text = (f"{where} delivers {best.samples_per_s:,.0f} {what} ({best.mb_per_s:,.0f} MB/s) cold, "
            f"{best.order}, at {best.concurrency} {unit} (p99 {best.latency_ms.p99:.2f} ms)")
    if saturates is not None:
        concs = list(means)
        if saturates == concs[-1] and len(concs) > 1 and means[concs[-1]] > 1.1 * means[concs[-2]]:
            text += f"; still rising at {concs[-1]} {unit}: try more"
        else:
            text += f"; it saturates at ~{saturates} {unit}"
    text += "."
    if result.remote:
        text += " Network file system: the server's cache was not evicted."
    cpus = result.host.cpus or 0
    if best.cpu.iobench_cores and cpus and best.cpu.iobench_cores >= 0.85 * cpus:
        text += (f" The client CPU was the limit (iobench used {best.cpu.iobench_cores:.1f} of {cpus} cores):"
                 " the storage may give more to a bigger client.")
    text += warm_note + _startup_note(result) + _mitigation_note(result)
    gpu_fields = _gpus_fed(result)
    if gpu_fields.get("sentence"):
        text = gpu_fields.pop("sentence") + " " + text
    return Verdict(text=text, best_samples_per_s=best.samples_per_s, best_mb_per_s=best.mb_per_s,
                   best_concurrency=best.concurrency, saturates_at=saturates, order=best.order, **gpu_fields)


STARTUP_NOTE_S = 60.0  # start-up costs worth a sentence: a minute of idle GPUs before the first batch


def _startup_note(result: Result) -> str:
    """A sentence on listing cost at full scale, when it would exceed a minute."""
    if not result.metadata:
        return ""
    m = max(result.metadata, key=lambda x: x.projected_list_s)
    if m.projected_list_s < STARTUP_NOTE_S:
        return ""
    return (f" Start-up: listing {m.scale_files:,} files as ImageFolder does would take ~{m.projected_list_s / 60:,.1f}"
            f" min ({m.cache}, predicted from {m.files:,} files) before the first batch.")


def supply_run(result: Result) -> Run | None:
    """The replay run that stands for what the storage sustains for training: the best complete cold (storage)
    shuffled run; else the best warm one (the data then came from RAM)."""
    cold = [r for r in storage_runs(result) if r.order == "shuffled"]
    best = cold or [r for r in replay_runs(result) if r.order == "shuffled" and r.cache == "warm"]
    return max(best, key=lambda r: r.samples_per_s) if best else None


def _limit(result: Result, supply: Run, fed: int, predicted: int) -> tuple[str, str]:
    """storage, cpu or gpu, with the words for it, in the manner of DS-Analyzer: with decode, compare what cold
    data gives (fetch and prep together) with what cached data gives (prep alone): when cold is no slower, the
    CPU limits. Without decode, training runs that feed fewer GPUs than the storage's sustained rate should
    point at this client's CPU: the input pipeline's own work (handing batches over), not the storage."""
    asked = result.settings.gpus
    if asked is not None and fed >= asked:
        return "gpu", "GPUs themselves: storage and CPU keep up"
    decode_words = "CPU (decoding and augmenting on this host)"
    if supply.decode:
        if supply.measures == "page-cache":
            return "cpu", decode_words  # data came from RAM, yet the GPUs waited: preprocessing is the limit
        warm = [r.samples_per_s for r in replay_runs(result) if r.decode and r.cache == "warm"]
        if warm and supply.samples_per_s >= 0.9 * max(warm):
            return "cpu", decode_words
    if fed < predicted:
        return "cpu", (f"CPU of this client: the storage sustained {supply.samples_per_s:,.0f} samples/s, enough for "
                       f"{predicted}, but the input pipeline's own per-batch work kept the GPUs waiting")
    return "storage", "storage (fetching the files)"


def _gpus_fed(result: Result) -> dict:
    """Verdict fields for the GPU question, with a sentence; empty when no consumer was set."""
    s = result.settings
    supply = supply_run(result)
    if s.rate_per_gpu is None or supply is None:
        return {}
    tau, rate = s.au_target, s.rate_per_gpu
    train = [r for r in result.runs if r.gpus and r.au is not None]
    fed_measured = max((r.gpus for r in train if r.au >= tau), default=0)  # type: ignore[operator]
    # confirmed: a run at that count reached the target and one with one more GPU did not
    confirmed = any(r.gpus == fed_measured + 1 and r.au < tau for r in train)  # type: ignore[operator]
    if confirmed:
        fed, how = fed_measured, "measured with training runs"
    else:
        fed = max(fed_measured, int(supply.samples_per_s // (tau * rate)))
        how = "predicted from the sustained rate" + (
            f"; training runs confirmed {fed_measured}" if fed_measured else ", not confirmed by training runs")
    limit, words = _limit(result, supply, fed, int(supply.samples_per_s // (tau * rate)))
    gpu = (s.gpu or "").upper()
    sentence = (f"This storage keeps {fed} {gpu} GPU{'' if fed == 1 else 's'} training {s.model} at >= "
                f"{tau:.0%} busy ({rate:,.0f} samples/s each; {how}); beyond that the limit is the {words}.")
    return {"limit": limit, "model": s.model, "gpu": s.gpu, "rate_per_gpu": rate, "au_target": tau,
            "gpus_fed": fed, "gpus_fed_confirmed": confirmed, "sentence": sentence}


def _mitigation_note(result: Result) -> str:
    """The mitigation that buys the most, when it buys at least 10%."""
    better = [m for m in result.mitigations if m.name != "baseline" and m.speedup >= 1.1]
    if not better:
        return " No mitigation measured bought 10% or more." if result.mitigations else ""
    m = max(better, key=lambda x: x.speedup)
    cost = f", for {m.extra_bytes / 1e9:.2f} GB more space" if m.extra_bytes else ""
    fed = f" ({m.gpus_fed} GPUs fed)" if m.gpus_fed is not None else ""
    return f" Best mitigation: {m.name}, {m.speedup:.1f}x the baseline's files/s{fed}{cost}."
