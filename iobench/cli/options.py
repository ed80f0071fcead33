"""The options `run`, `fio`, `gen` and `pack` share, the parsing of their values, and `RunOptions`: `run` and `fio`
as one typed value. A value not given is None there (the default, or the workload's, is taken where it is used),
so that whether an option applies is judged on its value alone (iobench.cli.refusals); the help texts say the
defaults (tests/test_help_defaults.py compares them with those used)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.shell_completion import CompletionItem

from iobench import pipelines, store
from iobench.dataset import GenSpec, default_classes
from iobench.dataset.sizes import parse_dist
from iobench.errors import UserError
from iobench.gpu.rates import canonical_gpu, canonical_model, rates
from iobench.record.order import ORDERS

if TYPE_CHECKING:
    from iobench.session import Shape

DEFAULT_FILES = 25_000  # the default workload's: every run of its sweep gets >= 10 batches per worker
DEFAULT_THREADS = (1, 4, 16, 64)  # the default workload's thread sweep, said in `run --threads`' help
DEFAULT_IN_FLIGHT = (1, 8)  # --url's requests in flight per reader: with the threads 1-64, 1 to 512 in flight
FIO_THREADS = (1, 4, 16, 64)  # `iobench fio`'s sweep, where --threads is not given
SOURCES = ("files", "lmdb", "tar")
CACHES = ("cold", "warm")

F = TypeVar("F", bound=Callable[..., Any])


def int_list(text: str, what: str, minimum: int = 1) -> tuple[int, ...]:
    """A comma list of counts (`--threads 1,4,16`), each >= minimum."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise UserError(f"{what}: expected numbers like 1,4,16, got {text!r}") from None
    if not values or min(values) < minimum:
        raise UserError(f"{what}: values must be >= {minimum}, got {text!r}")
    return values


class Listed(click.Choice):
    """A comma list of names out of `allowed` (`every`, "both" by default, stands for them all), listed by click's
    Choice, completed after the last comma; the value is the tuple (one line for a bad name)."""

    def __init__(self, allowed: tuple[str, ...], what: str, every: str = "both"):
        super().__init__((*allowed, every))
        self.allowed, self.what, self.every = allowed, what, every

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, ...]:
        if isinstance(value, tuple):
            return value
        text = str(value)
        values = self.allowed if text == self.every else tuple(v.strip() for v in text.split(","))
        bad = [v for v in values if v not in self.allowed]
        if bad:
            raise UserError(f"{self.what}: unknown {', '.join(bad)} (use {', '.join(self.allowed)} or {self.every})")
        return values

    def shell_complete(self, ctx: click.Context, param: click.Parameter,
                       incomplete: str) -> list[CompletionItem]:
        done, _, last = incomplete.rpartition(",")  # `cold,w<TAB>`: the names after the last comma
        head = f"{done}," if done else ""
        names = self.allowed if done else (*self.allowed, self.every)
        return [CompletionItem(head + n) for n in names if n.startswith(last) and n not in done.split(",")]


class Named(click.Choice):
    """A name out of a table (the GPUs or models of iobench.gpu.rates) that help and shell completion list (click's
    Choice); an alias is put as the table's name (`normalise`), any other name is passed on as given, to be judged
    where it is used (a GPU or model the table lacks is fine with --rate)."""

    def __init__(self, names: tuple[str, ...], normalise: Callable[[str], str | None]):
        super().__init__(names, case_sensitive=False)
        self.normalise = normalise

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        return self.normalise(str(value)) or str(value)


class Renamed(click.Option):
    """An option whose old spellings (`old`) still work, kept out of the help and out of shell completion (one name
    per idea across commands: `--batch-size`, `--files`): only the parser knows them."""

    def __init__(self, param_decls: Sequence[str], old: tuple[str, ...] = (), **attrs: Any):
        super().__init__([*param_decls, *old], **attrs)
        self.old = old
        self.opts = [o for o in self.opts if o not in old]  # what help, completion and errors name

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        shown = self.opts
        self.opts = [*shown, *self.old]
        try:
            super().add_to_parser(parser, ctx)
        finally:
            self.opts = shown


class Folder(click.ParamType):
    """A folder's path (--mount, --dataset). A URL given there is one line: as a path, s3://bucket would be read as
    the folder s3:/bucket (a slash silently dropped) and reported missing."""

    name = "path"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        text = str(value)
        if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/", text):
            opt = param.opts[0] if param is not None and param.opts else "a folder"
            raise UserError(f"{opt} '{text}' is a URL: {opt} takes a folder; object storage is --url "
                            "s3://BUCKET/PREFIX")
        return Path(text)


