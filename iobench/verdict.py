"""The one-line answer: what the storage delivers, at what concurrency it saturates."""

from __future__ import annotations

from collections import defaultdict

from iobench.result import Result, Run, Verdict

SATURATION = 0.9  # a concurrency "saturates" the storage when it reaches 90% of the best rate


def _mean_by_concurrency(runs: list[Run]) -> dict[int, float]:
    rates: dict[int, list[float]] = defaultdict(list)
    for r in runs:
        rates[r.concurrency].append(r.samples_per_s)
    return {c: sum(v) / len(v) for c, v in sorted(rates.items())}


def verdict(result: Result) -> Verdict:
    done = [r for r in result.runs if r.complete and r.samples]
    storage = [r for r in done if r.cache == "cold" and r.measures in ("storage", "unknown")]
    shuffled = [r for r in storage if r.order == "shuffled"]
    pool = shuffled or storage
    where = f"{result.mount.fstype} at {result.mount.path}"
    warm = [r for r in done if r.cache == "warm"]
    warm_note = ""
    if warm:
        w = max(warm, key=lambda r: r.samples_per_s)
        kind = "from the page cache" if w.measures == "page-cache" else "warm"
        warm_note = f" Warm ({kind}): {w.samples_per_s:,.0f} files/s at {w.concurrency} threads."
    if not pool:
        return Verdict(text=f"No cold (storage) run was measured on {where}: no storage figure.{warm_note}"
                            f"{_startup_note(result)}",
                       best_samples_per_s=None, best_mb_per_s=None, best_concurrency=None,
                       saturates_at=None, order=None)
    best = max(pool, key=lambda r: r.samples_per_s)
    means = _mean_by_concurrency([r for r in pool if r.order == best.order])
    top = max(means.values())
    saturates = next(c for c, v in means.items() if v >= SATURATION * top) if len(means) > 1 else None
    text = (f"{where} delivers {best.samples_per_s:,.0f} files/s ({best.mb_per_s:,.0f} MB/s) cold, "
            f"{best.order}, at {best.concurrency} threads (p99 {best.latency_ms.p99:.2f} ms)")
    if saturates is not None:
        concs = list(means)
        if saturates == concs[-1] and len(concs) > 1 and means[concs[-1]] > 1.1 * means[concs[-2]]:
            text += f"; still rising at {concs[-1]} threads: try more"
        else:
            text += f"; it saturates at ~{saturates} threads"
    text += "."
    if result.remote:
        text += " Network file system: the server's cache was not evicted."
    cpus = result.host.cpus or 0
    if best.cpu.iobench_cores and cpus and best.cpu.iobench_cores >= 0.85 * cpus:
        text += (f" The client CPU was the limit (iobench used {best.cpu.iobench_cores:.1f} of {cpus} cores):"
                 " the storage may give more to a bigger client.")
    text += warm_note + _startup_note(result)
    return Verdict(text=text, best_samples_per_s=best.samples_per_s, best_mb_per_s=best.mb_per_s,
                   best_concurrency=best.concurrency, saturates_at=saturates, order=best.order)


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
