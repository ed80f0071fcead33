"""Storage that stops answering mid-epoch: the run ends in bounded time with exit code 3, one line
and the partial result kept; readers stuck in uninterruptible IO are left behind, not waited for.

The first tests fake a hung storage with a reader that blocks in Python (no root, ~1-3 s each). The testbed tests hang
a real one: sshfs through the delay proxy, which is stopped with SIGSTOP while `iobench run` reads (the sshfs client
then waits on the server, and readers sit in request_wait_answer: uninterruptible once a request is out). Measured on
a 2-core VM: exit 6.7-8.4 s after the stop with --io-timeout 5 (the 5 s, a 1 s poll, up to 3 s for killed readers
to go); the tests use --io-timeout 3; ~10-13 s a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from conftest import make_dataset, needs_root
from testbed_fixtures import bed_state, mount_source, testbed

from iobench.engines.threads import ThreadEngine
from iobench.host.stall import StorageStalled
from iobench.record.recorder import EpochRecorder
from iobench.sources.files import FileSource

FILES = 400
IO_TIMEOUT_S = 3
EXIT_WITHIN_S = 18  # after the storage stops: the timeout, a poll, the readers killed, the result saved
STALLED = re.compile(rf"iobench: error: the storage stopped answering: \d+ reads? pending for {IO_TIMEOUT_S} s; kept "
                     r"what was measured in (?P<path>\S+/result\.json)")


class HangingSource(FileSource):
    """Real reads of the first `good` samples (in any reader), then every read blocks: a storage that stopped."""

    def __init__(self, manifest, good: int):
        super().__init__(manifest)
        self.good = good

    def reader(self):
        inner, limit, count = super().reader(), self.good, [0]

        class Hanging:
            buffer = inner.buffer

            @property
            def open_ns(self):
                return inner.open_ns

            @property
            def total_ns(self):
                return inner.total_ns

            def read(self, index: int) -> int:
                count[0] += 1
                if count[0] > limit:
                    threading.Event().wait()  # forever (the process is killed)
                return inner.read(index)

        return Hanging()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("hang"), 60, "fixed:8KiB", classes=2)


def test_thread_engine_stall_keeps_what_was_read(dataset):
    rec = EpochRecorder(len(dataset), 2)
    t0 = time.perf_counter()
    with pytest.raises(StorageStalled) as info:
        ThreadEngine(2, io_timeout_s=0.5).epoch(HangingSource(dataset, good=10), np.arange(len(dataset)), rec)
    assert time.perf_counter() - t0 < 5
    # each of the 2 readers (in one forked process) read its 10, then blocked
    assert info.value.pending == 2 and str(info.value) == "the storage stopped answering: 2 reads pending for 0.5 s"
    assert rec.completed() == 20 and int((rec.nbytes >= 0).sum()) == 20 and isinstance(rec.done, list)
    assert not info.value.stuck  # blocked in Python, not in the kernel: killed and gone


def test_dataloader_engine_stall_keeps_what_was_read(dataset):
    pytest.importorskip("torch")
    from iobench.engines.dataloader import DataLoaderEngine

    rec = EpochRecorder(len(dataset), 2)
    engine = DataLoaderEngine(2, batch_size=4, io_timeout_s=1.0)
    t0 = time.perf_counter()
    with pytest.raises(StorageStalled) as info:
        engine.epoch(HangingSource(dataset, good=8), np.arange(len(dataset)), rec)
    assert time.perf_counter() - t0 < 8
    assert 1 <= info.value.pending <= 2
    assert 0 < rec.completed() <= 16 and int((rec.nbytes >= 0).sum()) == rec.completed()
    assert not info.value.stuck and engine.left_behind is None
    engine.close()  # nothing left to stop: returns at once
    rec2 = EpochRecorder(len(dataset), 2)
    engine.epoch(FileSource(dataset), np.arange(len(dataset)), rec2)  # usable again: a new loader
    assert rec2.completed() == len(dataset)
    engine.close()


# ------------------------------------------------------------------------------------ a real storage that hangs


@pytest.fixture(scope="module")
def hung_bed(tmp_path_factory):
    """sshfs with 1 ms added each way and FILES files made on the server's side; yields (folder on the mount, the
    delay proxy's pid, state dir)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (sshfs test bed)")
    state = tmp_path_factory.mktemp("bed-hang") / "state"
    with testbed("sshfs", state, delay_ms=1) as mnt:
        source = mount_source(mnt) or ""  # root@127.0.0.1:/.../export
        assert ":" in source, source
        (Path(source.split(":", 1)[1]) / "t-hang").mkdir(exist_ok=True)
        # `gen --files FILES`'s dataset (one class folder), made in this process: a setup, not what is judged
        make_dataset(Path(source.split(":", 1)[1]) / "t-hang", FILES, classes=1)
        proxy = next(p["pid"] for p in bed_state(state)["procs"] if p["what"] == "proxy")
        yield mnt / "t-hang", proxy
        os.kill(proxy, signal.SIGCONT)  # in case a test stopped short of it


