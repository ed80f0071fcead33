"""The CLI in a process of its own, started from an interpreter that has imported iobench (and torch) once.

Each `iobench` process of the suite paid ~0.7 CPU-s to import the package, and a run through DataLoader workers or
torchvision 2-4 more to import torch: about half of the suite's CPU on a 2-core host. Here a server, started once
per pytest process, imports them and forks one child per command: a process of its own with its own pid, the
caller's stdin and pipes for stdout and stderr, its environment, folder, signal dispositions and `sys.argv`, that
runs `python -m iobench.cli` (runpy) and exits with its status; asked, it first joins
cgroups and CPUs (`join`), which all it starts inherits. What a fresh interpreter does differently (the
start-up itself: its imports, their time) is judged by the tests that start one (`subprocess` with
`sys.executable`); `IOBENCH_TEST_FORK=0` starts a fresh interpreter for every command."""

from __future__ import annotations

import atexit
import contextlib
import inspect
import io
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# What a command imports: the package's commands, the run's phases and reports, the S3 clients, torch's DataLoader
# and torchvision's transforms (none of them starts a thread but OpenBLAS's idle pool, which fork leaves behind).
PRELOAD = ("iobench.cli.app", "iobench.cli.run", "iobench.cli.commands", "iobench.session", "iobench.phases.pipeline",
           "iobench.report.html", "iobench.report.markdown", "iobench.report.charts", "iobench.s3.clients",
           "iobench.engines.dataloader", "iobench.engines.batches", "iobench.distributed.job", "torchvision.transforms")


def join(cgroups: list[str], cpus: list[int] | None) -> None:
    """This process (and all it starts) into cgroups (v1: their `tasks`) and onto CPUs, before the command runs."""
    for cg in cgroups:
        with open(os.path.join(cg, "tasks"), "w") as f:
            f.write(str(os.getpid()))
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


SERVER = r"""
import importlib, json, os, runpy, select, signal, socket, struct, sys
""" + inspect.getsource(join) + r"""
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except ImportError:  # torch is optional for some tests' environments
        pass
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(64)
if os.fork():  # the server leaves the test process's children, which some tests list (psutil's children())
    os._exit(0)
print("ready", os.getpid(), flush=True)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the per-request children are reaped by the kernel
while True:
    if sys.stdin in select.select([listener, sys.stdin], [], [])[0]:
        os._exit(0)  # stdin's end: the test process that started the server has gone
    conn, _ = listener.accept()
    if os.fork():
        conn.close()
        continue
    listener.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    req = json.loads(msg)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 16)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        # a fresh interpreter's dispositions: Python's own for SIGINT and SIGPIPE, the rest the system's default
        for sig in range(1, signal.NSIG):
            if sig in (signal.SIGKILL, signal.SIGSTOP):
                continue
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        sys.argv = ["-m", *req["args"]]
        code = 0
        try:  # whatever fails from here is this command's (an exception past it would leave a second server)
            join(req["cgroups"], req["cpus"])
            runpy.run_module("iobench.cli", run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code)
    for fd in fds:
        os.close(fd)
    conn.sendall(struct.pack("q", pid))
    _, status = os.waitpid(pid, 0)
    conn.sendall(struct.pack("q", os.waitstatus_to_exitcode(status)))
    os._exit(0)
"""


