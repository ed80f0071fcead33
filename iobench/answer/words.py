"""The answer's words for what was measured: a run's readers ("4 DataLoader workers"), GPUs of the kind asked
("2 H200 on resnet50"), and the limits by name; every report, the verdicts and the plan say them so."""

from __future__ import annotations

from iobench.result import Result, Run, Settings, Verdict

LIMIT_WORDS = {"storage": "the storage", "client-cpu": "this client's CPU", "input-pipeline": "the input pipeline",
               "gpu": "the GPUs themselves", "slowest-rank": "the slowest rank"}


def counted(n: int, noun: str) -> str:
    """'1 thread', '4 threads': a count and its noun, plural but at 1."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def raw_tool(result: Result) -> str:
    """What measured the raw baseline (`baseline.tool`), or would have where there is none: "fio" on files, the raw
    S3 client ("awscrt") on objects. Every word, heading and column naming the raw baseline says this."""
    if result.baseline is not None:
        return result.baseline.tool
    return "awscrt" if result.mount.objects else "fio"  # as the backends name theirs (Store.raw)


def raw_baseline(result: Result) -> str:
    """'fio baseline', or for objects 'raw baseline (awscrt)': what the words say where a file run's say fio."""
    tool = raw_tool(result)
    return "fio baseline" if tool == "fio" else f"raw baseline ({tool})"


def raw_unit(result: Result) -> str:
    """What the raw baseline's rate counts: 'files/s' (fio), 'objects/s' (the raw S3 client)."""
    return "files/s" if raw_tool(result) == "fio" else "objects/s"


def raw_depth(tool: str, n: int) -> str:
    """One raw point's concurrency: '16 jobs' of fio, '16 in flight' of the raw S3 client."""
    return counted(n, "job") if tool == "fio" else f"{n} in flight"


def loader_words(run: Run) -> str:
    """The readers of one loader: '16 threads', '4 DataLoader workers' (every report says them so)."""
    deep = f" x {run.depth} in flight ({run.in_flight:,} GETs)" if run.depth > 1 else ""
    if run.reader == "threads":
        return counted(run.concurrency, "thread") + deep
    return f"{run.workers} DataLoader worker{'' if run.workers == 1 else 's'}{deep}"


def readers(run: Run) -> str:
    """'4 DataLoader workers', '16 threads', '2 GPUs x 4 workers'."""
    if run.gpus:
        return f"{run.gpus} GPU{'' if run.gpus == 1 else 's'} x {run.workers} worker{'' if run.workers == 1 else 's'}"
    return loader_words(run)


def reader_unit(run: Run) -> str:
    if run.source == "objects":  # the sweep's axis is the requests in flight (answer/rules.saturation)
        return "requests in flight"
    return "threads" if run.reader == "threads" else "DataLoader workers"


def gpu_words(s: Settings | Verdict, n: int) -> str:
    """'2 H200 GPUs training resnet50 (4,677 samples/s each, measured)', or for a given rate '2 GPUs consuming
    100 samples/s each'."""
    plural = "" if n == 1 else "s"
    rate = s.rate_per_gpu or 0.0
    if s.rate_kind == "given" or not s.gpu:
        return f"{n:,} GPU{plural} consuming {rate:,.0f} samples/s each"
    kind = f", {s.rate_kind}" if s.rate_kind else ""
    return f"{n:,} {s.gpu.upper()} GPU{plural} training {s.model} ({rate:,.0f} samples/s each{kind})"


def gpu_short(s: Settings) -> str:
    return s.gpu.upper() if s.gpu and s.rate_kind != "given" else "GPU"


def gpus_short(s: Settings, count: str, n: int | None = None) -> str:
    """'2 H200 on resnet50' or, for a rate given alone, '2 GPUs of 50 samples/s'."""
    if s.gpu and s.rate_kind != "given":
        return f"{count} {s.gpu.upper()} on {s.model}"
    return f"{count} GPU{'' if n == 1 else 's'} of {s.rate_per_gpu or 0:,.0f} samples/s"


def dataset_line(result: Result) -> list[str]:
    """The evidence line of a scanned --dataset whose links lead out of the tree: how many were skipped (not read)
    or followed (read, --follow-links); none where there were none."""
    d = result.dataset
    said = [f"{n:,} link{'s' if n != 1 else ''} out of the tree {how}" for n, how in (
        (d.links_skipped, "skipped, not read (--follow-links reads them)"), (d.links_followed, "followed and read "
                                                                             "(--follow-links)")) if n]
    return [f"Dataset: {'; '.join(said)}; the figures are of the {d.files:,} files read."] if said else []


def server_cache_note(result: Result) -> str:
    """What a cold figure of a remote store may hold of the server's cache, in the verdict's notes."""
    if result.mount.objects:
        return "Object storage: no client cache to drop; the server's own cache stays."
    return "Network file system: the server's cache was not evicted."
