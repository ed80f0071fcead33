"""In which order an epoch visits the samples."""

from __future__ import annotations

import numpy as np

ORDERS = ("sequential", "shuffled")


def epoch_order(kind: str, n: int, seed: int, epoch: int, passes: int = 1) -> np.ndarray:
    """Sample indices for one epoch: manifest order, or a fresh permutation per (seed, epoch)
    as a training sampler draws it (DLIO's fault of a fixed shard across epochs is not repeated). `passes` > 1
    (a warm epoch lengthened to last the floor, answer/sizing.passes_for): that many passes over the samples one
    after the other, each shuffled afresh (the first is the one-pass epoch's own order)."""
    if kind == "sequential":
        return np.tile(np.arange(n, dtype=np.int64), passes)
    if kind == "shuffled":
        return np.concatenate([np.random.default_rng([seed, epoch] + ([p] if p else [])).permutation(n)
                               for p in range(passes)]).astype(np.int64)
    raise ValueError(f"unknown order {kind!r}")


def shard(order: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """Rank r's share of an epoch's global permutation, as DistributedSampler deals it (without its padding:
    every sample is read once, the shares differ by at most one): positions r, r + W, r + 2W, ..."""
    return order[rank::world_size]