def _reading(proc: subprocess.Popen, timeout: float) -> None:
    """Until the run's readers are up (DataLoader workers, or the thread engine's reader process: each takes its
    name as it starts, so a child of a phase before the epoch, just forked and not yet named, is not taken)."""
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if any(c.name() in ("iobench-worker", "iobench-reader") for c in me.children()):
                time.sleep(0.3)  # a few reads in
                return
        except psutil.Error:
            pass
        time.sleep(0.02)
    raise AssertionError(f"iobench never started reading (exit {proc.poll()})")


def _where(pid: int) -> str:
    """Where a process that did not exit waits, per thread (for the failure message)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out.append(f"{task.name}: {(task / 'stat').read_text().split()[2]} {(task / 'wchan').read_text()}")
    return "; ".join(out) or "gone"

def _await_exit(proc: subprocess.Popen, within_s: float, err_path: Path) -> int:
    """The exit code of `proc`, which must come within `within_s` of the storage stopping."""
    try:
        return proc.wait(timeout=within_s)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"iobench did not exit within {within_s} s of the storage stopping; it waits in "
                             f"{_where(proc.pid)}; stderr:\n{err_path.read_text()}") from None


def _resume(proxy: int, stopped_at: float | None, proc: subprocess.Popen) -> None:
    """Let the storage answer again, and end `proc` if it is still there."""
    if stopped_at is not None:
        os.kill(proxy, signal.SIGCONT)
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)



def _hang_run(bed, tmp_path: Path, engine_args: list[str], interrupts: int = 0) -> tuple[int, float, str, Path]:
    """`iobench run` on the bed; the storage stops once it reads (and `interrupts` Ctrl-Cs follow, 1 s apart).
    Returns exit code, seconds from the stop to the exit, stderr, and the --out folder. The storage answers again
    afterwards, and every reader left behind must then go."""
    folder, proxy = bed
    out = tmp_path / "out"
    err_path = tmp_path / "stderr"
    argv = [sys.executable, "-m", "iobench.cli", "run", "--mount", str(folder), "--files", str(FILES),
            "--io-timeout", str(IO_TIMEOUT_S), *engine_args, "--no-fio", "--no-metadata", "--cache", "cold",
            "--out", str(out)]
    with open(err_path, "w") as err:  # a file, not a pipe: readers left behind hold it open
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    stopped_at = None
    try:
        _reading(proc, timeout=60)
        os.kill(proxy, signal.SIGSTOP)
        stopped_at = time.monotonic()
        for _ in range(interrupts):
            time.sleep(1.0)
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole process group
        code = _await_exit(proc, EXIT_WITHIN_S + 10, err_path)
        took = time.monotonic() - stopped_at
    finally:
        _resume(proxy, stopped_at, proc)
    text = err_path.read_text()
    left = [int(p) for m in re.finditer(r"PIDs? ([\d, ]+);", text) for p in m.group(1).split(", ")]
    deadline = time.monotonic() + 20
    while (alive := [p for p in left if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, f"readers left behind did not go once the storage answered: {alive}"
    return code, took, text, out


def _check_partial(out: Path) -> dict:
    r = json.loads((out / "result.json").read_text())
    assert r["complete"] is False
    last = r["runs"][-1]
    assert last["complete"] is False and last["samples"] < FILES, last
    return r


@pytest.mark.root
@pytest.mark.testbed
@needs_root
@pytest.mark.parametrize("engine_args", [
    pytest.param(["--engine", "dataloader", "--workers", "2", "--batch-size", "8"], id="dataloader"),
    pytest.param(["--engine", "threads", "--threads", "4"], id="threads"),
])
def test_hung_storage_ends_the_run_with_exit_3(hung_bed, tmp_path, engine_args):
    if "dataloader" in engine_args:
        pytest.importorskip("torch")
    code, took, text, out = _hang_run(hung_bed, tmp_path, engine_args)
    assert code == 3, text
    lines = [ln for ln in text.splitlines() if ln.startswith("iobench: error:")]
    assert len(lines) == 1 and STALLED.fullmatch(lines[0]), text
    assert took < EXIT_WITHIN_S, f"{took:.1f} s\n{text}"
    assert "Traceback" not in text, text
    _check_partial(out)


@pytest.mark.root
@pytest.mark.testbed
@needs_root
def test_ctrl_c_twice_on_hung_storage_exits_without_traceback(hung_bed, tmp_path):
    pytest.importorskip("torch")
    code, took, text, out = _hang_run(hung_bed, tmp_path, ["--engine", "dataloader", "--workers", "2",
                                                           "--batch-size", "8"], interrupts=2)
    assert code == 130, text
    assert "Traceback" not in text and "interrupted: kept" in text, text
    assert took < EXIT_WITHIN_S, f"{took:.1f} s\n{text}"
    _check_partial(out)


# ------------------------------------------------------------------- the phases outside the epochs (issue: bounded)


def test_bounded_child_stall_names_the_phase():
    from iobench.host.bounded import in_child

    t0 = time.perf_counter()
    with pytest.raises(StorageStalled) as info:
        in_child(lambda beat: threading.Event().wait(), 0.5, "listing the dataset")
    assert time.perf_counter() - t0 < 5
    assert str(info.value) == "the storage stopped answering: no answer for 0.5 s while listing the dataset"
    assert not info.value.stuck  # blocked in Python: killed and gone
    assert in_child(lambda beat: 7, 0.5, "x") == 7
    with pytest.raises(ZeroDivisionError):
        in_child(lambda beat: 1 // 0, 0.5, "x")


META_STALLED = re.compile(rf"iobench: error: the storage stopped answering: no answer for {IO_TIMEOUT_S} s while "
                          r"(evicting the page cache|listing the dataset|stat of the samples|open\+close of the "
                          r"samples); kept what was measured in (?P<path>\S+/result\.json)")


@pytest.mark.root
@pytest.mark.testbed
@needs_root
def test_hung_storage_in_the_metadata_phase_ends_the_run_with_exit_3(hung_bed, tmp_path):
    """The storage stops as the metadata phase starts (its child process forked): exit 3 in bounded time, one line
    naming the part, the result kept."""
    folder, proxy = hung_bed
    out, err_path = tmp_path / "out", tmp_path / "stderr"
    argv = [sys.executable, "-m", "iobench.cli", "run", "--mount", str(folder), "--files", str(FILES),
            "--io-timeout", str(IO_TIMEOUT_S), "--engine", "threads", "--threads", "2", "--no-fio", "--cache", "cold",
            "--out", str(out)]
    with open(err_path, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    stopped_at = None
    try:
        me, deadline = psutil.Process(proc.pid), time.monotonic() + 60
        while not stopped_at and time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                if any(c.name() == "iobench-phase" for c in me.children()):  # the metadata phase's child
                    os.kill(proxy, signal.SIGSTOP)
                    stopped_at = time.monotonic()
            time.sleep(0.005)
        assert stopped_at, f"iobench never forked (exit {proc.poll()}): {err_path.read_text()}"
        code = _await_exit(proc, 30, err_path)
        took = time.monotonic() - stopped_at
    finally:
        _resume(proxy, stopped_at, proc)
    text = err_path.read_text()
    assert code == 3, text
    lines = [ln for ln in text.splitlines() if ln.startswith("iobench: error:")]
    assert len(lines) == 1 and META_STALLED.fullmatch(lines[0]), text
    assert took < EXIT_WITHIN_S, f"{took:.1f} s\n{text}"
    assert "Traceback" not in text, text
    r = json.loads((out / "result.json").read_text())
    assert r["complete"] is False and r["metadata"] == [] and r["runs"] == []


def test_a_mount_that_stopped_answering_before_the_run_ends_it_with_exit_3(hung_bed, tmp_path):
    """The storage stops before iobench starts (a dead NFS server, here the sshfs proxy stopped): the first thing the
    run asks of the mount is watched, and the run ends in about --io-timeout with one line, exit 3."""
    folder, proxy = hung_bed
    err_path = tmp_path / "stderr"
    os.kill(proxy, signal.SIGSTOP)
    stopped_at, proc = time.monotonic(), None
    try:
        with err_path.open("w") as err:
            proc = subprocess.Popen([sys.executable, "-m", "iobench.cli", "run", "--mount", str(folder), "--files",
                                     str(FILES), "--io-timeout", "3", "--engine", "threads", "--threads", "2",
                                     "--no-fio", "--no-metadata", "--out", str(tmp_path / "out")],
                                    stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        code = _await_exit(proc, 30, err_path)
    finally:
        os.kill(proxy, signal.SIGCONT)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(30)
    text = err_path.read_text()
    assert code == 3 and "the storage stopped answering" in text and "Traceback" not in text, text
    assert time.monotonic() - stopped_at < EXIT_WITHIN_S, text


# ------------------------------------------------------------------------ a signal that lands during a fork

# Python runs its fork handlers (logging's lock release among them) as Python code; a Ctrl-C that lands in one is
# raised there and swallowed ("Exception ignored in ..."), so a run forking per epoch or per phase could go on as if
# never asked to stop (seen: `run --epochs 1000` went on after SIGINT). The hook below sends SIGINT from inside the
# parent's fork handler, on the first fork only: the run must still stop, with its child stopped.
_FORK_SIGNAL = """
import os, signal, sys, time
import numpy as np
from iobench.dataset import Manifest
from iobench.record.recorder import EpochRecorder
from iobench.sources.files import FileSource

