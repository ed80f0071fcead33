"""Named workloads: a dataset shape, a training read pattern and a GPU consumer, fixed in one TOML file
(docs/workloads.md: the format and how its rate's kind and batch are chosen)."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import ErrorDetails

from iobench import pipelines
from iobench.dataset.sizes import parse_dist
from iobench.errors import UserError
from iobench.gpu import rates as gpus
from iobench.safefs import read_input

DEFAULT = "imagenet-resnet50"
"""The workload `iobench run` replays when given none."""

SUFFIX = ".toml"
T = TypeVar("T")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _checked(check: Callable[[], T]) -> T:
    """A field's check that says a UserError, as the ValueError pydantic reports at the field's place (a pipeline's
    message names --pipeline: the field's place is said instead)."""
    try:
        return check()
    except UserError as exc:
        raise ValueError(str(exc).removeprefix("--pipeline: ")) from None


class DatasetShape(_Model):
    files: int = Field(ge=1, description="number of files (samples) in the dataset")
    size_dist: str = Field(
        "imagenet", description='file sizes: "imagenet", "fixed:SIZE" or "uniform:LO-HI" (e.g. uniform:4KiB-256KiB); '
                                "kept in normalised form, sizes in bytes")
    classes: int | None = Field(
        None, ge=1, description="class folders; unset: about 1,281 files per folder, as ImageNet")

    @field_validator("size_dist")
    @classmethod
    def _dist(cls, v: str) -> str:
        return _checked(lambda: parse_dist(v).spec)


class Pattern(_Model):
    engine: Literal["threads", "dataloader"] = Field(
        "dataloader", description='"threads": a thread pool that prefetches; "dataloader": torch DataLoader workers')
    workers: list[int] = Field([8], min_length=1, description="DataLoader worker processes per GPU (0: in the "
                                                                "training process); several values are a sweep")
    threads: list[int] = Field([16], min_length=1, description="reader threads of the thread engine; several "
                                                                 "values are a sweep")
    batch_size: int = Field(256, ge=1, description="samples per batch, per GPU")
    batch_of_gpu: bool = Field(False, description="batch_size is the batch the consumer's rate row was taken at "
                                                  "(MLPerf Storage: its accelerator config's reader.batch_size), "
                                                  "following --gpu; --batch-size replaces it")
    decode: bool = Field(False, description="also decode and augment each sample on the CPU, timed apart; the "
                                            "training runs then go through the torchvision pipeline (unless "
                                            "`pipeline` names another)")
    pipeline: list[str] = Field(["raw"], min_length=1, description='the training runs\' input pipelines: "raw", '
                                '"torchvision", "dali", "dali-raw", or FILE.py:FUNC / package.module:FUNC '
                                "(docs/pipelines.md); several: one training search each")
    epochs: int = Field(1, ge=1, description="epochs per run")
    order: Literal["sequential", "shuffled"] = Field(
        "shuffled", description='"shuffled": a fresh seeded permutation every epoch, as a training sampler')

    @field_validator("workers", "threads", mode="before")
    @classmethod
    def _as_list(cls, v: Any) -> Any:  # `8` and `[4, 8]` both mean a list of counts
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("pipeline", mode="before")
    @classmethod
    def _pipelines(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = v.split(",")
        return list(_checked(lambda: pipelines.parse_list(",".join(v)))) if isinstance(v, list | tuple) else v

    @field_validator("workers", "threads")
    @classmethod
    def _counts(cls, v: list[int], info: ValidationInfo) -> list[int]:
        least = 0 if info.field_name == "workers" else 1  # 0 workers: the training process reads
        if min(v) < least:
            raise ValueError(f"{str(info.field_name)[:-1]} counts must be >= {least}")
        return v


class Consumer(_Model):
    model: str = Field(description="model the GPUs train (iobench.gpu.rates names: resnet50, vit_b_16, ...)")
    gpu: str = Field(description="kind of GPU: v100, a100, h100, h200, ...")
    kind: str | None = Field(
        None, description='the kind of rate table row: "measured", "published" or "mlperf-storage" (the old name '
                          '"mlperf-storage-emulated" is read too); unset: the first kind the model and GPU have, in '
                          'that order; not with `rate`')
    au_target: float = Field(0.90, gt=0, le=1, description="accelerator utilisation a GPU must reach to count "
                                                           "as fed (MLPerf Storage: 0.90 for ResNet-50 and UNet3D, "
                                                           "0.85 for RetinaNet, 0.70 for CosmoFlow)")
    rate: float | None = Field(None, gt=0, description="samples/s one GPU consumes; wins over the table; its kind "
                                                       'is "given", so not with `kind`')

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str | None) -> str | None:
        return v if v is None else _checked(lambda: gpus.normalise_kind(v))

    @field_validator("rate")
    @classmethod
    def _rate_has_no_kind(cls, v: float | None, info: ValidationInfo) -> float | None:
        kind = info.data.get("kind")
        if v is not None and kind is not None:
            raise ValueError(f"a given rate has no kind: set rate ({v:g} samples/s) or kind ({kind!r}), not both")
        return v

    @model_validator(mode="after")
    def _known(self) -> Consumer:
        """Without an explicit rate the model and GPU must be in the table; names become the table's."""
        if self.rate is not None:
            model = gpus.canonical_model(self.model) or self.model
            gpu = gpus.canonical_gpu(self.gpu) or self.gpu
        else:
            row = _checked(lambda: gpus.lookup(self.model, self.gpu, self.kind))
            model, gpu = row.model, row.gpu
        # frozen model: normalise the names in place, once, while validating
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "gpu", gpu)
        return self


