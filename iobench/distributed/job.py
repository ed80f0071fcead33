"""A rank's membership of a distributed job: its place (torchrun's environment), the process group (gloo), the
rendezvous store, the heartbeat, and the waits and collectives that end in bounded time when another rank is lost.

Every rank bumps a heartbeat counter in the rendezvous store every BEAT_S and publishes its step count; waits
outside the steps (the dataset, an eviction) end when a rank stops beating for `timeout_s`; a step's allreduce
that fails or times out (`timeout_s`) is explained by which rank said why it failed, stopped beating, or fell
behind."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from iobench.errors import EnvironmentRefused

BEAT_S = 0.5  # heartbeat period of every rank
LOST_CHECK_S = 3.0  # after a failed collective: how long to watch the heartbeats before naming a lost rank
POLL_S = 0.05  # store-based waits poll this often
KEY = "iobench/"  # every key this module sets in the rendezvous store starts so


class RankLost(EnvironmentRefused):
    """A rank died, hung, or failed: the job cannot go on (exit 3); rank 0 keeps what was gathered. `named`: the
    message names the rank (or the store) that went; false when every rank still answered."""

    def __init__(self, message: str, named: bool = True):
        super().__init__(message)
        self.named = named


@dataclass(frozen=True)
class World:
    """This process's place in the job, as torchrun describes it in the environment."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    rendezvous: str  # MASTER_ADDR:MASTER_PORT (the store every rank reaches)
    launcher: str  # "torchrun" or "iobench --ranks"

    @property
    def host(self) -> str:
        return socket.gethostname()


def world() -> World | None:
    """The world this process is a rank of, from torchrun's environment; None outside a distributed launch."""
    env = os.environ
    if "RANK" not in env or "WORLD_SIZE" not in env or "MASTER_ADDR" not in env:
        return None
    return World(rank=int(env["RANK"]), world_size=int(env["WORLD_SIZE"]), local_rank=int(env.get("LOCAL_RANK", 0)),
                 local_world_size=int(env.get("LOCAL_WORLD_SIZE", 1)),
                 rendezvous=f"{env['MASTER_ADDR']}:{env.get('MASTER_PORT', '')}",
                 launcher="iobench --ranks" if env.get("IOBENCH_RANKS") else "torchrun")


@dataclass(frozen=True)
class Peer:
    """What every rank tells the others when the job starts."""

    rank: int
    local_rank: int
    host: str
    pid: int
    cpus_usable: float