sent = []
def hook():
    if not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGINT)
os.register_at_fork(after_in_parent=hook)
manifest = Manifest.load(sys.argv[2])
order = np.tile(np.arange(len(manifest)), 2000)  # long enough that only a stop ends it early
rec = EpochRecorder(len(order), 2)
try:
    if sys.argv[1] == "phase":
        from iobench.host.bounded import in_child
        in_child(lambda beat: time.sleep(60), 30.0, "waiting")
    elif sys.argv[1] == "threads":
        from iobench.engines.threads import ThreadEngine
        ThreadEngine(2, io_timeout_s=30.0).epoch(FileSource(manifest), order, rec)
    else:
        from iobench.engines.dataloader import DataLoaderEngine
        engine = DataLoaderEngine(2, batch_size=4, io_timeout_s=30.0)
        engine.epoch(FileSource(manifest), order, rec)
except KeyboardInterrupt:
    import psutil
    print("stopped", rec.completed(), len(psutil.Process().children()))
    sys.exit(0)
print("went on", rec.completed())
"""


@pytest.mark.parametrize("where", ["phase", "threads", "dataloader"])
def test_ctrl_c_during_a_fork_stops_the_work(dataset, where):
    if where == "dataloader":
        pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-c", _FORK_SIGNAL, where, str(dataset.root)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("stopped"), proc.stdout + proc.stderr
    done, children = map(int, proc.stdout.split()[1:])
    assert done < 2000 * len(dataset) and children == 0, proc.stdout
    assert "Exception ignored" not in proc.stderr, proc.stderr


def test_readers_are_named_in_ps(dataset):
    """ps and top show what iobench's processes are (the tests above also find the readers by these names)."""
    pytest.importorskip("torch")
    from iobench.engines.dataloader import DataLoaderEngine

    names: set[str] = set()

    def look(_done: int) -> None:
        names.update(c.name() for c in psutil.Process().children())

    order = np.tile(np.arange(len(dataset)), 2000)  # ~1 s from the page cache: a few ticks while the child reads
    ThreadEngine(2, io_timeout_s=30.0).epoch(FileSource(dataset), order, EpochRecorder(len(order), 2), on_tick=look)
    order = order[:len(dataset) * 20]
    with DataLoaderEngine(2, batch_size=4, io_timeout_s=30.0) as engine:
        engine.epoch(FileSource(dataset), order, EpochRecorder(len(order), 2), on_tick=look)
        names.update(c.name() for c in psutil.Process().children())
    assert {"iobench-reader", "iobench-worker"} <= names, names