class _Server:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="iobench-cli-")
        self.path = os.path.join(self.dir, "s")
        self.env = dict(os.environ)
        self.log = open(os.path.join(self.dir, "log"), "wb")  # noqa: SIM115  (the server's own output, if any)
        # its stdin, a pipe whose end this process holds: the server ends with this process, however it ends
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, self.path, *PRELOAD], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, cwd=self.dir)
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline().split()
        self.proc.wait()
        if ready[:1] != [b"ready"]:
            raise RuntimeError(f"the CLI server did not start: {Path(self.dir, 'log').read_text()[-2000:]}")
        self.pid = int(ready[1])
        atexit.register(self.stop)

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, args: list[str], *, env: dict | None, cwd: str | Path | None, input: str | None, stdin: int | None,
            timeout: float, cgroups: list[str], cpus: list[int] | None) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "iobench.cli", *args]
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if input is not None else (None, None)
        if in_r is not None:
            stdin = in_r
        else:  # as subprocess: the caller's stdin, or /dev/null
            stdin = os.open(os.devnull, os.O_RDONLY) if stdin == subprocess.DEVNULL else os.dup(0)
        req = {"args": list(args), "env": dict(os.environ if env is None else env),
               "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()), "cgroups": cgroups, "cpus": cpus}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout)  # every wait on the server is bounded by the command's time-out
        try:
            conn.connect(self.path)
            socket.send_fds(conn, [json.dumps(req).encode()], [stdin, out_w, err_w])
        finally:
            for fd in (stdin, out_w, err_w):
                os.close(fd)
        if in_w is not None:
            threading.Thread(target=_feed, args=(in_w, input), daemon=True).start()
        pid = _int(conn)
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        sel = selectors.DefaultSelector()
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        try:
            while sel.get_map() and time.monotonic() < deadline:
                for key, _ in sel.select(min(deadline - time.monotonic(), 1.0)):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        sel.unregister(key.fd)
            conn.settimeout(max(deadline - time.monotonic(), 0.01))
            code = _int(conn)
        except (TimeoutError, KeyboardInterrupt) as e:  # as subprocess.run: the command is killed, not left running
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if isinstance(e, KeyboardInterrupt):
                raise
            raise subprocess.TimeoutExpired(argv, timeout, _text(chunks[out_r]), _text(chunks[err_r])) from None
        finally:
            sel.close()
            for fd in chunks:
                os.close(fd)
            conn.close()
        return subprocess.CompletedProcess(argv, code, _text(chunks[out_r]), _text(chunks[err_r]))


def _int(conn: socket.socket) -> int:
    buf = b""
    while len(buf) < 8:
        part = conn.recv(8 - len(buf))
        if not part:
            raise RuntimeError("the CLI server's child ended without a status")
        buf += part
    return int.from_bytes(buf, sys.byteorder, signed=True)


def _feed(fd: int, text: str) -> None:
    try:
        with open(fd, "w", closefd=True) as f:
            f.write(text)
    except BrokenPipeError:
        pass


def _text(chunks: list[bytes]) -> str:
    """As subprocess's text mode decodes: the locale's encoding, universal newlines."""
    return io.TextIOWrapper(io.BytesIO(b"".join(chunks))).read()


_server: _Server | None = None
_lock = threading.Lock()


# Environment variables read as an interpreter or torch starts, not when iobench asks: a command given other values
# than the server started with runs in a fresh interpreter.
AT_START = ("PYTHON", "LC_", "LANG", "OMP_", "MKL_", "OPENBLAS_", "TORCH", "CUDA")


def run(args: list[str], *, env: dict | None = None, cwd: str | Path | None = None, input: str | None = None,
        stdin: int | None = None, timeout: float = 300, cgroups: tuple[Path, ...] = (),
        cpus: list[int] | None = None) -> subprocess.CompletedProcess:
    """`python -m iobench.cli ARGS` with captured text output, as subprocess.run(..., capture_output=True, text=True)
    returns it, through the server (or a fresh interpreter when IOBENCH_TEST_FORK=0, or `env` sets differently
    what an interpreter reads as it starts). `cgroups` and `cpus`: the command runs in those cgroups, on those CPUs,
    from before its first line (its imports, made in the server, are not what a quota there is meant to slow)."""
    global _server
    groups = [str(cg) for cg in cgroups]
    with _lock:
        if _server is None or not _server.alive():
            _server = None if os.environ.get("IOBENCH_TEST_FORK") == "0" else _Server()
        server = _server
    if server is None or (env is not None and _started_apart(env, server.env)):
        return subprocess.run([sys.executable, "-m", "iobench.cli", *args], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=cwd, input=input, stdin=stdin,
                              preexec_fn=(lambda: join(groups, cpus)) if groups or cpus is not None else None)
    return server.run(args, env=env, cwd=cwd, input=input, stdin=stdin, timeout=timeout, cgroups=groups, cpus=cpus)


def _started_apart(env: dict, server_env: dict) -> bool:
    keys = {k for k in (*env, *server_env) if k.startswith(AT_START)}
    return any(env.get(k) != server_env.get(k) for k in keys)
