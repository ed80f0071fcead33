"""A rank's membership of a distributed job: its place (torchrun's environment), the process group (gloo), the
rendezvous store, the heartbeat, and the waits and collectives that end in bounded time when another rank is lost
(docs/distributed.md, "When a rank dies or hangs")."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from iobench.distributed.launch import DIAGNOSIS_S, LAUNCHER_PID_ENV, PID, alive, complete, hold, launched, note
from iobench.errors import EnvironmentRefused
from iobench.host.bounded import die_with_parent
from iobench.host.mounts import usable_cpus
from iobench.host.stall import StorageStalled, Watch

BEAT_S = 0.5  # heartbeat period of every rank
LOST_CHECK_S = 3.0  # after a failed collective: how long to watch the heartbeats before naming a lost rank
POLL_S = 0.05  # store-based waits poll this often
KEY = "iobench/"  # every key this module sets in the rendezvous store starts so
STUCK_S = 2.0  # past --io-timeout: the DataLoader's own watchdog had its time; a main thread still in it is blocked
STUCK_SIGNAL = signal.SIGUSR2  # the heartbeat thread interrupts a blocked main thread with it
STUCK_EXIT_S = 5.0  # after that signal: a main thread still blocked is left, the rank exits saying why


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
    host: str


def world() -> World | None:
    """The world this process is a rank of, from torchrun's environment; None outside a distributed launch."""
    env = os.environ
    if "RANK" not in env or "WORLD_SIZE" not in env or "MASTER_ADDR" not in env:
        return None
    return World(rank=int(env["RANK"]), world_size=int(env["WORLD_SIZE"]), local_rank=int(env.get("LOCAL_RANK", 0)),
                 local_world_size=int(env.get("LOCAL_WORLD_SIZE", 1)),
                 rendezvous=f"{env['MASTER_ADDR']}:{env.get('MASTER_PORT', '')}",
                 launcher="iobench --ranks" if env.get("IOBENCH_RANKS") else "torchrun", host=socket.gethostname())


@dataclass(frozen=True)
class Peer:
    """What every rank tells the others when the job starts."""

    rank: int
    local_rank: int
    host: str
    pid: int
    cpus_usable: float
    mnt: str = ""  # its mount namespace: ranks of one host in another one (a container) may see other files


