"""`iobench run --ranks P`: P ranks on this host, started and watched by this process.

It does for one host what torchrun's launcher does (the rendezvous store on a free local port, held here;
torchrun's environment for each rank; each rank in a session of its own, so that a signal to its process group
reaches its DataLoader workers and not this process) and owns how the job ends, so that every way it ends is
bounded and said in one line:

- Rank 0 speaks for the job. Once its result is complete, or once it ended, every other rank gets --timeout to
  end on its own and is then stopped; once rank 0 failed, the others are stopped at once (nothing is left to wait
  for). A rank that ended badly while rank 0 still runs leaves rank 0 time to name it (--timeout and the
  diagnosis); then rank 0 is stopped too.
- Stopping a rank: SIGTERM to its process group, then SIGCONT (a stopped rank must run to act on it), SIGKILL
  after the grace. The ranks know this launcher stopped them (its stopping file exists) and end without a word:
  this process says how the job ended.
- The other ranks' stderr passes through here: their one-line errors ("iobench: ...") are held and shown only
  when rank 0 could not speak (it was killed or stopped), or after its complete result; anything else passes at
  once. Rank 0's stderr is this process's own (its progress bars need the terminal).
- Ctrl-C, SIGTERM or SIGHUP here stops every rank (a second one kills them at once) and ends with 128 + the
  signal, naming where rank 0 kept what was gathered, if it wrote a result.
- Each rank dies with this process should it be killed outright (job.py sets its parent-death signal).

Rank 0 tells this process where its result is (and when it is complete) through files in a private folder
(IOBENCH_LAUNCH_DIR); `note` writes them."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from iobench.errors import EnvironmentRefused
from iobench.safefs import write_file

LAUNCH_DIR_ENV = "IOBENCH_LAUNCH_DIR"  # the launcher's private folder, in each rank's environment
LAUNCHER_PID_ENV = "IOBENCH_LAUNCHER_PID"
RESULT = "result"  # rank 0 writes its result.json's path here before its first epoch
COMPLETE = "complete"  # and this once that result is complete
STOPPING = "stopping"  # made by the launcher before it signals ranks: a SIGTERM then comes from it
POLL_S = 0.1
KILL_WAIT_S = 5.0  # after SIGKILL: a process still there is stuck in uninterruptible IO and is left behind
DIAGNOSIS_S = 5.0  # rank 0's diagnosis of a lost rank (job.LOST_CHECK_S) and saving what was gathered


def grace_s(timeout_s: float) -> int:
    """Seconds a rank gets between SIGTERM and SIGKILL: enough for rank 0 to save (5 to 30, from --timeout)."""
    return max(5, min(int(timeout_s), 30))


# -- the ranks' side -------------------------------------------------------------------------------------------
def launched() -> Path | None:
    """The launcher's folder when this process is a rank of `iobench run --ranks`, else None."""
    d = os.environ.get(LAUNCH_DIR_ENV)
    return Path(d) if d else None


def note(name: str, text: str = "") -> None:
    """Rank 0 tells the launcher something (RESULT: its result's path; COMPLETE: that result is complete)."""

    d = launched()
    if d is not None:
        with contextlib.suppress(OSError):  # the launcher is gone: nobody to tell
            write_file(d / name, text)


def stopping() -> bool:
    """The launcher is stopping the ranks: a SIGTERM now comes from it."""
    d = launched()
    return d is not None and (d / STOPPING).exists()


# -- the launcher ----------------------------------------------------------------------------------------------
@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen
    held: list[str] = field(default_factory=list)  # its "iobench: ..." lines
    ended_at: float | None = None
    stopped: str | None = None  # why the launcher stopped it
    state: str = ""  # what it was doing when stopped (stopped by SIGSTOP, in uninterruptible IO)
    left: bool = False  # still there after SIGKILL

    @property
    def code(self) -> int | None:
        return self.proc.returncode