FOLDER = Folder()
GPU = Named(tuple(sorted({r.gpu for r in rates()})), canonical_gpu)
MODEL = Named(tuple(sorted({r.model for r in rates()})), canonical_model)  # another model is fine with --rate
CACHE = Listed(CACHES, "--cache")
ORDER = Listed(ORDERS, "--order")
SOURCE = Listed(SOURCES, "--source", every="all")
FORMAT = Listed(("lmdb", "tar"), "--format")


def spec(files: int, size_dist: str | None, classes: int | None, seed: int | None) -> GenSpec:
    """The dataset's full shape from the shape options (None: imagenet sizes, ~1,281 files per folder, seed 0)."""
    if files < 1:
        raise UserError("--files must be >= 1")
    return GenSpec(files, parse_dist(size_dist or "imagenet"), classes or default_classes(files),
                   0 if seed is None else seed)


def shape_of(files: int | None, size_dist: str | None, classes: int | None, seed: int | None, *,
             workload_shape: Any = None, workload_named: bool = False) -> Shape:
    """The Shape from the shape options (those given are asked for) and, for `run`, its workload's dataset."""
    from iobench.session import Shape  # everything a measured run needs: only when one is made

    asked = {key for key, value in (("files", files), ("size_dist", size_dist), ("classes", classes),
                                    ("seed", seed)) if value is not None}
    if workload_shape is not None:
        if workload_named:  # the workload's file says its dataset's shape: asked for as much as an option is
            asked |= {"files", "size_dist"} | ({"classes"} if workload_shape.classes is not None else set())
        files, size_dist, classes = workload_shape.files, workload_shape.size_dist, workload_shape.classes
    return Shape(spec(DEFAULT_FILES if files is None else files, size_dist, classes, seed), frozenset(asked))


def gen_options(size_dist: str) -> Callable[[F], F]:
    """--seed, --classes, --size-dist; `size_dist` says its default in the help (taken when it is None)."""
    def add(f: F) -> F:
        f = click.option("--seed", type=click.IntRange(min=0), default=None,
                         help="Seed of sizes, content and shuffles (>= 0).  [default: 0]")(f)
        f = click.option("--classes", type=int, default=None,
                         help="Class folders.  [default: ~1,281 files per folder, as ImageNet]")(f)
        return click.option("--size-dist", default=None,
                            help=f"File sizes: imagenet, fixed:SIZE (fixed:110KiB), uniform:LO-HI "
                                 f"(uniform:4KiB-256KiB){size_dist}")(f)
    return add


def s3_options(f: F) -> F:
    """Where a bucket is: `--url s3://BUCKET/PREFIX` instead of --mount, and how to reach it (the AWS SDKs'
    conventions: credentials and region from the standard chain)."""
    for opt in reversed([
        click.option("--url", default=None,
                     help="Object storage instead of a mount: s3://BUCKET/PREFIX (the datasets live under it)."),
        click.option("--endpoint-url", default=None,
                     help="The S3 endpoint (http(s)://HOST[:PORT]) for --url.  [default: $AWS_ENDPOINT_URL_S3, "
                          "$AWS_ENDPOINT_URL, else AWS's]"),
        click.option("--profile", default=None,
                     help="The AWS profile (~/.aws/config, credentials) for --url.  [default: $AWS_PROFILE, else "
                          "the default chain]"),
        click.option("--s3-client", type=click.Choice(store.CLIENTS), default=None,
                     help="The client that reads objects for --url: crt (the AWS CRT, awscrt's asynchronous S3 "
                          "client), boto3, or s3torchconnector (what S3MapDataset reads with; one GET per reader).  "
                          "[default: crt]"),
    ]):
        f = opt(f)
    return f


