"""The training runs' input pipelines (`run --pipeline`, docs/pipelines.md): each a real library called as a
training job calls it, timed from outside by the training phase. `raw` is not made here: the training phase reads it
through `engines.make`, so each sample's read is iobench's own record. `make(spec, shape)` gives a `Feed` per GPU,
whose `batches(epoch)` is that epoch's iterable of batches (each counted by `count`); loader.py turns a Feed into the
Loader a training lane reads through. `parse` and `check` import none of the libraries."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from iobench.errors import UserError

RAW = "raw"
NAMED = ("raw", "torchvision", "dali", "dali-raw")
DALI_INSTALL = "pip install 'iobench[dali]' (or pip install nvidia-dali-cuda130)"

# what each pipeline stands for, in the answer's words (docs/pipelines.md says more)
LABELS = {
    "raw": "raw reader (bytes into the batch, as DALI's file reader feeds a GPU decode)",
    "torchvision": "torchvision pipeline (CPU decode)",
    "dali": "DALI pipeline ({} decode)",  # where it decodes: GPU or CPU
    "dali-raw": "DALI file reader (no decode)",
}


@dataclass(frozen=True)
class Spec:
    """A pipeline as asked: one of NAMED, or the user's `FILE.py:FUNC` / `package.module:FUNC`."""

    text: str

    @property
    def kind(self) -> str:
        return self.text if self.text in NAMED else "user"

    @property
    def raw(self) -> bool:
        return self.text == RAW

    @property
    def decodes(self) -> bool:
        """Decodes the images on the client (a user's pipeline: not known, said False)."""
        return self.kind in ("torchvision", "dali")

    def label(self, gpu_decode: bool = False) -> str:
        if self.kind == "user":
            return f"pipeline {self.text} (yours)"
        return LABELS[self.text].format("GPU" if gpu_decode else "CPU")


def parse(text: str) -> Spec:
    """One pipeline's name, or the user's FILE.py:FUNC / package.module:FUNC (one line for anything else)."""
    text = text.strip()
    if text in NAMED:
        return Spec(text)
    module, sep, func = text.rpartition(":")
    if not sep or not module or not func.isidentifier():
        raise UserError(f"--pipeline: unknown {text!r} (use {', '.join(NAMED)}, FILE.py:FUNC or package.module:FUNC)")
    return Spec(text)


def parse_list(text: str) -> tuple[str, ...]:
    """A comma list of pipelines (`raw,torchvision`): each parsed, none twice."""
    names = tuple(parse(t).text for t in text.split(",") if t.strip())
    if not names:
        raise UserError("--pipeline: give a pipeline, e.g. raw or torchvision")
    if len(set(names)) < len(names):
        raise UserError(f"--pipeline: {text!r} names a pipeline twice")
    return names


def check(spec: Spec) -> None:
    """What the pipeline needs is here (one line for what is missing, and how to get it); the user's function is
    found (its module imported: an exception there is the user's, UserCodeError)."""
    if spec.kind == "torchvision" and importlib.util.find_spec("torchvision") is None:
        raise UserError("--pipeline torchvision needs torchvision: pip install torchvision (the version that matches "
                        "your torch)")
    if spec.kind.startswith("dali") and not _found("nvidia.dali"):
        raise UserError(f"--pipeline {spec.text} needs NVIDIA DALI: {DALI_INSTALL}")
    if spec.kind == "user":
        from iobench.pipelines.user import resolve

        resolve(spec.text)


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def count(batch: Any) -> int:
    """Samples in a batch: len() of its first element when it is a tuple or list (default_collate's [images,
    labels]), else of the batch; where that is a dict, of its first value (DALI's iterator gives [{"data": ...}])."""
    first = batch[0] if isinstance(batch, list | tuple) else batch
    if isinstance(first, Mapping):
        first = next(iter(first.values()))
    return len(first)


class Feed(Protocol):
    """One GPU's input pipeline over a training run: each epoch's batches, and what it holds closed at the end."""

    def batches(self, epoch: int) -> Iterable[Any]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Shape:
    """What a pipeline is made with: the dataset's files and their ImageFolder root, per GPU batch and readers
    (DataLoader workers, DALI threads), the seed, which GPU of how many (its shard), a real GPU to decode on."""

    paths: Any  # the manifest's path table: its files, in the manifest's order
    root: Path
    batch_size: int
    workers: int
    seed: int
    rank: int = 0
    world: int = 1
    gpu: int | None = None  # a real GPU (--consumer cuda): DALI decodes there ("mixed")


def make(spec: Spec, shape: Shape) -> Feed:
    """The Feed of one GPU of a training run through `spec` (not raw: the engines read that)."""
    if spec.kind == "torchvision":
        from iobench.pipelines.torchvision_loader import TorchvisionFeed

        return TorchvisionFeed(shape)
    if spec.kind in ("dali", "dali-raw"):
        from iobench.pipelines.dali import DaliFeed

        return DaliFeed(shape, decode=spec.kind == "dali")
    if spec.kind == "user":
        from iobench.pipelines.user import UserFeed

        return UserFeed(spec.text, shape)
    raise ValueError(f"the {spec.text} pipeline is read through engines.make")
