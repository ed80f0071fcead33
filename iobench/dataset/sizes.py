"""File-size distributions for generated datasets, and size strings such as "110KiB".

`imagenet` is a log-normal fitted to the ImageNet-1k training set: median ~97 kB, mean ~110 kB,
right-skewed, clipped to [2 kB, 2 MB] (the real set runs from ~2 kB to a few MB).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from iobench.errors import UserError

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gib": 1024**3,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")

IMAGENET_MEDIAN = 97_000
IMAGENET_MEAN = 110_000
MIN_FILE = 2_000  # smallest file a generated dataset holds (and smallest real ImageNet JPEGs)


def parse_size(text: str) -> int:
    """'110KiB' -> 112640, '97kB' -> 97000 (kB/MB are powers of 10, KiB/MiB powers of 2)."""
    m = _SIZE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise UserError(f"not a size: {text!r} (use e.g. 110KiB, 97kB, 2MiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


@dataclass(frozen=True)
class SizeDist:
    """A named distribution of file sizes in bytes."""

    spec: str  # as the user wrote it, normalised: "imagenet", "fixed:112640", "uniform:4096-262144"
    kind: str
    low: int = 0
    high: int = 0

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n sizes in bytes (int64)."""
        if self.kind == "fixed":
            return np.full(n, self.low, dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)
        # log-normal with the given median and mean: mean = median * exp(sigma^2 / 2)
        sigma = math.sqrt(2 * math.log(IMAGENET_MEAN / IMAGENET_MEDIAN))
        sizes = rng.lognormal(math.log(IMAGENET_MEDIAN), sigma, size=n)
        return np.clip(sizes, MIN_FILE, 2_000_000).astype(np.int64)


def parse_dist(spec: str) -> SizeDist:
    """'imagenet' | 'fixed:SIZE' | 'uniform:LOW-HIGH'."""
    kind, _, arg = spec.strip().partition(":")
    kind = kind.lower()
    if kind == "imagenet" and not arg:
        return SizeDist("imagenet", "imagenet")
    if kind == "fixed" and arg:
        size = parse_size(arg)
        _check_min(size, spec)
        return SizeDist(f"fixed:{size}", "fixed", size, size)
    if kind == "uniform" and "-" in arg:
        lo_s, _, hi_s = arg.partition("-")
        lo, hi = parse_size(lo_s), parse_size(hi_s)
        _check_min(lo, spec)
        if hi < lo:
            raise UserError(f"size distribution {spec!r}: high end is below low end")
        return SizeDist(f"uniform:{lo}-{hi}", "uniform", lo, hi)
    raise UserError(f"unknown size distribution {spec!r} (use imagenet, fixed:110KiB or uniform:4KiB-256KiB)")


def _check_min(size: int, spec: str) -> None:
    if size < MIN_FILE:
        raise UserError(f"size distribution {spec!r}: files must be at least {MIN_FILE} B to hold a JPEG")