class Job:
    """This rank's membership of the job: the process group (gloo), the rendezvous store, the heartbeat, and the
    waits and collectives that end in bounded time when another rank is lost."""

    def __init__(self, w: World, timeout_s: float):
        import torch.distributed as dist

        from iobench.mounts import usable_cpus

        self.w = w
        self.timeout_s = timeout_s
        self.dist = dist
        try:
            dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s), rank=w.rank,
                                    world_size=w.world_size)
        except (RuntimeError, ValueError) as exc:
            raise RankLost(f"rank {w.rank} on {w.host} could not join the job at {w.rendezvous} within "
                           f"{timeout_s:g} s: {first_line(exc)}") from None
        self.store = dist.distributed_c10d._get_default_store()
        self.steps = 0  # allreduce steps this rank has joined (published with the heartbeat)
        self._seen: dict[int, tuple[int, float]] = {}  # rank -> (last heartbeat count, when it last changed)
        self.peers: list[Peer] = []
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._beating, name="iobench-heartbeat", daemon=True)
        self._beat.start()
        me = Peer(w.rank, w.local_rank, w.host, os.getpid(), usable_cpus())
        gathered: list[Any] = [None] * w.world_size
        self.collective(lambda: dist.all_gather_object(gathered, me), "meeting the other ranks")
        self.peers = gathered
        import torch

        self._grad = torch.zeros(1)  # the allreduce's payload: its size is not what is measured, its wait is

    # -- who is where ---------------------------------------------------------------------------------------
    @property
    def hosts(self) -> list[str]:
        """Hosts in the order their first rank appears (node 0 holds rank 0)."""
        return list(dict.fromkeys(p.host for p in self.peers))

    @property
    def evictor(self) -> bool:
        """One rank per host evicts that host's page cache for a cold epoch: the lowest rank on it."""
        return min(p.rank for p in self.peers if p.host == self.w.host) == self.w.rank

    def where(self, rank: int) -> str:
        p = self.peers[rank] if rank < len(self.peers) else None
        return f"rank {rank} on {p.host} (pid {p.pid})" if p else f"rank {rank}"

    # -- liveness -------------------------------------------------------------------------------------------
    def _beating(self) -> None:
        while not self._stop.wait(BEAT_S):
            try:
                self.store.add(f"{KEY}beat/{self.w.rank}", 1)
                self.store.set(f"{KEY}steps/{self.w.rank}", str(self.steps))
            except Exception:  # the store is gone: the job is over; the main thread finds out on its next call
                return

    def _lost(self, ranks: list[int] | None = None) -> list[int]:
        """Ranks whose heartbeat has not moved for timeout_s (as this rank saw it: no clocks are compared)."""
        now = time.monotonic()
        lost = []
        for r in ranks if ranks is not None else range(self.w.world_size):
            count = self.store.add(f"{KEY}beat/{r}", 0)
            last = self._seen.get(r)
            if last is None or last[0] != count:
                self._seen[r] = (count, now)
            elif now - last[1] > self.timeout_s:
                lost.append(r)
        return lost

    def fail(self, why: str) -> None:
        """Tell the other ranks why this one stops (they name it in their error), before leaving the job."""
        with contextlib.suppress(Exception):  # the store may be what failed; the others then see the beat stop
            self.store.set(f"{KEY}failed/{self.w.rank}", why[:2000])

    def _failed(self) -> dict[int, str]:
        out = {}
        for r in range(self.w.world_size):
            if r != self.w.rank and self.store.check([f"{KEY}failed/{r}"]):
                out[r] = self.store.get(f"{KEY}failed/{r}").decode(errors="replace")
        return out

    def diagnose(self, what: str, exc: BaseException | None = None) -> RankLost:
        """Why a wait or collective ended: a rank that said why it failed, else one whose heartbeat stopped,
        else the ranks furthest behind in steps, else the collective's own error."""
        try:
            failed = self._failed()
            if failed:
                r, why = min(failed.items())
                return RankLost(f"{self.where(r)} failed while {what}: {why}")
            deadline = time.monotonic() + LOST_CHECK_S
            self._seen.clear()
            while time.monotonic() < deadline:  # a dead or frozen rank stops beating within a few BEAT_S
                self._lost()
                time.sleep(BEAT_S)
            now = time.monotonic()
            stopped = [r for r, (_, t) in self._seen.items() if now - t >= LOST_CHECK_S - BEAT_S]
            if stopped:
                return RankLost(f"{', '.join(self.where(r) for r in stopped)} stopped answering (no heartbeat for "
                                f"{LOST_CHECK_S:g} s) while {what}")
            steps = {r: int(self.store.get(f"{KEY}steps/{r}")) for r in range(self.w.world_size)
                     if self.store.check([f"{KEY}steps/{r}"])}
            if steps and min(steps.values()) < max(steps.values()):
                behind = [r for r, s in steps.items() if s == min(steps.values())]
                return RankLost(f"{', '.join(self.where(r) for r in behind)} fell behind (step {min(steps.values())}, "
                                f"the others up to {max(steps.values())}) and did not catch up within "
                                f"{self.timeout_s:g} s while {what}")
        except Exception as store_exc:  # the store itself is gone: say so
            return RankLost(f"the job's rendezvous store at {self.w.rendezvous} stopped answering while {what} "
                            f"({first_line(store_exc)})")
        detail = f": {first_line(exc)}" if exc is not None else ""
        return RankLost(f"the job failed while {what} (every rank still answers){detail}", named=False)

    # -- waits and collectives ------------------------------------------------------------------------------
    def collective(self, call, what: str):
        """A torch.distributed call; a failure or a timeout (timeout_s) becomes RankLost naming the rank."""
        try:
            return call()
        except RuntimeError as exc:  # gloo: a peer closed its connection, or the timeout passed
            raise self.diagnose(what, exc) from None

    def wait_all(self, tag: str, what: str) -> None:
        """A barrier on the store with no time limit while every rank is alive (an eviction or a dataset may take
        long) and timeout_s once one stops beating."""
        key = f"{KEY}at/{tag}"
        self.store.add(key, 1)
        self.wait_for(lambda: self.store.add(key, 0) >= self.w.world_size, what)

    def wait_for(self, ready, what: str, ranks: list[int] | None = None) -> None:
        self._seen.clear()
        checked = time.monotonic()
        try:
            while not ready():
                time.sleep(POLL_S)
                if time.monotonic() - checked >= BEAT_S:
                    checked = time.monotonic()
                    if self._failed() or self._lost(ranks):
                        raise self.diagnose(what)
        except RankLost:
            raise
        except RuntimeError as exc:
            raise self.diagnose(what, exc) from None

    def publish(self, name: str, value: dict) -> None:
        self.store.set(f"{KEY}{name}", json.dumps(value))

    def receive(self, name: str, what: str) -> dict:
        """A value rank 0 publishes, waiting for it as long as rank 0 is alive."""
        key = f"{KEY}{name}"
        self.wait_for(lambda: self.store.check([key]), what, ranks=[0])
        return json.loads(self.store.get(key))

    def step(self) -> float:
        """The per-step allreduce (the gradient's stand-in); returns the seconds it waited."""
        t = time.perf_counter()
        self.collective(lambda: self.dist.all_reduce(self._grad), f"at step {self.steps + 1}")
        self.steps += 1
        return time.perf_counter() - t

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):  # leaving a job that already broke
            self.dist.destroy_process_group()


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