@pytest.mark.root
@pytest.mark.testbed
@needs_root
def test_hung_storage_ends_a_distributed_run_with_exit_3(hung_bed, tmp_path):
    """Two ranks (--ranks 2) reading the sshfs bed when it stops answering: each rank's watchdog ends its epoch;
    rank 0 says the storage stopped answering, keeps what was gathered (the epoch, incomplete, in a warning) and
    the run exits 3; once the storage answers again nothing of the run is left."""
    pytest.importorskip("torch")
    folder, proxy = hung_bed
    out = tmp_path / "out"
    err_path = tmp_path / "stderr"
    argv = [sys.executable, "-m", "iobench.cli", "run", "--ranks", "2", "--mount", str(folder), "--files",
            str(FILES), "--io-timeout", str(IO_TIMEOUT_S), "--workers", "1", "--batch-size", "8", "--cache", "cold",
            "--rate", "100", "--timeout", "30", "--out", str(out)]
    with open(err_path, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    stopped_at = None
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:  # both ranks' workers are reading
            workers = [p for p in psutil.process_iter(["name", "cmdline"])
                       if p.info["name"] == "iobench-worker" and str(out) in " ".join(p.info["cmdline"] or [])]
            if len(workers) >= 2:
                break
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(proxy, signal.SIGSTOP)
        stopped_at = time.monotonic()
        code = _await_exit(proc, 60, err_path)
        took = time.monotonic() - stopped_at
    finally:
        _resume(proxy, stopped_at, proc)
    text = err_path.read_text()
    assert code == 3, text
    assert "the storage stopped answering" in text and "kept what was gathered in" in text, text
    assert "Traceback" not in text, text
    assert took < 45, f"{took:.1f} s\n{text}"
    r = json.loads((out / "result.json").read_text())
    assert r["complete"] is False and r["distributed"]["world_size"] == 2
    assert any("stopped at epoch 1" in w for w in r["warnings"]), r["warnings"]
    deadline = time.monotonic() + 20
    while (alive := [p for p in psutil.process_iter(["cmdline", "status"])
                     if str(out) in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, f"processes of the run left once the storage answered: {[p.pid for p in alive]}"
