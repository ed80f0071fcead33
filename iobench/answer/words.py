"""The answer's words for what was measured: a run's readers ("4 DataLoader workers"), GPUs of the kind asked
("2 H200 on resnet50"), and the limits by name; every report, the verdicts and the plan say them so."""

from __future__ import annotations

from typing import Any, NamedTuple

from iobench.result import Result, Run, Settings, Verdict


class Limit(NamedTuple):
    """A limit's words: in a sentence, in this client's answer, and a report's tile (its title and note)."""

    said: str
    client: str
    title: str
    note: str


LIMITS = {
    "storage": Limit("the storage", "the storage is the limit", "Storage",
                     "the loaders reach what the storage gives, and more readers give no more"),
    "client-cpu": Limit("this client's CPU", "its CPU is the limit", "Client CPU",
                        "iobench used nearly all the cores it may use"),
    "input-pipeline": Limit("the input pipeline", "its input pipeline is the limit", "Input pipeline",
                            "the storage gives more than the loader delivers"),
    "gpu": Limit("the GPUs themselves", "the GPUs asked about are fed", "The GPUs",
                 "storage and pipeline keep up with the GPUs asked about"),
    "slowest-rank": Limit("the slowest rank", "the slowest rank is the limit", "Slowest rank",
                          "one rank read far slower than the others, and every step waited"),
}


def count_words(n: int | None, span: list[int] | None) -> str:
    """A GPU count, or its range ("2-3") where it is borderline."""
    return f"{span[0]}-{span[1]}" if span else f"{n}"


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
    """What a cold figure of a remote store may hold of the server's cache: the verdict's note, the report's caveat
    and (lower-case) the plan's."""
    if result.mount.objects:
        return ("Object storage: no client cache to drop; the server's own cache stays and may have served part of "
                "the cold figures.")
    return (f"Network/FUSE file system ({result.mount.fstype}): cold runs evicted this client's cache only; the "
            "server's cache was not evicted and may have served part of the cold figures.")


def left_out(invalid: list[Run], what: str) -> list[str]:
    """The note of the runs (or epochs) marked invalid, when there are any."""
    return [f"{len(invalid)} {what}(s) were too short, not cold, or changed under the run, and were left out (marked "
            "invalid)."] if invalid else []


def said(s: Settings, first: str, evidence: list[str], notes: list[str], **fields: Any) -> Verdict:
    """A verdict: its lines (`text`: the answer, the evidence, the notes), its figures, the GPUs it counted (the
    settings' rate) and `gpus_fed`, client_gpus_fed's old name."""
    return Verdict(text="\n".join([first, *evidence, *notes]), answer=first, evidence=evidence, model=s.model,
                   gpu=s.gpu, rate_per_gpu=s.rate_per_gpu, rate_kind=s.rate_kind, au_target=s.au_target,
                   gpus_fed=fields.get("client_gpus_fed"), **fields)