class Workload(_Model):
    name: str = Field(description="the file's name without .toml")
    description: str = Field(description="one line: what this workload stands for")
    path: str | None = Field(None, description="the file it was read from")
    dataset: DatasetShape
    pattern: Pattern = Field(default_factory=Pattern)
    consumer: Consumer

    @model_validator(mode="after")
    def _batch_of_gpu(self) -> Workload:
        """With batch_of_gpu, the batch is the consumer's rate row's (none with a given rate: batch_size stays)."""
        c = self.consumer
        if self.pattern.batch_of_gpu and c.rate is None:
            batch = gpus.lookup(c.model, c.gpu, c.kind).batch
            # frozen model: set once, while validating
            object.__setattr__(self, "pattern", self.pattern.model_copy(update={"batch_size": batch}))
        return self

    def merged(self, **overrides: Any) -> Workload:
        """A copy with the options that are not None (keyed by the sections' field names) in place of the file's,
        checked again. A rate in the file still wins over the table when only --model or --gpu is given; a `kind`
        replaces the file's kind and rate, a `rate` its kind (both at once: UserError); a `batch_size` replaces
        batch_of_gpu too."""
        gpus.check_rate_and_kind(overrides.get("rate"), overrides.get("kind"))
        data = self.model_dump()
        if overrides.get("batch_size") is not None:
            data["pattern"]["batch_of_gpu"] = False
        if overrides.get("kind") is not None:
            data["consumer"]["rate"] = None
        if overrides.get("rate") is not None:
            data["consumer"]["kind"] = None
        for key, value in overrides.items():
            section = _SECTION_OF.get(key)
            if section is None:
                raise TypeError(f"Workload.merged: no field {key!r}")
            if value is not None:
                data[section][key] = list(value) if isinstance(value, tuple) else value
        return _validate(data, f"workload {self.name}", option_names=True)

    def rate(self) -> gpus.PerGpuRate:
        """(samples/s per GPU, its source, its kind: "measured", "published", "mlperf-storage" or "given"): the
        consumer's rate, or the table's for its model and GPU."""
        c = self.consumer
        return gpus.rate_for(c.model, c.gpu, c.rate, c.kind)


