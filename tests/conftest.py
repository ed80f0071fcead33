"""Shared fixtures: small real datasets on the local disk, and (as root) real test-bed file systems."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import cli_server
import pytest
from testbed_fixtures import *  # noqa: F403  (loop XFS, sshfs, GlusterFS, S3 test beds as fixtures)

from iobench import store
from iobench.dataset import GenSpec, Manifest, generate
from iobench.dataset.sizes import parse_dist

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (drop_caches, mounts)")


def pytest_configure(config: pytest.Config) -> None:
    """A suite started as a background job of a non-interactive shell (`scripts/test &`, nohup) has SIGINT ignored,
    and every iobench it starts inherits that: the Ctrl-C tests would wait out their time-outs and leave runs
    behind. The default handler here is what the CLI's children then start with (exec resets it to default)."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # xdist registers its marker only where it is loaded: a test that names its group (below) runs in the serial
    # pass (-p no:xdist) too, without a warning of an unknown mark
    config.addinivalue_line("markers", "xdist_group(name): run on the one parallel worker of the group (xdist)")


@pytest.fixture(scope="session", autouse=True)
def _own_cache_home(tmp_path_factory: pytest.TempPathFactory):
    """The tests' scan caches (and anything else under XDG_CACHE_HOME) go to a folder of their own, not the
    user's ~/.cache; the CLI run in subprocesses inherits it."""
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache-home"))
    yield
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


def first_epoch_kept(out: Path, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    """Wait until the run `proc` writes to `out` has kept an epoch in its result.json (written before the first
    epoch too, with no run: a test that acts "once the run has begun" waits for this, not for the file)."""
    import json
    import time

    deadline = time.monotonic() + timeout_s
    path = out / "result.json"
    while True:
        try:
            if json.loads(path.read_text())["runs"]:
                return
        except (OSError, ValueError, KeyError):
            pass
        if proc.poll() is not None or time.monotonic() >= deadline:
            proc.kill()
            raise AssertionError(f"no epoch kept in {path} (exit {proc.poll()}): {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)


def tree_hashes(*roots: Path) -> dict[str, str]:
    """Every file under `roots` (or each root that is a file) by path, as the SHA-256 of its bytes, links listed as
    where they point, never followed: what a test compares before and after to show nothing of the user's moved."""
    import hashlib

    out = {}
    for root in roots:
        for p in [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]:
            if p.is_symlink():
                out[str(p)] = "-> " + os.readlink(p)
            elif p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def make_dataset(mount: Path, files: int, dist: str = "imagenet", classes: int = 4, seed: int = 0) -> Manifest:
    return generate(store.open(mount), GenSpec(files, parse_dist(dist), classes, seed), threads=4).manifest


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Manifest:
    """300 ImageNet-sized JPEGs on the local disk, shared by read-only tests."""
    return make_dataset(tmp_path_factory.mktemp("mnt"), 300)


def iobench(*args: str, check: bool = False, **kw) -> subprocess.CompletedProcess:
    """The real CLI in a process of its own, as a user runs it, forked from an interpreter that has imported it
    (tests/cli_server.py)."""
    proc = cli_server.run(list(args), **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"iobench {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


# Where a test runs in scripts/test's parallel pass (pytest-xdist, `--dist loadgroup`). A test is sent alone to
# whichever worker is free, but: GlusterFS's and Ceph RGW's tests each go to one worker (one glusterd can run on a
# host, its port fixed; RGW's bed is opt-in and heavy), and the tests of a module that share a module-scoped
# fixture go to one worker (the fixture, a dataset or a run, made once). Session beds (SeaweedFS, sshfs, loop XFS)
# come up on each worker that uses one: seconds, for workers that never wait on each other's bed. A few tests of a
# module that share a session-scoped run (the module's other tests left free to spread) name their group themselves
# (pytest.mark.xdist_group), which xdist reads as it is.
ONE_HOST_BEDS = ("gluster", "rgw")


def xdist_group(item: pytest.Item) -> str | None:
    names = " ".join([*getattr(item, "fixturenames", ()), item.nodeid]).lower()
    bed = next((b for b in ONE_HOST_BEDS if b in names), None)
    if bed is not None:
        return bed
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    if any(d and d[-1].scope in ("module", "class", "package") for d in defs):
        return item.nodeid.split("::")[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """xdist groups (above). The Ceph RGW bed's tests (marker `rgw`) are opt-in: the bed
    takes ~30 s to come up (and a first `up` installs ~235 MB of Ceph packages), more than the default suite's time
    allows. `-m rgw` or IOBENCH_RGW=1 runs them."""
    for item in items if config.pluginmanager.hasplugin("xdist") else ():
        group = xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if "rgw" in (config.getoption("markexpr") or "") or os.environ.get("IOBENCH_RGW") == "1":
        return
    skip = pytest.mark.skip(reason="the Ceph RGW bed is opt-in (~100 s): run with -m rgw or IOBENCH_RGW=1")
    for item in items:
        if "rgw" in item.keywords:
            item.add_marker(skip)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After every fixture is down: no test-bed mount, loop device or daemon may be left behind. Under xdist, checked
    by the controller once every worker has ended (a worker that ends first sees the others' beds still up)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    leftovers = [line for line in Path("/proc/mounts").read_text().splitlines()
                 if "testbed" in line or line.split()[2] in ("fuse.sshfs", "fuse.glusterfs", "fuse.seaweedfs")]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout if os.geteuid() == 0 else ""
    leftovers += [line for line in loops.splitlines() if "testbed" in line]
    if leftovers:
        print("\nleft behind by the test beds:\n" + "\n".join(leftovers))
        session.exitstatus = 1
