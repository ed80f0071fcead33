"""Real file-system test beds for tests: session fixtures around ``scripts/testbed``.

Use them from ``tests/conftest.py`` with ``from testbed_fixtures import *``:

    xfs_mount          XFS on a loop device (--direct-io=on), 2 GiB sparse image
    sshfs_mount        sshfs over 127.0.0.1 to a private sshd
    sshfs_delay_mount  the same through a TCP proxy adding 2 ms each way (~4 ms per round trip)
    gluster_mount      one-node GlusterFS volume, FUSE client

Each yields the mount point as a ``pathlib.Path`` and is shared by the session (gluster: the module): put your files
in a folder of your own under it. Each skips (with the script's one-line error in the reason) when
not root, when a binary is missing, or when ``up`` fails. Only one gluster bed can be up at a time.

For a bed of your own inside a test: ``with testbed("sshfs", tmp_path / "state", delay_ms=1) as mnt:``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "testbed"
UP_TIMEOUT_S = 180

__all__ = [
    "SCRIPT",
    "BedError",
    "bed_state",
    "bed_unavailable",
    "run_testbed",
    "testbed",
    "xfs_mount",
    "sshfs_mount",
    "sshfs_delay_mount",
    "gluster_mount",
]


class BedError(RuntimeError):
    """A test bed could not be brought up or torn down."""


def run_testbed(*args: str, timeout: float = UP_TIMEOUT_S, env: dict | None = None
                ) -> subprocess.CompletedProcess:
    """Run ``scripts/testbed ARGS``; a timeout comes back as exit status 124."""
    cmd = [sys.executable, str(SCRIPT), *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return subprocess.CompletedProcess(cmd, 124, out, err + f"\ntestbed: error: timed out after {timeout:g} s")


def error_line(res: subprocess.CompletedProcess) -> str:
    """The script's one-line error (``testbed: error: ...``), else the last line it wrote."""
    lines = [ln.strip() for ln in (res.stderr or "").splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("testbed: error:") or ln.startswith("testbed up: error:"):
            return ln
    return lines[-1] if lines else f"exit status {res.returncode}, no output"


def bed_unavailable(kind: str) -> str | None:
    """Why test bed `kind` cannot be brought up here (not root, a binary missing, another gluster
    bed up), or None when it can."""
    if not SCRIPT.exists():
        return f"{SCRIPT} is missing"
    res = run_testbed("check", kind, timeout=60)
    return None if res.returncode == 0 else f"testbed {kind} unavailable: {error_line(res)}"


def bed_state(state_dir: str | os.PathLike) -> dict:
    """The JSON state that ``up`` recorded in `state_dir` ({} when there is none)."""
    try:
        return json.loads((Path(state_dir) / "state.json").read_text())
    except FileNotFoundError:
        return {}


def _mounted_under(path: Path) -> bool:
    prefix = str(path).rstrip("/") + "/"
    with open("/proc/mounts") as f:
        return any(line.split()[1].startswith(prefix) for line in f if len(line.split()) > 1)


@contextlib.contextmanager
def testbed(kind: str, state_dir: str | os.PathLike | None = None, *, skip: bool = True,
            **opts) -> Iterator[Path]:
    """Bring test bed `kind` (xfs, sshfs, gluster) up, yield its mount point, and tear it down.

    opts become options of ``scripts/testbed up``: delay_ms=2 -> ``--delay-ms 2``, size="1G",
    read_ahead_kb=0. `state_dir` defaults to a fresh temporary folder. When the bed cannot be brought
    up this calls pytest.skip with the script's error line (skip=False: raises BedError instead).
    A failed ``down`` raises BedError.
    """
    own_tmp = None
    if state_dir is None:
        own_tmp = Path(tempfile.mkdtemp(prefix=f"iobench-testbed-{kind}-"))
        state_dir = own_tmp / "state"
    state_dir = Path(state_dir)
    args = ["up", kind, "--state", str(state_dir)]
    for key, value in opts.items():
        if value is not None:
            args += [f"--{key.replace('_', '-')}", str(value)]
    res = run_testbed(*args)
    if res.returncode != 0:
        if res.returncode == 124:  # a hung up: clear what it made
            run_testbed("down", kind, "--state", str(state_dir))
        if own_tmp is not None and not _mounted_under(own_tmp):
            shutil.rmtree(own_tmp, ignore_errors=True)
        reason = f"testbed {kind} could not be brought up: {error_line(res)}"
        if skip:
            pytest.skip(reason)
        raise BedError(reason)
    mount = Path(res.stdout.strip().splitlines()[-1])
    try:
        yield mount
    finally:
        down = run_testbed("down", kind, "--state", str(state_dir))
        if own_tmp is not None and not _mounted_under(own_tmp):
            shutil.rmtree(own_tmp, ignore_errors=True)
        if down.returncode != 0:
            raise BedError(f"testbed {kind} down failed: {error_line(down)}")


testbed.__test__ = False  # its name starts with "test": keep pytest from collecting it where imported


def _session_bed(tmp_path_factory: pytest.TempPathFactory, kind: str, name: str, **opts) -> Iterator[Path]:
    state_dir = tmp_path_factory.mktemp(f"testbed-{name}") / "state"
    with testbed(kind, state_dir, **opts) as mount:
        yield mount


@pytest.fixture(scope="session")
def xfs_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """XFS on a loop device with direct IO (2 GiB sparse image); readahead as the kernel sets it."""
    yield from _session_bed(tmp_path_factory, "xfs", "xfs")


@pytest.fixture(scope="session")
def sshfs_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """sshfs over 127.0.0.1 to a private sshd: a real network file system (~3 round trips a file)."""
    yield from _session_bed(tmp_path_factory, "sshfs", "sshfs")


@pytest.fixture(scope="session")
def sshfs_delay_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """sshfs through a proxy that delays every chunk 2 ms each way (a ~4 ms round trip)."""
    yield from _session_bed(tmp_path_factory, "sshfs", "sshfs-delay", delay_ms=2)


@pytest.fixture(scope="module")
def gluster_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A one-node GlusterFS volume through its FUSE client (scale-out NAS). Module scope: only one
    glusterd can run, so it goes down before another module's gluster tests bring up their own."""
    yield from _session_bed(tmp_path_factory, "gluster", "gluster")
