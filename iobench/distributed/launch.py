"""`iobench run --ranks P`: P ranks on this host through torch's own launcher (`elastic_launch`, as `torchrun
--standalone --nproc-per-node P -m iobench ...`), and the rules of how the job ends that it has no hook for
(docs/distributed.md, "The `--ranks` launcher"). Rank 0 and each rank tell this process things (the result's path,
that it is complete, a pid, held lines) through files in a private folder (IOBENCH_LAUNCH_DIR)."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from iobench.errors import EnvironmentRefused
from iobench.host.stall import alive, proc_stat
from iobench.safefs import write_file

LAUNCH_DIR_ENV = "IOBENCH_LAUNCH_DIR"  # the launcher's private folder, in each rank's environment
LAUNCHER_PID_ENV = "IOBENCH_LAUNCHER_PID"
RESULT = "result"  # rank 0 writes its result.json's path here before its first epoch
COMPLETE = "complete"  # and this once that result is complete
PID = "pid."  # + the rank: its pid, written as it joins (torch's launcher does not say it)
HELD = "held."  # + the rank: the "iobench: ..." lines of a rank other than 0
POLL_S = 0.1
DIAGNOSIS_S = 5.0  # rank 0's diagnosis of a lost rank (job.LOST_CHECK_S) and saving what was gathered
TORCH_STOP = (128 + signal.SIGTERM, -signal.SIGTERM)  # how a rank ends on torch's first stop signal
STOP_CODES = (*TORCH_STOP, -signal.SIGKILL)  # how a rank that torch stopped ends (SIGKILL after the grace)


def grace_s(timeout_s: float) -> int:
    """Seconds a rank gets between SIGTERM and SIGKILL: enough for rank 0 to save (5 to 30, from --timeout)."""
    return max(5, min(int(timeout_s), 30))


# -- the ranks' side -------------------------------------------------------------------------------------------
def launched() -> Path | None:
    """The launcher's folder when this process is a rank of `iobench run --ranks`, else None."""
    d = os.environ.get(LAUNCH_DIR_ENV)
    return Path(d) if d else None


def note(name: str, text: str = "") -> None:
    """Tell the launcher something (RESULT: rank 0's result's path; COMPLETE: that result is complete; PID)."""
    d = launched()
    if d is not None:
        with contextlib.suppress(OSError):  # the launcher is gone: nobody to tell
            write_file(d / name, text)


def complete() -> bool:
    d = launched()
    return d is not None and (d / COMPLETE).exists()


def hold(line: str) -> bool:
    """A rank other than 0 keeps its "iobench: ..." line for the launcher (rank 0 speaks for the job); False where
    this process should say it itself."""
    d, rank = launched(), os.environ.get("RANK", "0")
    if d is None or rank == "0":
        return False
    with contextlib.suppress(OSError), open(d / f"{HELD}{rank}", "a") as f:
        f.write(line.rstrip("\n") + "\n")
    return True


