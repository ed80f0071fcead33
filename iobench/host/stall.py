"""A storage that stops answering: `StorageStalled` (exit 3, one line), the time limits of stopping the readers, the
signals held while they are stopped, and whether a process still runs (`alive`). The engines (an epoch's readers),
bounded.py (work outside the epochs), fio and the distributed ranks all raise and handle this one error."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from time import perf_counter
from typing import TYPE_CHECKING

from iobench.errors import STOP_SIGNALS, EnvironmentRefused

if TYPE_CHECKING:
    from iobench.result import Run

DEFAULT_IO_TIMEOUT_S = 60.0  # `iobench run --io-timeout`: no read finished for this long is a stalled storage
GRACE_S = 3.0  # stopping readers: how long those mid-read may take to finish before they are killed
KILL_WAIT_S = 3.0  # then how long killed ones may take to go; those left are stuck in uninterruptible IO


class StorageStalled(EnvironmentRefused):
    """The storage stopped answering: no read finished for `timeout_s` with `pending` reads outstanding. What was
    read is in the epoch's recorder; `stuck` are the pids of processes left behind in uninterruptible IO (they
    end when the storage answers). Exit code 3, one line."""

    def __init__(self, message: str, *, pending: int, timeout_s: float, stuck: tuple[int, ...] = (),
                 left_behind: str | None = None):
        super().__init__(message)
        self.pending = pending
        self.timeout_s = timeout_s
        self.stuck = stuck
        self.left_behind = left_behind
        self.run: Run | None = None  # a training run's partial record (train_epoch), for the caller to keep

    @classmethod
    def after(cls, pending: int, timeout_s: float) -> StorageStalled:
        return cls(f"the storage stopped answering: {pending} read{'s' if pending != 1 else ''} pending for "
                   f"{timeout_s:g} s", pending=pending, timeout_s=timeout_s)

    def with_note(self, note: str) -> StorageStalled:
        """The same stall with `note` appended to its line (where the result was kept)."""
        out = type(self)(f"{self}; {note}", pending=self.pending, timeout_s=self.timeout_s, stuck=self.stuck,
                         left_behind=self.left_behind)
        out.run = self.run
        return out


class Watch:
    """THE one stall watchdog of iobench (docs/architecture.md): nothing moved for `timeout_s`. `check` gets the
    caller's mark of progress: samples finished, or what the work says it has done (never /proc's rchar alone: an S3
    client's event loop reads its own wake-ups while the server sends nothing). `stalled(timeout_s)` makes the error."""

    def __init__(self, timeout_s: float, stalled: Callable[[float], StorageStalled] | None = None):
        self.timeout_s = timeout_s
        self.done: object = -1
        self.since = perf_counter()
        self.stalled = stalled

    def check(self, done: object, pending: Callable[[], int] = lambda: 1) -> None:
        """Raise StorageStalled (with `pending()` reads outstanding) when `done` has not changed for `timeout_s`."""
        now = perf_counter()
        if done != self.done:
            self.done, self.since = done, now
        elif now - self.since >= self.timeout_s:
            raise (self.stalled(self.timeout_s) if self.stalled is not None
                   else StorageStalled.after(pending(), self.timeout_s))


def left_behind_text(pids: tuple[int, ...] | list[int], what: str = "worker process", detail: str = "") -> str | None:
    """The line that reports readers that would not die (`what`: singular, "worker process"), or None when there
    are none; `detail` goes after the count (" (4 threads)")."""
    if not pids:
        return None
    listed = ", ".join(str(p) for p in pids)
    if len(pids) == 1:
        return (f"1 {what}{detail} stuck in uninterruptible IO remains: PID {listed}; it exits when the storage "
                "answers or the mount is force-unmounted")
    return (f"{len(pids)} {what}es{detail} stuck in uninterruptible IO remain: PIDs {listed}; they exit when the "
            "storage answers or the mount is force-unmounted")


def proc_stat(pid: int) -> list[str]:
    """A process's fields in /proc/PID/stat from its state on (field 3; [] when it is gone): the name before them,
    in parentheses, may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].decode("ascii").split()
    except (OSError, IndexError):
        return []


def alive(pid: int) -> bool:
    """The process runs: it is neither gone nor a zombie (only its exit status is left, until it is reaped)."""
    return proc_stat(pid)[:1] not in ([], ["Z"], ["X"])


AFTER_FINISH: list[int] = []  # stop signals that came once the run had finished (run_finished): noted only


def run_finished() -> None:
    """The run's result is complete and its verdict printed: a stop signal from now on is noted in AFTER_FINISH
    (the CLI says it), never raised, so that the run ends as finished (exit 0) with its JSON written."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, lambda signum, frame: AFTER_FINISH.append(signum))


@contextlib.contextmanager
def signals_held(held: list[int]) -> Iterator[None]:
    """Until the block ends, the stop signals (SIGINT, SIGTERM, SIGHUP) are appended to `held` instead of handled;
    `deliver(held)` hands them on. Only the main thread can set handlers; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}
    for sig in STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError):  # not the main interpreter
            old[sig] = signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def deliver(held: list[int]) -> None:
    """Hand the first signal `signals_held` held to its handler now (Ctrl-C: KeyboardInterrupt raised here)."""
    if not held:
        return
    handler = signal.getsignal(held[0])
    if callable(handler):
        handler(held[0], None)
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), held[0])


@contextlib.contextmanager
def stop_signals_deferred(stopping: bool) -> Iterator[None]:
    """While readers are being stopped (a bounded wait), SIGINT and SIGTERM are held instead of raising mid-way:
    a clean-up cut short leaves workers that Python's exit would then wait for forever. When `stopping` (an
    interrupt or a stall is already being handled) a held signal is dropped: the run is ending anyway, and a
    second Ctrl-C must not print a traceback. Otherwise it is delivered once the clean-up is done."""
    held: list[int] = []
    with signals_held(held):
        yield
    if not stopping:
        deliver(held)
