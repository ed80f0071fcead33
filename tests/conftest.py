"""Shared fixtures: small real datasets on the local disk, and (as root) real test-bed file systems."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from testbed_fixtures import *  # noqa: F403  (loop XFS, sshfs, GlusterFS test beds as fixtures)

from iobench.dataset import GenSpec, Manifest, generate
from iobench.sizes import parse_dist

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (drop_caches, mounts)")


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


def make_dataset(mount: Path, files: int, dist: str = "imagenet", classes: int = 4, seed: int = 0) -> Manifest:
    return generate(mount, GenSpec(files, parse_dist(dist), classes, seed), threads=4).manifest


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Manifest:
    """300 ImageNet-sized JPEGs on the local disk, shared by read-only tests."""
    return make_dataset(tmp_path_factory.mktemp("mnt"), 300)


def iobench(*args: str, check: bool = False, **kw) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, as a user runs it."""
    proc = subprocess.run([sys.executable, "-m", "iobench.cli", *args], capture_output=True, text=True,
                          timeout=kw.pop("timeout", 300), **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"iobench {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


# scripts/test runs the suite in two passes. First two tests at a time (pytest-xdist, --dist loadgroup): every
# test that brings up a test bed (one glusterd per host; a bed's cgroup caps) or times a stall goes to the "beds"
# group, the distributed ones (many processes, their own stall timeouts) to "ranks"; each group runs on one worker,
# its tests one after another, beside the other group or the rest. test_replay is a bed's too: its warm epochs
# must not meet another test's drop_caches. Then, alone on the machine (-m alone), the tests whose verdict is the
# point: a second test's processes would make the host busy, and the verdict would rightly name the client's CPU.
BED_FIXTURES = {"xfs_mount", "sshfs_mount", "sshfs_delay_mount", "gluster_mount"}
GROUPS = {"beds": ("test_testbeds", "test_hang", "test_distributed_hosts", "test_gen_scale", "test_mitigations",
                   "test_plan", "test_result_load", "test_results_kept", "test_replay"),
          "ranks": ("test_distributed", "test_distributed_faults")}
ALONE = ("test_verdict_limits", "test_distributed_verdict", "test_filesystems")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups as it collects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.path.stem
        if module in ALONE:
            item.add_marker(pytest.mark.alone)
            continue
        group = next((g for g, mods in GROUPS.items() if module in mods), None)
        if group is None and BED_FIXTURES & set(getattr(item, "fixturenames", ())):
            group = "beds"
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After every fixture is down: no test-bed mount, loop device or daemon may be left behind. Under xdist the
    controller checks, once every worker is done (a worker that ends first would see the other's beds)."""
    if hasattr(session.config, "workerinput"):
        return
    leftovers = [line for line in Path("/proc/mounts").read_text().splitlines()
                 if "testbed" in line or line.split()[2] in ("fuse.sshfs", "fuse.glusterfs")]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout if os.geteuid() == 0 else ""
    leftovers += [line for line in loops.splitlines() if "testbed" in line]
    if leftovers:
        print("\nleft behind by the test beds:\n" + "\n".join(leftovers))
        session.exitstatus = 1