# -- the launcher ----------------------------------------------------------------------------------------------
def launch(ranks: int, argv: list[str], timeout_s: float) -> int:
    """`iobench run --ranks P`: P ranks on this host, each running this same command line; returns the exit code
    (rank 0's, or 3 when a rank was lost and rank 0 could not say so, or 128 + a signal that stopped the job)."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):  # its lines are not ours to show: iobench says how the job ended
            logging.getLogger(name).setLevel(logging.CRITICAL)
    folder = Path(tempfile.mkdtemp(prefix="iobench-ranks-"))
    os.environ.update({LAUNCH_DIR_ENV: str(folder), LAUNCHER_PID_ENV: str(os.getpid()), "IOBENCH_RANKS": str(ranks)})
    if ranks > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: P ranks must not each take every core
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=ranks, run_id=str(uuid.uuid4()),
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=POLL_S,
                          logs_specs=DefaultLogsSpecs(log_dir=str(folder / "torch")),
                          signals_to_handle="SIGQUIT",  # SIGINT, SIGTERM, SIGHUP: this module's handlers
                          shutdown_timeout=grace_s(timeout_s))
    watch = _Watch(ranks, timeout_s, folder)
    got: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        got.append(signum)
        watch.signalled(kill=len(got) > 1)
        raise SignalException(f"iobench got {signal.Signals(signum).name}", sigval=signal.SIGTERM)

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    failures: dict[int, tuple[int, int]] = {}
    try:
        watch.start()
        try:
            elastic_launch(config, sys.executable)("-u", "-m", "iobench", *argv)
        except ChildFailedError as exc:
            failures = {rank: (f.exitcode, f.pid) for rank, f in exc.failures.items()}
        except SignalException:
            pass  # `got` says which
        except (RuntimeError, ValueError, OSError) as exc:  # the rendezvous: its store could not start
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EnvironmentRefused(f"cannot start the ranks' rendezvous store on localhost: {why}") from None
        finally:
            for s in old:  # from here on a signal is only noted: the ranks are gone
                signal.signal(s, lambda signum, frame: got.append(signum))
            watch.finish()
        return _outcome(watch, failures, got, timeout_s, folder)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        shutil.rmtree(folder, ignore_errors=True)


class _Watch(threading.Thread):
    """Beside torch's agent: stops the ranks still running --timeout after rank 0's result is complete (or rank 0
    ended), and continues frozen ranks once the job is ending, so that they act on torch's SIGTERM."""

    def __init__(self, ranks: int, timeout_s: float, folder: Path):
        super().__init__(name="iobench-ranks-watch", daemon=True)
        self.ranks, self.timeout_s, self.folder = ranks, timeout_s, folder
        self.pids: dict[int, int] = {}
        self.ended: dict[int, float] = {}  # rank -> when it was seen gone
        self.stopped: dict[int, str] = {}  # rank -> what it was doing when the watch stopped it ("": running)
        self.ending = False  # a signal came: every rank is being stopped
        self._done = threading.Event()

    def run(self) -> None:
        since: float | None = None  # rank 0's result complete, or rank 0 ended
        kill_at: float | None = None
        while not self._done.wait(POLL_S):
            now = time.monotonic()
            self._look(now)
            done = (self.folder / COMPLETE).exists()
            failed = any(r == 0 and not done or (self.folder / f"{HELD}{r}").exists() for r in self.ended)
            if self.ending or failed:  # torch stops every rank: a frozen one must run to act on it
                self._each(signal.SIGCONT)
            elif since is None and (done or 0 in self.ended):
                since = now
            elif since is not None and kill_at is None and now - since > self.timeout_s:
                for r in self.running():
                    self.stopped[r] = _state(self.pids[r])
                self._each(signal.SIGTERM)
                self._each(signal.SIGCONT)
                kill_at = now + grace_s(self.timeout_s)
            if kill_at is not None and now >= kill_at:
                self._each(signal.SIGKILL)

    def _look(self, now: float) -> None:
        for r in range(self.ranks):
            if r not in self.pids:
                pid = _read(self.folder / f"{PID}{r}")
                if pid and pid.isdigit():
                    self.pids[r] = int(pid)
            # a zombie has ended: torch's agent reaps it on its next look
            if r in self.pids and r not in self.ended and not alive(self.pids[r]):
                self.ended[r] = now

    def running(self) -> list[int]:
        return [r for r in self.pids if r not in self.ended]

    def _each(self, sig: int) -> None:
        for r in self.running():
            with contextlib.suppress(OSError):
                os.killpg(self.pids[r], sig)  # each rank leads its own session: its DataLoader workers too

    def signalled(self, kill: bool) -> None:
        """A stop signal here (in the main thread, before torch's agent sends its SIGTERM)."""
        self.ending = True
        self._each(signal.SIGKILL if kill else signal.SIGCONT)

    def finish(self) -> None:
        self._done.set()
        self.join(1.0)
        self._look(time.monotonic())


