"""Every option `iobench run` is given is honoured or refused: this table says when one does not apply, judged on
its value (None: not given), so a switch that turns a phase off (`--no-fio`) is never refused. The first row that
applies ends the command in one line (exit 2): {opt} is the option, {why} why the thread engine replays. Each row's
options are RunOptions fields (tests/test_cli_options.py); docs/errors.md lists the messages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iobench.cli.options import RunOptions
from iobench.errors import UserError
from iobench.store import MAX_IN_FLIGHT


@dataclass(frozen=True)
class Case:
    """What a value is judged against besides the other values: the engine that replays (the workload's, or the
    thread engine standing in for a missing PyTorch: `fallback`), whether the run is distributed (--ranks, or
    under torchrun), the read orders (given, else the workload's)."""

    engine: str
    fallback: bool
    distributed: bool
    orders: tuple[str, ...]


@dataclass(frozen=True)
class Refusal:
    options: tuple[str, ...]  # each judged alone, in this order
    refused: Callable[[Any, RunOptions, Case], bool]  # (the option's value, every value, the case)
    message: str

    def error(self, opt: str, why: str) -> UserError:
        return UserError(self.message.format(opt=opt, why=why))


def _asks(value: Any) -> bool:
    """The value asks for something: the option was given, and not as a switch turned off."""
    return value is not None and value is not False


REFUSALS = (
    Refusal(("timeout",), lambda v, o, c: v is not None and not c.distributed,
            "--timeout applies to a distributed run (--ranks P, or under torchrun); a stalled storage is "
            "--io-timeout"),
    Refusal(("check",), lambda v, o, c: v and o.gpus is None and not c.distributed,
            "--check needs --gpus N: it exits 1 when N GPUs are not fed"),
    Refusal(("threads",), lambda v, o, c: v is not None and c.engine == "dataloader",
            "--threads sets the thread engine's readers; the DataLoader engine takes --workers "
            "(or give --engine threads)"),
    Refusal(("workers", "batch_size", "prefetch_factor"), lambda v, o, c: v is not None and c.engine == "threads",
            "{opt} applies to the DataLoader engine; the thread engine takes --threads{why}"),
    Refusal(("mount", "files", "size_dist", "classes"), lambda v, o, c: v is not None and o.dataset is not None,
            "{opt} shapes or places a generated dataset; --dataset reads an existing one: give one or the other"),
    Refusal(("follow_links",), lambda v, o, c: v and o.dataset is None,
            "--follow-links applies to a tree read with --dataset: a dataset iobench made holds no links"),
    Refusal(("url",), lambda v, o, c: v is not None and o.dataset is not None,
            "--url places the datasets in a bucket; --dataset reads an existing tree on a mount: give one or the "
            "other"),
    # object storage: an LMDB is a file a process maps: it has no object-storage form (tar shards do: pack --url)
    Refusal(("source",), lambda v, o, c: o.url is not None and "lmdb" in v,
            "--source lmdb reads an LMDB, which is not made in object storage: --url reads one object per sample "
            "(--source files) or tar shards by ranged GETs (--source tar)"),
    Refusal(("mount",), lambda v, o, c: v is not None and o.url is not None and c.distributed,
            "--mount with --url reads a FUSE view of the bucket beside the objects, in a run on one host: run it "
            "without --ranks or torchrun"),
    Refusal(("in_flight",), lambda v, o, c: v is not None and o.url is None,
            "--in-flight keeps several GETs in flight per reader: it applies to object storage (--url); a file is "
            "read one at a time per reader (--threads, --workers)"),
    Refusal(("in_flight",), lambda v, o, c: v is not None and max(v) > MAX_IN_FLIGHT,
            f"{{opt}} is at most {MAX_IN_FLIGHT} GETs per reader: the S3 client opens at most {MAX_IN_FLIGHT} "
            "connections, so more would wait inside it, not at the server, each holding a buffer of the largest "
            "object"),
    Refusal(("in_flight",), lambda v, o, c: v is not None and o.s3_client == "s3torchconnector" and max(v) > 1,
            "s3torchconnector's get_object waits for each response's headers: depth comes from more "
            "--threads/--workers (--in-flight 1), or read with --s3-client crt"),
    Refusal(("in_flight",), lambda v, o, c: v is not None and o.s3_client == "boto3" and "tar" in o.source
            and max(v) > 1,
            "--source tar reads ranged GETs several in flight through the CRT only: boto3's calls block; give "
            "--s3-client crt, or more --threads/--workers (--in-flight 1)"),
    Refusal(("in_flight",), lambda v, o, c: v is not None and c.distributed,
            "--in-flight is not built for a distributed run yet: its ranks read one GET at a time per worker"),
    Refusal(("pipeline",), lambda v, o, c: v is not None and c.engine == "threads",
            "--pipeline sets the training runs' input pipeline; with the thread engine no training run is made{why}"),
    Refusal(("pipeline",), lambda v, o, c: v is not None and o.decode is not None,
            "--decode trains through --pipeline torchvision (and decodes in the replay): give one or the other"),
    Refusal(("pipeline",), lambda v, o, c: v is not None and v != ("raw",) and o.url is not None,
            "{opt} other than raw reads files: on object storage (--url) the training runs read through iobench's "
            "raw reader (--pipeline raw)"),
    Refusal(("pipeline",), lambda v, o, c: v is not None and v != ("raw",) and c.distributed,
            "a distributed run reads through iobench's raw reader: --pipeline other than raw is not built for it yet"),
    Refusal(("scale_files",), lambda v, o, c: v is not None and o.metadata is False,
            "--scale-files projects the metadata phase's listing; it does not apply with --no-metadata"),
    Refusal(("rate",), lambda v, o, c: v is not None and o.consumer == "cuda",
            "--consumer cuda trains the real model on a local GPU, whose rate is measured: --rate does not apply"),
    Refusal(("mitigations",), lambda v, o, c: v and "cold" not in o.cache,
            "--mitigations are measured cold: they do not apply with --cache warm"),
    # a distributed run is the training job itself: shuffled epochs through a DataLoader per rank, at one worker
    # count, with a GPU consumer; options for the phases it does not run do not apply
    Refusal(("engine",), lambda v, o, c: c.distributed and c.engine != "dataloader",
            "a distributed run reads through a DataLoader per rank, as training does: it needs PyTorch and does not "
            "take --engine threads"),
    Refusal(("threads", "fio", "metadata", "mitigations", "gpus", "scale_files"),
            lambda v, o, c: c.distributed and _asks(v),
            "{opt} does not apply to a distributed run (its GPUs are its ranks; it measures the job's epochs only): "
            "run it without --ranks or torchrun"),
    Refusal(("repeat",), lambda v, o, c: c.distributed and v != 1,
            "--repeat does not apply to a distributed run: give --epochs N"),
    Refusal(("source", "order"), lambda v, o, c: c.distributed and (o.source, c.orders) != (("files",), ("shuffled",)),
            "a distributed run reads the files in a fresh shuffle each epoch: --source and --order other than files "
            "and shuffled do not apply"),
    Refusal(("workers",), lambda v, o, c: c.distributed and v is not None and len(v) > 1,
            "a distributed run reads at one --workers count per rank: give one value"),
)


def flag(option: str) -> str:
    """The option as typed: scale_files is --scale-files."""
    return "--" + option.replace("_", "-")


def refuse(opts: RunOptions, case: Case) -> None:
    """The first row of REFUSALS that applies to a value given, as one line (UserError)."""
    why = " (PyTorch is not installed, so the thread engine replays)" if case.fallback else ""
    for row in REFUSALS:
        for option in row.options:
            if row.refused(getattr(opts, option), opts, case):
                raise row.error(flag(option), why)