def launch(ranks: int, argv: list[str], timeout_s: float) -> int:
    """`iobench run --ranks P`: P ranks on this host, each running this same command line; returns the exit code
    (rank 0's, or 3 when a rank was lost and rank 0 could not say so, or 128 + a signal that stopped the job)."""
    from torch.distributed import TCPStore

    folder = Path(tempfile.mkdtemp(prefix="iobench-ranks-"))
    got: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: got.append(signum))
           for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    rs: list[_Rank] = []
    try:
        # torchrun --standalone's store, held here: it outlives any rank, so the others still read why one failed
        try:
            store = TCPStore("localhost", 0, ranks, is_master=True, wait_for_workers=False)
        except (RuntimeError, ValueError) as exc:
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EnvironmentRefused(f"cannot start the ranks' rendezvous store on localhost: {why}") from None
        env = _environment(ranks, store.port, folder)
        for n in range(ranks):
            env.update(RANK=str(n), LOCAL_RANK=str(n), ROLE_RANK=str(n))
            proc = subprocess.Popen([sys.executable, "-u", "-m", "iobench", *argv], env=dict(env),
                                    stdin=subprocess.DEVNULL, stderr=subprocess.PIPE if n else None,
                                    start_new_session=True)
            rs.append(_Rank(n, proc))
            if n:
                threading.Thread(target=_relay, args=(rs[-1],), name=f"iobench-rank-{n}-stderr",
                                 daemon=True).start()
        _watch(rs, got, timeout_s, folder)
        return _outcome(rs, got, timeout_s, folder)
    finally:
        for r in rs:  # anything left in a rank's process group (a worker of a rank that ended) goes with it
            with contextlib.suppress(OSError):
                os.killpg(r.proc.pid, signal.SIGKILL)
        for s, handler in old.items():
            signal.signal(s, handler)
        shutil.rmtree(folder, ignore_errors=True)


def _environment(ranks: int, port: int, folder: Path) -> dict[str, str]:
    """What torchrun's launcher gives each rank (but RANK, LOCAL_RANK, ROLE_RANK), and this launcher's own."""
    env = dict(os.environ)
    if ranks > 1:
        env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: P ranks must not each take every core
    env.update(MASTER_ADDR="localhost", MASTER_PORT=str(port), WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks),
               GROUP_RANK="0", GROUP_WORLD_SIZE="1", ROLE_NAME="default", ROLE_WORLD_SIZE=str(ranks),
               TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0", TORCHELASTIC_RUN_ID=str(uuid.uuid4()),
               TORCHELASTIC_USE_AGENT_STORE="True", IOBENCH_RANKS=str(ranks))
    env[LAUNCH_DIR_ENV] = str(folder)
    env[LAUNCHER_PID_ENV] = str(os.getpid())
    return env


def _relay(r: _Rank) -> None:
    """A rank's stderr (not rank 0's): its one-line errors held (rank 0 names a rank that failed), the rest passed
    on at once; nothing once the launcher stopped it."""
    assert r.proc.stderr is not None
    for raw in iter(r.proc.stderr.readline, b""):
        if r.stopped:
            continue
        line = raw.decode(errors="replace")
        if line.startswith("iobench: "):
            r.held.append(line.rstrip("\n"))
        else:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(line)
                sys.stderr.flush()


def _watch(rs: list[_Rank], got: list[int], timeout_s: float, folder: Path) -> None:
    """Until every rank ended (or was left behind): the rules of the module's docstring."""
    rank0 = rs[0]
    since_result: float | None = None  # rank 0's result complete, or rank 0 ended
    since_failed: float | None = None  # another rank ended badly while rank 0 ran
    kill_at: float | None = None
    signals = 0
    while True:
        now = time.monotonic()
        for r in rs:
            if r.ended_at is None and r.proc.poll() is not None:
                r.ended_at = now
        running = [r for r in rs if r.ended_at is None and not r.left]
        if not running:
            return
        if len(got) > signals:  # a signal here: stop every rank; a second one: kill them now
            signals = len(got)
            if kill_at is None:
                kill_at = _stop(running, folder, f"the launcher got {signal.Signals(got[0]).name}", timeout_s)
            else:
                kill_at = now
        elif kill_at is None:
            if since_result is None and (rank0.ended_at is not None or (folder / COMPLETE).exists()):
                since_result = now
            if since_failed is None and any(r.ended_at is not None and r.code != 0 for r in rs[1:]):
                since_failed = now
            if rank0.ended_at is not None and rank0.code != 0 and not (folder / COMPLETE).exists():
                kill_at = _stop(running, folder, "rank 0 failed", timeout_s)  # the job is over: nothing to wait for
            elif since_result is not None and now - since_result > timeout_s:
                kill_at = _stop(running, folder, f"did not end within {timeout_s:g} s of rank 0's result",
                                timeout_s)
            elif since_failed is not None and now - since_failed > timeout_s + DIAGNOSIS_S:
                kill_at = _stop(running, folder, "rank 0 did not end after another rank did", timeout_s)
        if kill_at is not None and now >= kill_at:
            for r in running:
                with contextlib.suppress(OSError):
                    os.killpg(r.proc.pid, signal.SIGKILL)
                if now >= kill_at + KILL_WAIT_S:
                    r.left = True  # in uninterruptible IO: SIGKILL acts once it returns; said in the outcome
            if now >= kill_at + KILL_WAIT_S:
                continue
        time.sleep(POLL_S)