def _outcome(watch: _Watch, failures: dict[int, tuple[int, int]], got: list[int], timeout_s: float,
             folder: Path) -> int:
    """The exit code, and the lines that say how the job ended (docs/distributed.md)."""
    host = socket.gethostname()
    codes = {r: code for r, (code, _) in failures.items()}  # a rank that ended with 0 is not among torch's failures
    pids = {**watch.pids, **{r: pid for r, (_, pid) in failures.items()}}

    def where(r: int) -> str:
        return f"rank {r} on {host} (pid {pids[r]})" if r in pids else f"rank {r} on {host}"

    path = _read(folder / RESULT)
    kept = Path(path) if path and Path(path).is_file() else None
    done = kept is not None and (folder / COMPLETE).exists()
    gathered = f" (rank 0 kept what was gathered in {kept})" if kept else " (no result was written)"
    # the rank that ended badly first on its own; after it, torch stopped the others (or the watch did). The watch
    # looks every POLL_S: a rank's end and torch's SIGTERM to the rest can fall in one look, so within a look a rank
    # ended by SIGTERM counts as stopped (torch's SIGKILL comes only after the grace, seconds later)
    own = sorted((watch.ended.get(r, math.inf), codes[r] in TORCH_STOP, r) for r in failures if r not in watch.stopped)
    first = own[0][2] if own else None
    lines: list[str] = []
    if got:
        sig = signal.Signals(got[0])
        said = "interrupted" if sig == signal.SIGINT else f"terminated ({sig.name})"
        what = (f"rank 0's result is complete: {kept}" if done else
                f"rank 0 kept what was gathered in {kept}" if kept else "no result was written")
        lines.append(f"{said}: stopped every rank; {what}")
        code = 128 + sig
    elif done:
        code = max(codes.get(0, 0), 0) if first == 0 else 0  # rank 0 stopped after its result: the result stands
        if first == 0 and codes[0] < 0:
            lines.append(f"warning: {where(0)} {_how(codes[0])} after its result was complete ({kept}): "
                         "the result stands")
        if 0 in watch.stopped:
            state = f" ({watch.stopped[0]})" if watch.stopped[0] else ""
            lines.append(f"warning: {where(0)} did not end within {timeout_s:g} s of its complete result ({kept})"
                         f"{state}: stopped it; the result stands")
        for r in sorted(failures.keys() - {0}):
            if r in watch.stopped:
                state = f" ({watch.stopped[r]})" if watch.stopped[r] else ""
                lines.append(f"warning: {where(r)} did not end within {timeout_s:g} s of rank 0's result{state}: "
                             "stopped it: the result stands")
            elif r == first or codes[r] not in STOP_CODES:  # it ended on its own, not stopped by torch
                lines += [f"warning: {h.removeprefix('iobench: ')}" for h in _held(folder, r)]
                lines.append(f"warning: {where(r)} {_how(codes[r])} after rank 0's result was complete ({kept}): "
                             "the result stands")
    elif first is None or first == 0:
        code = codes.get(0, 0)
        if code < 0:  # killed: it could not say so
            lines.append(f"error: {where(0)} {_how(code)}: the job stopped{gathered}")
            code = 3
    else:  # another rank ended badly first: torch stopped rank 0 before it could say so
        lines += [h.removeprefix("iobench: ") for h in _held(folder, first)]
        late = f", and rank 0 did not end within {timeout_s + DIAGNOSIS_S:g} s of it" if codes[first] > 0 else ""
        lines.append(f"error: {where(first)} {_how(codes[first])}{late}: stopped every rank{gathered}")
        code = 3
    for r in watch.running():
        state = _state(watch.pids[r]) or "in uninterruptible IO"
        lines.append(f"warning: {where(r)} did not end after SIGKILL ({state}): left behind; it ends when its IO "
                     "returns")
    for line in lines:
        sys.stderr.write(f"iobench: {line}\n")
    sys.stderr.flush()
    return code


def _held(folder: Path, rank: int) -> list[str]:
    return (_read(folder / f"{HELD}{rank}") or "").splitlines()


def _state(pid: int) -> str:
    """What a process is doing, in words, when it is not simply running ("" then)."""
    words = {"T": "stopped (SIGSTOP)", "t": "stopped by a debugger", "D": "in uninterruptible IO"}
    return words.get((proc_stat(pid) or [""])[0], "")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _how(code: int | None) -> str:
    if code is None:
        return "did not end"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with {code}"