class Job:
    """This rank's membership of the job: the process group (gloo), the rendezvous store, the heartbeat, and the
    waits and collectives that end in bounded time when another rank is lost."""

    def __init__(self, w: World, timeout_s: float):
        import torch
        import torch.distributed as dist

        _launched_rank(w.rank)
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
        self._beats = 0  # this rank's own heartbeat count: BEAT_S periods since it joined
        self._said = False  # fail() says why once: the first reason is the cause
        self.peers: list[Peer] = []
        # rank 0 while an epoch runs (`watch`): the job's progress, counted by the heartbeat from every rank's steps
        self._watch: tuple[int, int, list[int]] | None = None  # the epoch's first step, the batch, each rank's share
        self._keys_seen = False  # every rank has published its steps once (multi_get would wait for a missing key)
        self.cluster: tuple[int, float] | None = None  # samples the ranks have consumed this epoch, when counted
        # this rank's DataLoader, watched by the heartbeat thread (`reading`)
        self._io_timeout_s: float | None = None
        self._in_loader: float | None = None  # since when the main thread waits in the loader (None: not there)
        self._kicked: float | None = None
        self._loader_watch: Watch | None = None
        if threading.current_thread() is threading.main_thread():
            signal.signal(STUCK_SIGNAL, self._interrupted)
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._beating, name="iobench-heartbeat", daemon=True)
        self._beat.start()
        me = Peer(w.rank, w.local_rank, w.host, os.getpid(), usable_cpus(), _mount_namespace())
        gathered: list[Any] = [None] * w.world_size
        self.collective(lambda: dist.all_gather_object(gathered, me), "meeting the other ranks")
        self.peers = gathered
        self._grad = torch.zeros(1)  # the allreduce's payload: its size is not what is measured, its wait is

    # -- who is where ---------------------------------------------------------------------------------------
    @property
    def evictor(self) -> bool:
        """One rank per host evicts that host's page cache for a cold epoch: the lowest rank on it."""
        return min(p.rank for p in self.peers if p.host == self.w.host) == self.w.rank

    @property
    def checks_files(self) -> bool:
        """This rank stats the dataset's files before epoch 1: the lowest rank of each view of the storage (a host
        and mount namespace) but rank 0's, whose files rank 0 checked as it made or reused the dataset."""
        view = (self.w.host, self.peers[self.w.rank].mnt)
        mine = [p.rank for p in self.peers if (p.host, p.mnt) == view]
        return 0 not in mine and min(mine) == self.w.rank

    def where(self, rank: int) -> str:
        p = self.peers[rank] if rank < len(self.peers) else None
        return f"rank {rank} on {p.host} (pid {p.pid})" if p else f"rank {rank}"

    # -- liveness -------------------------------------------------------------------------------------------
    def _beating(self) -> None:
        # The count is this rank's clock: BEAT_S periods since it joined (a late beat adds the periods missed), and
        # every rank joined at once, so how far a rank's count is behind this one's says how long it has been silent.
        start = time.monotonic()
        while not self._stop.wait(max(0.0, start + (self._beats + 1) * BEAT_S - time.monotonic())):
            due = int((time.monotonic() - start) / BEAT_S)
            try:
                self.store.add(f"{KEY}beat/{self.w.rank}", due - self._beats)
                self._beats = due
                self.store.set(f"{KEY}steps/{self.w.rank}", str(self.steps))
            except Exception:  # the store is gone: the job is over; the main thread finds out on its next call
                return
            watch = self._watch
            if watch is not None and due % 2 == 0:  # once a second: one exchange, off the sample path
                with contextlib.suppress(Exception):  # only the display's count: never the heartbeat's end
                    self._count_cluster(watch)
            self._watch_loader()

    def watch(self, shares: list[int] | None, batch: int = 1) -> None:
        """Rank 0, as an epoch starts (each rank's share of its samples) until it ends (None): `cluster` follows the
        job's progress, from the step counts every rank publishes with its heartbeat (steps are in lockstep: the
        allreduce), read once a second."""
        self.cluster = None
        self._watch = None if shares is None else (self.steps, batch, shares)

    def _count_cluster(self, watch: tuple[int, int, list[int]]) -> None:
        first, batch, shares = watch
        keys = [f"{KEY}steps/{r}" for r in range(len(shares))]
        self._keys_seen = self._keys_seen or self.store.check(keys)
        if not self._keys_seen:
            return
        steps = [int(v) for v in self.store.multi_get(keys)]
        done = sum(min(max(s - first, 0) * batch, share) for s, share in zip(steps, shares, strict=True))
        self.cluster = (done, time.perf_counter())

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

    def fail(self, why: str, *, says_who: bool = False) -> None:
        """Tell the other ranks why this one stops (they name it in their error), before leaving the job; the first
        reason given is the one told. `says_who`: `why` names this rank itself, the others say it as it is."""
        if self._said:
            return
        self._said = True
        with contextlib.suppress(Exception):  # the store may be what failed; the others then see the beat stop
            self.store.set(f"{KEY}failed/{self.w.rank}", json.dumps({"why": why[:2000], "says_who": says_who}))

    def _told(self, name: str, skip: int | None = None) -> dict[int, bytes]:
        """What each rank but `skip` set under KEY/name/<rank>, by rank; those that did not, left out."""
        keys = {r: f"{KEY}{name}/{r}" for r in range(self.w.world_size) if r != skip}
        return {r: self.store.get(k) for r, k in keys.items() if self.store.check([k])}

    def diagnose(self, what: str, exc: BaseException | None = None) -> RankLost:
        """Why a wait or collective ended: a rank that said why it failed, else one whose heartbeat stopped,
        else the ranks furthest behind in steps, else the collective's own error."""
        try:
            failed = self._told("failed", skip=self.w.rank)  # this rank's own reason is not news to it
            if failed:
                r = min(failed)
                told = json.loads(failed[r])
                why, says_who = told["why"], told["says_who"]
                return RankLost(why if says_who else f"{self.where(r)} failed while {what}: {why}")
            deadline = time.monotonic() + LOST_CHECK_S
            self._seen.clear()
            while time.monotonic() < deadline:  # a dead or frozen rank stops beating within a few BEAT_S
                self._lost()
                time.sleep(BEAT_S)
            now = time.monotonic()
            stopped = [r for r, (_, t) in self._seen.items() if now - t >= LOST_CHECK_S - BEAT_S]
            if stopped:
                silent = max(LOST_CHECK_S, *((self._beats - self._seen[r][0]) * BEAT_S for r in stopped))
                return RankLost(f"{', '.join(self.where(r) for r in stopped)} stopped answering (no heartbeat for "
                                f"{silent:.0f} s) while {what}")
            steps = {r: int(v) for r, v in self._told("steps").items()}
            low, high = min(steps.values(), default=0), max(steps.values(), default=0)
            if low < high:
                behind = [r for r, s in steps.items() if s == low]
                return RankLost(f"{', '.join(self.where(r) for r in behind)} fell behind (step {low}, the others up "
                                f"to {high}) and did not catch up within {self.timeout_s:g} s while {what}")
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
                    if self._told("failed", skip=self.w.rank) or self._lost(ranks):
                        raise self.diagnose(what)
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

    # -- this rank's DataLoader --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def reading(self, io_timeout_s: float | None) -> Iterator[None]:
        """While this rank reads an epoch: a main thread in the loader (no tick, no batch) for io_timeout_s + STUCK_S
        is blocked where the loader's own watchdog cannot run; the heartbeat thread interrupts it with StorageStalled,
        and should that not free it within STUCK_EXIT_S, the rank fails and exits. Armed at the first tick or batch
        (starting the workers is the loader's to bound)."""
        self._io_timeout_s, self._in_loader, self._kicked, self._loader_watch = io_timeout_s, None, None, None
        try:
            yield
        finally:
            self._io_timeout_s = self._in_loader = None

    def in_loader(self, there: bool = True) -> None:
        """The main thread is (back) in the loader, alive: a tick, or a batch's step done; or out of it (`there`
        false): a batch came, the training loop has it (its allreduce has its own timeout)."""
        self._in_loader = time.monotonic() if there else None

    def _watch_loader(self) -> None:
        """The one stall watchdog (host/stall.Watch) on the main thread's last sign of life in the loader."""
        since, limit = self._in_loader, self._io_timeout_s
        if since is None or limit is None:
            self._loader_watch = None
            return
        self._loader_watch = self._loader_watch or Watch(limit + STUCK_S)
        with contextlib.suppress(StorageStalled):
            return self._loader_watch.check(since)
        if self._kicked is None:
            self._kicked = time.monotonic()
            signal.pthread_kill(threading.main_thread().ident, STUCK_SIGNAL)  # type: ignore[arg-type]
        elif time.monotonic() - self._kicked > STUCK_EXIT_S:  # not freed: leave, saying why (its workers die too)
            try:
                self._stalled()
            except StorageStalled as exc:
                self.fail(str(exc))
                if not hold(f"iobench: error: {exc}"):
                    with contextlib.suppress(OSError):
                        os.write(2, f"iobench: error: {exc}\n".encode())
            self.await_rank_0()
            os._exit(3)

    def _interrupted(self, signum: int, frame: object) -> None:
        """STUCK_SIGNAL, in the main thread: the loader blocked past its time (see `reading`)."""
        if self._in_loader is not None and self._io_timeout_s is not None:  # else a batch came meanwhile
            self._stalled()

    def _stalled(self) -> None:  # raises (docs/errors.md lists what is raised)
        waited, limit = time.monotonic() - (self._in_loader or time.monotonic()), self._io_timeout_s or 0.0
        raise StorageStalled(f"the storage stopped answering: no batch for {waited:.0f} s "
                             f"(--io-timeout {limit:g} s), and this rank's DataLoader is blocked on a worker that "
                             "does not answer", pending=1, timeout_s=limit)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):  # leaving a job that already broke
            self.dist.destroy_process_group()

    def await_rank_0(self) -> None:
        """A rank of `iobench run --ranks` other than 0 that failed: torch's launcher stops every rank the moment
        one ends badly, so this one stays until rank 0 (told why by `fail`) has named it and ended, at most
        --timeout and the diagnosis; the launcher's SIGTERM then ends it quietly."""
        if launched() is None or self.w.rank == 0 or not self.peers:
            return
        deadline = time.monotonic() + self.timeout_s + DIAGNOSIS_S
        while time.monotonic() < deadline and alive(self.peers[0].pid):
            time.sleep(POLL_S)


def _mount_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/mnt")
    except OSError:
        return ""


def _launched_rank(rank: int) -> None:
    """A rank of `iobench run --ranks`: it tells the launcher its pid, dies with the launcher should that be killed
    outright, and leaves without a word when stopped (a SIGTERM here is the launcher's, which says how the job
    ended); rank 0 with its result complete finishes its reports instead."""
    if launched() is None or threading.current_thread() is not threading.main_thread():
        return
    note(f"{PID}{rank}", str(os.getpid()))
    die_with_parent()
    if str(os.getppid()) != os.environ.get(LAUNCHER_PID_ENV):  # the launcher went before that took effect
        os._exit(3)
    before = signal.getsignal(signal.SIGTERM)

    def quietly(signum: int, frame: Any) -> None:
        if rank == 0 and complete():  # another rank ended badly after the result: the result stands
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        if callable(before):
            before(signum, frame)
        elif before != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, quietly)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