_SECTIONS: dict[str, type[BaseModel]] = {"dataset": DatasetShape, "pattern": Pattern, "consumer": Consumer}
_SECTION_OF = {key: section for section, model in _SECTIONS.items() for key in model.model_fields}


def _where(loc: tuple, option_names: bool) -> str:
    parts = [str(p) for p in loc]
    if parts == ["consumer"]:  # the model/GPU pair is checked on the section as a whole
        parts = ["consumer", "model/gpu"]
    if option_names and len(parts) >= 2 and parts[0] in ("dataset", "pattern", "consumer"):
        return "--" + parts[1].replace("_", "-").replace("/", "/--")
    return ".".join(parts) or "(top level)"


def _message(err: ErrorDetails, option_names: bool) -> str:
    where = _where(tuple(err["loc"]), option_names)
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        parent = err["loc"][:-1]
        model = _SECTIONS.get(str(parent[0])) if len(parent) == 1 else Workload if not parent else None
        fields = [f for f in model.model_fields if model is not Workload or f not in ("name", "path")] if model else []
        known = f" (known: {', '.join(fields)})" if fields else ""
        return f"{where}: unknown field{known}"
    if kind == "missing":
        return f"{where}: missing"
    if kind == "value_error":  # our own checks: the message already names the value
        return f"{where}: {msg.removeprefix('Value error, ')}"
    value = err.get("input")
    return f"{where}: {msg}" if isinstance(value, (dict, type(None))) else f"{where}: {msg} (got {value!r})"


def _validate(data: dict, what: str, option_names: bool = False) -> Workload:
    try:
        return Workload.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        shown = "; ".join(_message(e, option_names) for e in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise UserError(f"{what}: {shown}{more}") from None


def shipped_dir() -> Path:
    """The folder of shipped workloads: `workloads/` beside the package in a source checkout (the pyproject.toml next
    to it), else the `iobench.workloads` package data pyproject.toml maps from it."""
    here = Path(__file__).resolve().parent
    tree = here.parent / "workloads"
    if (here.parent / "pyproject.toml").is_file() and tree.is_dir():
        return tree
    try:
        from importlib.resources import files

        installed = Path(str(files("iobench.workloads")))
    except (ModuleNotFoundError, TypeError):
        installed = None
    if installed is not None and installed.is_dir():
        return installed
    raise UserError(f"cannot find iobench's shipped workloads (looked in {tree} and the iobench.workloads package)")


def _shipped() -> dict[str, Path]:
    folder = shipped_dir()
    return {p.stem: p for p in sorted(folder.glob(f"*{SUFFIX}"))}


def read(path: Path) -> Workload:
    """Read and check one workload file; its name is the file's stem."""
    try:
        data = tomllib.loads(read_input(path, "a workload").decode("utf-8"))
    except FileNotFoundError:
        raise UserError(f"no workload file {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    for key in ("name", "path"):
        if key in data:
            raise UserError(f"{path}: {key}: unknown field (the name is the file's name)")
    return _validate({**data, "name": path.stem, "path": str(path)}, str(path))


def load(name_or_path: str | Path) -> Workload:
    """A shipped workload by name ("imagenet-resnet50"), or a workload file by path (anything with a "/" or
    ending in .toml, or an existing file)."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if "/" in text or text.endswith(SUFFIX) or path.is_file():
        return read(path)
    shipped = _shipped()
    if text not in shipped:
        raise UserError(f"no workload {text!r} (shipped: {', '.join(shipped) or 'none'}; or give a path to a "
                        f"{SUFFIX} file)")
    return read(shipped[text])


def available() -> list[tuple[str, str, Workload | None]]:
    """(name, description, the workload: None where its file is invalid) of every shipped workload, by name."""
    out: list[tuple[str, str, Workload | None]] = []
    for name, path in _shipped().items():
        try:
            w = read(path)
            out.append((name, w.description, w))
        except UserError as exc:
            out.append((name, f"(invalid: {exc})", None))
    return out
