"""One run across many clients, on torch.distributed, as a training job reads shared storage.

Every rank stands for one GPU of the job: each epoch it reads its share of a fresh global permutation (a
DistributedSampler-like split: the same seeded permutation on every rank, rank r takes positions r, r + W, ...)
through its own DataLoader, feeds its emulated GPU, and joins a per-step allreduce that stands for the gradient
allreduce, so the job runs at the pace of its slowest rank. Rank 0 makes or checks the dataset while the others
wait, gathers every rank's figures after each epoch and writes the one result (saved after every epoch).

Launch with `torchrun --nnodes N --nproc-per-node P ... -m iobench run --mount DIR` on every node (the same
mount path on each), or `iobench run --ranks P` for P ranks on this host (launched and watched by launch.py, as
torchrun's launcher would on one node, with bounded ends).

job.py: a rank's membership (process group, store, heartbeats, bounded waits); epochs.py: the dataset handed out,
the epochs, the gathering and what each epoch proves; launch.py: `--ranks P`."""

from iobench.distributed.epochs import (
    coverage,
    digest,
    execute,
    follow,
    lead,
    read_once,
    steps_per_rank,
    workers_per_rank,
)
from iobench.distributed.job import Job, RankLost, World, world
from iobench.distributed.launch import launch

__all__ = ["Job", "RankLost", "World", "coverage", "digest", "execute", "follow", "launch", "lead", "read_once",
           "steps_per_rank", "workers_per_rank", "world"]
