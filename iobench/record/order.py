"""In which order an epoch visits the samples."""

from __future__ import annotations

import numpy as np

ORDERS = ("sequential", "shuffled")


def epoch_order(kind: str, n: int, seed: int, epoch: int) -> np.ndarray:
    """Sample indices for one epoch: manifest order, or a fresh permutation per (seed, epoch)
    as a training sampler draws it (DLIO's fault of a fixed shard across epochs is not repeated)."""
    if kind == "sequential":
        return np.arange(n, dtype=np.int64)
    if kind == "shuffled":
        return np.random.default_rng([seed, epoch]).permutation(n).astype(np.int64)
    raise ValueError(f"unknown order {kind!r}")


def shard(order: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """Rank r's share of an epoch's global permutation, as DistributedSampler deals it (without its padding:
    every sample is read once, the shares differ by at most one): positions r, r + W, r + 2W, ..."""
    return order[rank::world_size]