def measure_options(fio: bool) -> Callable[[F], F]:
    """Options shared by `run` and `fio` (`fio`: the defaults said are fio's, with no workload): where, what, how
    concurrent, which cache states, where to."""
    workload = "" if fio else "the workload's: "
    threads = (f"fio jobs; a comma list is a sweep  [default: {_commas(FIO_THREADS)}]" if fio else
               "Reader threads of the thread engine; a comma list is a sweep (the fio baseline runs the same sweep)  "
               f"[default: the workload's: {_commas(DEFAULT_THREADS)}]")

    def add(f: F) -> F:
        for opt in reversed([
            click.option("--mount", type=FOLDER, default=None,
                         help="File system to measure; the dataset lives under MOUNT/iobench-data/ (with --url: a "
                              "FUSE view of the same bucket, read beside the objects).  [default: .]"),
            click.option("--dataset", type=FOLDER, default=None,
                         help="An existing image tree (e.g. an ImageFolder) to read instead of a generated one."),
            click.option("--follow-links", is_flag=True,
                         help="--dataset: also read through links whose target is outside the tree (skipped and "
                              "counted by default; links inside it are always followed)."),
            click.option("--files", type=int, default=None,
                         help="Files of the dataset under --mount: with --size-dist, --classes and --seed, its shape "
                              f"(the dataset of that shape is used, or made)  [default: {workload}{DEFAULT_FILES:,}]"),
            gen_options(f"  [default: {workload}imagenet]"),
            click.option("--threads", default=None, help=threads),
            click.option("--cache", type=CACHE, default="both", show_default=True,
                         help="Cache states to measure: cold, warm, or both."),
            click.option("--json", "json_path", default=None,
                         help="Also write the result JSON here; - writes it to stdout, alone (every other line goes "
                              "to stderr)."),
            click.option("--out", type=Path, default=None,
                         help="Result folder: a new or empty one, outside the dataset  "
                              "[default: reports/<timestamp>-<fstype>-<mount>/]"),
            click.option("--quiet", is_flag=True,
                         help="Print only the verdict line (nothing at all with --json -); errors still go to "
                              "stderr."),
            s3_options,
            click.option("--io-timeout", type=float, default=60.0, show_default=True,
                         help="Seconds without a finished read after which the storage counts as stalled: the run "
                              "ends there (exit 3), the epoch kept with complete false, readers stuck in IO left "
                              "behind."),
        ]):
            f = opt(f)
        return f
    return add


def _commas(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


def check_seconds(seconds: float, opt: str = "--io-timeout") -> float:
    """--io-timeout (run, fio, gen), --timeout (run): a number of seconds > 0, else one line."""
    if not seconds > 0 or math.isinf(seconds):
        raise UserError(f"{opt} must be a number of seconds > 0, got {seconds:g}")
    return seconds


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """`iobench run` (and `fio`, which has the first seventeen: measure_options') as typed: each field is the
    parameter of that name, None where it was not given, comma lists parsed. tests/test_cli_options.py keeps the
    fields and `run`'s parameters one set."""

    # where, what, how concurrent, which cache states, where to (measure_options)
    mount: Path | None
    dataset: Path | None
    follow_links: bool
    files: int | None
    size_dist: str | None
    classes: int | None
    seed: int | None
    threads: tuple[int, ...] | None
    cache: tuple[str, ...]
    json_path: str | None
    out: Path | None
    quiet: bool
    url: str | None = None  # object storage (s3_options), instead of --mount
    endpoint_url: str | None = None
    profile: str | None = None
    s3_client: str | None = None
    io_timeout: float = 60.0
    # `run` alone
    workload: str | None = None
    order: tuple[str, ...] | None = None
    source: tuple[str, ...] = ("files",)
    epochs: int | None = None
    repeat: int = 1
    fio: bool | None = None
    metadata: bool | None = None
    scale_files: int | None = None
    engine: str | None = None
    workers: tuple[int, ...] | None = None
    in_flight: tuple[int, ...] | None = None
    batch_size: int | None = None
    prefetch_factor: int | None = None
    decode: bool | None = None
    pipeline: tuple[str, ...] | None = None
    model: str | None = None
    gpu: str | None = None
    rate: float | None = None
    rate_kind: str | None = None
    gpus: int | None = None
    au_target: float | None = None
    consumer: str = "sleep"
    mitigations: bool = False
    check: bool = False
    ranks: int | None = None
    timeout: float | None = None

    @property
    def where(self) -> store.Location:
        """The bucket's prefix for --url (where --mount is the FUSE view of the same bucket, read beside it), else
        the mount: the one given, else the current folder."""
        return store.at(None if self.url else self.mount, self.url, self.endpoint_url, self.profile, self.s3_client)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> RunOptions:
        """The typed value of click's parameters (a name that is no field fails), each value checked: a bad one
        is a one-line error before anything else is done."""
        v = dict(params)
        repeat = v.get("repeat", 1)
        if repeat < 1:
            raise UserError(f"--repeat must be >= 1, got {repeat}")
        check_seconds(v.get("io_timeout", 60.0))
        if any(v.get(name) is not None and v[name] < 1 for name in ("prefetch_factor", "gpus")):
            raise UserError("--prefetch-factor and --gpus must be >= 1")
        for name, least in (("workers", 0), ("threads", 1), ("in_flight", 1)):
            if v.get(name) is not None:
                v[name] = int_list(v[name], "--" + name.replace("_", "-"), minimum=least)
        if isinstance(v.get("pipeline"), str):
            v["pipeline"] = pipelines.parse_list(v["pipeline"])
        return cls(**v)  # click gives --cache, --order and --source as tuples (CACHE, ORDER, SOURCE), defaults too
