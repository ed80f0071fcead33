"""Work on the dataset outside the measured epochs (the metadata phase, cache eviction, the residency check) run in
a child process forked for it, with a watchdog: when the child shows no progress for `timeout_s` (the storage
stopped answering), it is killed and left behind if it does not go (a process stuck in uninterruptible IO cannot
be killed, and threads of iobench's own process stuck there would keep it from exiting), and `StorageStalled`
says which phase stalled. Progress is any change in a small shared array the work writes to (`beat`)."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import pickle
import select
import signal
import warnings
from collections.abc import Callable
from time import perf_counter, sleep
from typing import TypeVar

import numpy as np

from iobench.host.stall import (
    GRACE_S,
    KILL_WAIT_S,
    StorageStalled,
    Watch,
    deliver,
    left_behind_text,
    signals_held,
    stop_signals_deferred,
)

T = TypeVar("T")
TICK_S = 0.2
CHILD_NAME = b"iobench-phase"  # the forked child's name (comm)


def stalled(phase: str, timeout_s: float, stuck: tuple[int, ...] = (), what: str = "process") -> StorageStalled:
    """The one-line error of a stall outside an epoch: "... no answer for 5 s while listing the dataset"."""
    exc = StorageStalled(f"the storage stopped answering: no answer for {timeout_s:g} s while {phase}", pending=1,
                         timeout_s=timeout_s, stuck=stuck)
    exc.left_behind = left_behind_text(stuck, what)
    return exc


def in_child(work: Callable[[np.ndarray], T], timeout_s: float | None, phase: str | Callable[[np.ndarray], str],
             slots: int = 1, name: bytes = CHILD_NAME) -> T:
    """`work(beat)`'s result, `work` run in a forked child; `beat` is an int64 array of `slots` shared with this
    process: any change to it counts as progress. No progress for `timeout_s`: StorageStalled naming `phase` (or
    `phase(beat)`, for work of several parts). An exception in the child is raised here. `timeout_s` None: run
    here, with a private `beat`."""
    if timeout_s is None:
        return work(np.zeros(max(slots, 1), dtype=np.int64))
    mem = mmap.mmap(-1, 8 * max(slots, 1))
    beat = np.frombuffer(mem, dtype=np.int64)

    def outcome() -> tuple:  # pragma: no cover - the child
        try:
            return True, work(beat)
        except BaseException as exc:  # noqa: BLE001 - sent to the parent
            return False, exc

    pid, rfd, held = fork_reporting(outcome, name)
    try:
        deliver(held)  # a Ctrl-C during the fork: here, where the child is stopped
        watch = Watch(timeout_s, lambda waited: stalled(phase if isinstance(phase, str) else phase(beat), waited))
        report = await_report(rfd, lambda: watch.check(beat.tobytes()))
    except BaseException as exc:
        with stop_signals_deferred(stopping=True):
            ended = stop_child(pid, graceful=False)
        if not ended and isinstance(exc, StorageStalled):
            exc.stuck, exc.left_behind = (pid,), left_behind_text([pid], "process")
        raise
    finally:
        os.close(rfd)
    reaped(pid, 5.0)  # it has reported: it is exiting
    if report is None:
        raise RuntimeError("a child process of iobench's ended without reporting (killed?)")
    ok, value = pickle.loads(report)
    if not ok:
        raise value
    return value


# ---------------------------------------------------------------- a watched child: what in_child and the thread
# engine's forked epoch share (how it is set up, how it reports, how it is stopped and reaped)


def fork_child(child: Callable[[], None]) -> tuple[int, list[int]]:
    """Fork; the child runs `child()` and exits (status 0 when it returned). Returns the child's pid and the
    SIGINT/SIGTERM that came during the fork, held: pass them to `deliver()` inside the try that stops the child.
    Held because a signal that lands while Python runs its fork handlers is raised inside one (logging's lock
    release), where Python swallows it: the run would go on as if never asked to stop."""
    held: list[int] = []
    with signals_held(held), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python >= 3.12 warns on fork with threads
        # Blocked across the fork: a SIGTERM the parent sends the child at once (a Ctrl-C during the fork) would
        # otherwise reach the child's inherited Python handler and be run after the child set SIG_DFL, which
        # Python then ignores: the child read its whole epoch as if never stopped. Unblocked in the child once
        # its own dispositions are set, a pending SIGTERM ends it there.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child (coverage does not follow it)
                code = 1
                try:
                    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
                    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # and so is a closed terminal
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's stop (`child` may handle it)
                    if signal.SIGTERM in held:  # came before the fork, while held: the parent stops too
                        os._exit(1)
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                    child()
                    code = 0
                finally:
                    os._exit(code)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # the parent's: a signal held meanwhile arrives now
    return pid, held


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # no C library to ask (not Linux): no names, no death signal
        return None


# Resolved once, on import, in the parent: a child forked from a process with threads (a rank's heartbeat, gloo's)
# then only calls a function already found, and neither imports nor looks a symbol up in its first steps.
_LIBC = _libc()


def set_name(name: bytes) -> None:
    """Name this process (its comm, as ps and top show it); nothing where prctl is not there."""
    if _LIBC is not None:
        _LIBC.prctl(15, name)  # PR_SET_NAME


def die_with_parent() -> None:
    """SIGKILL when the thread that started this process ends (PR_SET_PDEATHSIG): no orphan reading on."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def fork_reporting(work: Callable[[], object], name: bytes) -> tuple[int, int, list[int]]:
    """Fork a child (`fork_child`) that sets itself up, sends `work()`'s value to this process (8
    bytes of length, then its pickle; an exception that does not pickle goes as a RuntimeError with its repr) and
    exits. Returns its pid, the read end of its report (`await_report`) and the signals held during the fork."""
    rfd, wfd = os.pipe()
    parent = os.getpid()

    def child() -> None:  # pragma: no cover - the child (coverage does not follow it)
        os.close(rfd)
        # die with iobench (Linux: SIGKILL when the parent goes, no orphan reading on), take `name` in ps, and hold
        # neither the terminal nor a pipe's reader if left behind
        die_with_parent()
        set_name(name)
        if os.getppid() != parent:
            os._exit(1)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        value = work()
        try:
            report = pickle.dumps(value)
        except Exception:  # noqa: BLE001
            report = pickle.dumps(RuntimeError(repr(value)))
        view = memoryview(len(report).to_bytes(8, "little") + report)
        while view:
            view = view[os.write(wfd, view):]

    pid, held = fork_child(child)
    os.close(wfd)
    return pid, rfd, held


def await_report(rfd: int, poll: Callable[[], None]) -> bytes | None:
    """The pickle the child sends on `rfd` (`fork_reporting`), `poll()` called each TICK_S that brings nothing (to
    judge its progress); None when the child ended without a whole report."""
    report = bytearray()
    while len(report) < 8 or len(report) < 8 + int.from_bytes(report[:8], "little"):
        if not select.select([rfd], [], [], TICK_S)[0]:
            poll()
            continue
        chunk = os.read(rfd, 1 << 16)
        if not chunk:
            return None
        report += chunk
    return bytes(report[8:])


def stop_child(pid: int, graceful: bool) -> bool:
    """Stop a child: SIGTERM first (it finishes what it is at) when `graceful`, then SIGKILL; True once it has
    ended, False when it is still there after KILL_WAIT_S (stuck in uninterruptible IO)."""
    if graceful:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if reaped(pid, GRACE_S):
            return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return reaped(pid, KILL_WAIT_S)


def reaped(pid: int, wait_s: float) -> bool:
    """Wait up to `wait_s` for the child to end; True once it has been reaped."""
    deadline = perf_counter() + wait_s
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            return True
        if perf_counter() >= deadline:
            return False
        sleep(0.02)
