"""The Markdown report: the same facts and tables as the HTML page (the narrow form of each table), no plots."""

from __future__ import annotations

from collections.abc import Sequence

from iobench.answer.words import count_words, raw_baseline
from iobench.report.compare import compare_headline, compare_table, like_for_like, winner_sentences
from iobench.report.facts import (
    MONO_ROWS,
    Facts,
    Table,
    cache_whatif_table,
    environment,
    facts,
    headline,
    labels,
    readers_whatif_table,
    tables,
    whatif_gpu_note,
    whatifs,
)
from iobench.report.format import gpu_name, model_name, ms, num, readers, when
from iobench.result import Result


def _md_table(t: Table) -> str:
    """The table's narrow form, its best cells bold."""
    t = t.narrow()

    def cell(x: object) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(h) for h in t.head) + " |", "|" + "|".join("---" for _ in t.head) + "|"]
    for ri, row in enumerate(t.rows):
        cells = [f"**{cell(c)}**" if (ri, i) in t.wins else cell(c) for i, c in enumerate(row)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _kv(rows: Sequence[tuple[str, str]]) -> str:
    return _md_table(Table("", ("", ""), tuple(rows)))


def _sections(result: Result, h: str = "##") -> list[str]:
    env = _kv([(k, f"`{v}`" if k in MONO_ROWS else v) for k, v in environment(result)])
    out = [f"{h} Environment", "", env, ""]
    t, b, raw = tables(result), result.baseline, raw_baseline(result)
    # each table under its heading; without it, what is said in its place (None: no section)
    for key, title, missing in (
            ("runs", "Runs", None), ("raw", raw, b.note if b and b.note else f"No {raw} in this result."),
            ("metadata", "Metadata", "No metadata phase in this result."),
            ("mitigations", "Mitigations", "No mitigation phase in this result (`--mitigations`)."),
            ("fuse_view", "Objects vs the FUSE view", None),
            ("training", "Training runs (emulated GPUs)",
             "No training runs: GPUs fed is predicted from the sustained rate."),
            ("ranks", "Ranks (distributed run)", None)):
        text = _md_table(table) if (table := t[key]) is not None else missing
        out += [f"{h} {title}", "", text, ""] if text is not None else []
    m = whatifs(result)
    if m is not None:
        cache, more = cache_whatif_table(m), readers_whatif_table(m)
        out += [f"{h} What-ifs (predictions, not measurements)", ""]
        if cache:
            out += [f"Part of the dataset cached, F = 1 / (x/C + (1-x)/S), C = {num(m.warm_samples_per_s)} warm, "
                    f"S = {num(m.samples_per_s)} cold:", "", _md_table(cache), ""]
        if more:
            out += [f"More readers, Little's law ({m.in_flight or 0:.2f} in flight at {m.readers} readers, p50 "
                    f"{ms(m.p50_ms)} ms); {m.cap_reason}:", "", _md_table(more), ""]
        out += [whatif_gpu_note(result, m), ""]
    return out


def _verdict(result: Result, f: Facts) -> list[str]:
    v, best, store = f.verdict, f.best_cold, f.storage
    out = [f"### {headline(result, f)}", ""]
    gpu, model = gpu_name(v, result), model_name(v, result)
    if v is not None and v.storage_gpus_fed is not None:
        n = v.storage_gpus_fed
        count = count_words(n, v.storage_gpus_range)
        out += [f"**The storage feeds {'at least ' if v.storage_is_lower_bound else ''}{count} × {gpu}** training "
                f"{model} at AU ≥ {(v.au_target or 0):.0%}, from one client like this one", ""]
    if v is not None and v.client_gpus_fed is not None:
        how = "measured with training runs" if v.gpus_fed_confirmed else "predicted from the sustained rate"
        out += [f"**This client fed {count_words(v.client_gpus_fed, v.client_gpus_range)}** ({how})"
                + (f"; **its limit: {v.limit}**" if v.limit else ""), ""]
    rows = []
    if store:
        rows.append(("storage gives (cold)", f"{store.samples_per_s:,.0f} samples/s"
                     + (f", {store.mb_per_s:,.0f} MB/s" if store.mb_per_s else "") + f" ({store.what})"
                     + (", at least" if store.lower_bound else "")))
    if best:
        rows.append(("loaders' best (cold)", f"{best.samples_per_s:,.0f} samples/s, {best.mb_per_s:,.0f} MB/s "
                                             f"at {readers(best)}; p99 {ms(best.timed.p99)} ms"))
    if f.need_per_gpu is not None:
        rows.append((f"one {gpu_name(v, result)} needs", f"{f.need_per_gpu:,.0f} samples/s (AU target × "
                                                          f"{f.rate_per_gpu:,.0f}/s per GPU)"))
        rows.append(("per-GPU rate source", result.settings.rate_source or "-"))
    if f.best_warm:
        rows.append(("warm re-read", f"{f.best_warm.samples_per_s:,.0f} samples/s ({f.best_warm.measures})"))
    if rows:
        out += [_kv(rows), ""]
    lines = v.text.splitlines() if v else ["No verdict: nothing was measured."]
    out += [f"> **Verdict{' (provisional)' if f.provisional else ''}:** {lines[0]}", ""]
    out += [f"- {line}" for line in lines[1:]] + ([""] if lines[1:] else [])
    if f.caveats:
        out += ["**Caveats**", ""] + [f"- {c}" for c in f.caveats] + [""]
    return out


def render_markdown(results: Sequence[Result], names: Sequence[str] | None = None) -> str:
    """The same report in Markdown (tables, no plots)."""
    results = list(results)
    ls = labels(results, names)
    if len(results) == 1:
        r, f = results[0], facts(results[0], ls[0])
        out = [f"# Can this storage feed the GPUs? {ls[0]}", "",
               f"iobench report, {when(r.created)} on {r.host.hostname}. MB = 10^6 B; latencies in ms.", ""]
        if not r.complete:
            out += ["**Unfinished run (complete: false): the figures cover what was measured before it stopped; "
                    "the verdict is provisional.**", ""]
        out += _verdict(r, f) + _sections(r)
        return "\n".join(out).rstrip() + "\n"
    fs = [facts(r, n) for r, n in zip(results, ls, strict=True)]
    side, winners = compare_table(results, fs)
    out = [f"# Pre-purchase comparison: {len(results)} storage systems, same workload", ""]
    partial = [n for r, n in zip(results, ls, strict=True) if not r.complete]
    if partial:
        out += [f"**Unfinished run(s): {', '.join(partial)} (complete: false).**", ""]
    out += [f"**{compare_headline(results, fs, ls)}**", ""]
    gpus = [(n, f.verdict.storage_gpus_fed if f.verdict else None) for n, f in zip(ls, fs, strict=True)]
    out += ["GPUs the storage feeds, per system (from one client): "
            + "; ".join(f"**{n}: {g if g is not None else '-'}**" for n, g in gpus), ""]
    sentences = winner_sentences(ls, winners)
    if sentences:
        out += ["Winners: " + ". ".join(sentences) + ".", ""]
    diffs = like_for_like(results, ls)
    if diffs:
        out += ["**Not like for like:**", ""] + [f"- {d}" for d in diffs] + [""]
    out += ["## Side by side", "", _md_table(side), "", "Bold: the best value of a row.", ""]
    for n, r, f in zip(ls, results, fs, strict=True):
        out += [f"## {n}", ""] + _verdict(r, f) + _sections(r, h="###")
    return "\n".join(out).rstrip() + "\n"