def _stop(running: list[_Rank], folder: Path, why: str, timeout_s: float) -> float:
    """SIGTERM to each rank's process group, then SIGCONT; returns when SIGKILL is due."""
    with contextlib.suppress(OSError):
        (folder / STOPPING).touch()  # first: a rank that gets the SIGTERM must find it
    for r in running:
        r.stopped, r.state = why, _state(r.proc.pid)
        for sig in (signal.SIGTERM, signal.SIGCONT):
            with contextlib.suppress(OSError):
                os.killpg(r.proc.pid, sig)
    return time.monotonic() + grace_s(timeout_s)


def _state(pid: int) -> str:
    """What a process is doing, in words, when it is not simply running ("" then)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return {"T": "stopped (SIGSTOP)", "t": "stopped by a debugger", "D": "in uninterruptible IO"}.get(fields[0], "")


def _outcome(rs: list[_Rank], got: list[int], timeout_s: float, folder: Path) -> int:
    """The exit code, and the lines that say how the job ended (see the module's docstring)."""
    host = socket.gethostname()

    def where(r: _Rank) -> str:
        return f"rank {r.rank} on {host} (pid {r.proc.pid})"

    path = _read(folder / RESULT)
    kept = Path(path) if path and Path(path).is_file() else None
    complete = kept is not None and (folder / COMPLETE).exists()
    lines: list[str] = []
    rank0 = rs[0]
    if got:
        sig = signal.Signals(got[0])
        said = "interrupted" if sig == signal.SIGINT else f"terminated ({sig.name})"
        what = (f"rank 0's result is complete: {kept}" if complete else
                f"rank 0 kept what was gathered in {kept}" if kept else "no result was written")
        lines.append(f"{said}: stopped every rank; {what}")
        code = 128 + sig
    elif rank0.stopped and not complete:  # another rank ended badly, rank 0 did not end in its time: who went first
        first = min((r for r in rs[1:] if r.ended_at is not None and not r.stopped), key=lambda r: r.ended_at or 0.0)
        lines += [h.removeprefix("iobench: ") for h in first.held]
        lines.append(f"error: {where(first)} {_how(first.code)}, and rank 0 did not end within "
                     f"{timeout_s + DIAGNOSIS_S:g} s of it: stopped every rank"
                     + (f" (rank 0 kept what was gathered in {kept})" if kept else " (no result was written)"))
        code = 3
    else:
        if rank0.stopped:  # its result complete, it did not end: the result stands (its own code is not known)
            code = 0
            lines.append(f"warning: {where(rank0)} did not end within {timeout_s:g} s of its complete result "
                         f"({kept}){f' ({rank0.state})' if rank0.state else ''}: stopped it; the result stands")
        elif rank0.code is not None and rank0.code < 0:  # killed: it could not say so
            code = 3
            lines.append(f"error: {where(rank0)} {_how(rank0.code)}: the job stopped"
                         + (f" (rank 0 kept what was gathered in {kept})" if kept else " (no result was written)"))
        else:
            code = rank0.code or 0
        for r in rs[1:]:
            lost = r.code is not None and r.code < 0 and not r.stopped
            if complete and (r.stopped or lost or r.code):
                how = ((f"did not end within {timeout_s:g} s of rank 0's result"
                        + (f" ({r.state})" if r.state else "") + ": stopped it") if r.stopped else
                       f"{_how(r.code)} after rank 0's result was complete ({kept})")
                lines += [f"warning: {h.removeprefix('iobench: ')}" for h in r.held]
                lines.append(f"warning: {where(r)} {how}: the result stands")
            elif lost and rank0.code is not None and rank0.code >= 0:
                lines.append(f"error: {where(r)} {_how(r.code)}")  # rank 0 saw it stop answering; this says how
                code = code or 3
    for r in rs:
        if r.left:
            lines.append(f"warning: {where(r)} did not end after SIGKILL ({r.state or 'in uninterruptible IO'}): "
                         "left behind; it ends when its IO returns")
    for line in lines:
        sys.stderr.write(f"iobench: {line}\n")
    sys.stderr.flush()
    return code


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
