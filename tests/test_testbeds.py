"""scripts/testbed brings real file systems up and takes them down without leftovers.

Needs root and the Debian packages xfsprogs, sshfs, openssh-server, glusterfs-server; skips otherwise.
About 30 s on 2 cores (gluster's glusterd takes ~2 s to start).
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from pathlib import Path

import pytest
from testbed_fixtures import BedError, bed_state, bed_unavailable, run_testbed, testbed

# the *_mount fixtures come from testbed_fixtures through tests/conftest.py

pytestmark = pytest.mark.testbed

FSTYPE = {"xfs": "xfs", "sshfs": "fuse.sshfs", "gluster": "fuse.glusterfs"}


def require(kind: str) -> None:
    why = bed_unavailable(kind)
    if why:
        pytest.skip(why)


def fstype_of(path: Path) -> str | None:
    found = None
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[1] == str(path):
                found = parts[2]
    return found


def mount_source(path: Path) -> str | None:
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[1] == str(path):
                return parts[0]
    return None


def proc_alive(rec: dict) -> bool:
    """Same check as the script: same PID and start time, not a zombie (the VM's init reaps late)."""
    try:
        data = Path(f"/proc/{rec['pid']}/stat").read_text()
    except OSError:
        return False
    fields = data[data.rfind(")") + 2:].split()
    return fields[0] not in "ZXx" and int(fields[19]) == rec["start"]


def procs_mentioning(text: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().decode(errors="replace")
            state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmd and state not in "ZXx" and "pytest" not in cmd:
            out.append(int(d))
    return out


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def roundtrip(mnt: Path) -> None:
    """Real IO through the mount: write files of awkward sizes, fsync, read back cold, rename, delete."""
    d = mnt / "roundtrip"
    d.mkdir()
    rng = random.Random(7)
    sizes = [0, 1, 4095, 4096, 4097, 110 * 1024, 1024 * 1024 + 3]
    data = {f"f{i}.bin": rng.randbytes(n) for i, n in enumerate(sizes)}
    for name, blob in data.items():
        with open(d / name, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
    drop_caches()
    assert sorted(p.name for p in d.iterdir()) == sorted(data)
    for name, blob in data.items():
        assert (d / name).read_bytes() == blob, name
    (d / "f1.bin").rename(d / "renamed.bin")
    (d / "f0.bin").unlink()
    assert (d / "renamed.bin").read_bytes() == data["f1.bin"]
    assert not (d / "f0.bin").exists()


def assert_all_gone(state: dict, state_dir: Path) -> None:
    mount = state["mount"]
    assert fstype_of(Path(mount)) is None, f"{mount} still mounted"
    for rec in state.get("procs", []):
        assert not proc_alive(rec), f"{rec['what']} pid {rec['pid']} still runs"
    assert procs_mentioning(str(state_dir) + "/") == [], "processes naming the state dir still run"
    if state.get("loop"):
        backing = Path(f"/sys/block/{os.path.basename(state['loop'])}/loop/backing_file")
        assert not (backing.exists() and backing.read_text().strip() == state["image"]), "loop still attached"
        assert state["image"] not in losetup_all(), "image still attached to a loop device"
    assert not state_dir.exists(), f"{state_dir} left behind: {list(state_dir.iterdir())}"


def losetup_all() -> str:
    return subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout


@pytest.mark.parametrize("kind", ["xfs", "sshfs", "gluster"])
def test_up_io_down(kind: str, tmp_path: Path) -> None:
    require(kind)
    state_dir = tmp_path / "state"
    t0 = time.monotonic()
    with testbed(kind, state_dir, skip=False) as mnt:
        t_up = time.monotonic() - t0
        state = bed_state(state_dir)
        assert state["complete"] and state["mount"] == str(mnt)
        assert fstype_of(mnt) == FSTYPE[kind]
        for rec in state["procs"]:
            assert proc_alive(rec), rec
        if kind == "xfs":
            assert mount_source(mnt) == state["loop"]
            assert Path(f"/sys/block/{os.path.basename(state['loop'])}/loop/dio").read_text().strip() == "1"
        else:
            assert {r["what"] for r in state["procs"]} >= (
                {"sshd", "sshfs"} if kind == "sshfs" else {"glusterd", "glusterfsd", "glusterfs client"})
        roundtrip(mnt)
        if kind == "sshfs":  # the data really went through sshd into the export folder
            assert (Path(state["export"]) / "roundtrip" / "renamed.bin").stat().st_size == 1
        if kind == "gluster":
            assert (state_dir / "brick" / "roundtrip" / "renamed.bin").stat().st_size == 1
        st = run_testbed("status", kind, "--state", str(state_dir))
        assert st.returncode == 0 and f"{kind}: up {mnt}" in st.stdout
        t1 = time.monotonic()
    t_down = time.monotonic() - t1
    print(f"{kind}: up {t_up:.2f} s, down {t_down:.2f} s")
    assert_all_gone(state, state_dir)
    assert run_testbed("status", kind, "--state", str(state_dir)).returncode == 3


def test_xfs_read_ahead_and_idempotence(tmp_path: Path) -> None:
    require("xfs")
    state_dir = tmp_path / "state"
    with testbed("xfs", state_dir, skip=False, size="1G", read_ahead_kb=0) as mnt:
        state = bed_state(state_dir)
        ra = Path(f"/sys/block/{os.path.basename(state['loop'])}/queue/read_ahead_kb")
        assert ra.read_text().strip() == "0"
        assert os.statvfs(mnt).f_blocks * os.statvfs(mnt).f_frsize > 900 * 1024**2
        again = run_testbed("up", "xfs", "--state", str(state_dir), "--read-ahead-kb", "256")
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip().splitlines()[-1] == str(mnt)
        assert ra.read_text().strip() == "256"  # applied live
        clash = run_testbed("up", "xfs", "--state", str(state_dir), "--size", "2G")
        assert clash.returncode == 1 and "already up" in clash.stderr
        assert bed_state(state_dir)["loop"] == state["loop"]
    assert_all_gone(state, state_dir)
    again = run_testbed("down", "xfs", "--state", str(state_dir))
    assert again.returncode == 0, again.stderr  # down of a bed not up: a no-op


@pytest.mark.parametrize("kind", ["xfs", "sshfs"])
def test_failed_up_cleans_up_after_itself(kind: str, tmp_path: Path) -> None:
    require(kind)
    state_dir = tmp_path / "state"
    res = run_testbed("up", kind, "--state", str(state_dir), env={"IOBENCH_TESTBED_FAIL_AFTER": "mounted"})
    assert res.returncode == 1
    assert res.stdout == ""
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"testbed: error: up {kind} failed: injected failure"), res.stderr
    assert not state_dir.exists()
    assert str(state_dir) not in Path("/proc/mounts").read_text()
    assert str(state_dir) not in losetup_all()
    assert procs_mentioning(str(state_dir) + "/") == []


def test_down_after_crashed_up(tmp_path: Path) -> None:
    require("sshfs")
    state_dir = tmp_path / "state"
    res = run_testbed("up", "sshfs", "--state", str(state_dir), "--delay-ms", "1",
                      env={"IOBENCH_TESTBED_CRASH_AFTER": "mounted"})
    assert res.returncode == 70
    state = bed_state(state_dir)
    assert not state["complete"]
    assert {r["what"] for r in state["procs"]} == {"sshd", "proxy", "sshfs"}
    assert all(proc_alive(r) for r in state["procs"])
    assert fstype_of(Path(state["mount"])) == "fuse.sshfs"
    assert run_testbed("status", "sshfs", "--state", str(state_dir)).returncode == 3  # broken is not up
    down = run_testbed("down", "sshfs", "--state", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert_all_gone(state, state_dir)


def test_sshd_port_taken_before_its_bind_is_picked_again(tmp_path: Path) -> None:
    """A port held by another process's plain listening socket, which the bed is made to take first (the test hook
    standing for a port taken between the pick and the bind): sshd cannot bind it, `up` says so in one line, picks
    again, and sshfs mounts through the sshd that answers, not through the socket that holds the port."""
    require("sshfs")
    state_dir = tmp_path / "state"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        held = holder.getsockname()[1]
        up = run_testbed("up", "sshfs", "--state", str(state_dir), env={"IOBENCH_TESTBED_FIRST_PORT": str(held)})
        try:
            assert up.returncode == 0, up.stderr
            retries = [ln for ln in up.stderr.splitlines() if "picking free ports again" in ln]
            assert len(retries) == 1, up.stderr
            assert retries[0].startswith("testbed: sshd: a port was taken between the pick"), retries
            assert f"port {held}" in retries[0] and "(try 2 of 3)" in retries[0], retries
            state = bed_state(state_dir)
            assert state["sshd_port"] != held and [r["what"] for r in state["procs"]] == ["sshd", "sshfs"]
            roundtrip(Path(state["mount"]))
        finally:
            down = run_testbed("down", "sshfs", "--state", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert_all_gone(state, state_dir)


def _read_all(mnt: Path, names: list[str]) -> float:
    t0 = time.perf_counter()
    for name in names:
        with open(mnt / "cold" / name, "rb") as f:
            while f.read(1 << 20):
                pass
    return time.perf_counter() - t0


def test_delay_proxy_slows_sshfs(tmp_path: Path) -> None:
    """200 small files, one thread, cold: a 2 ms proxy (4 ms round trip) must cost several times more."""
    require("sshfs")
    n, size = 200, 16 * 1024
    names = [f"f{i:04d}.bin" for i in range(n)]
    random.Random(1).shuffle(names)
    with testbed("sshfs", tmp_path / "plain", skip=False) as plain, \
            testbed("sshfs", tmp_path / "delay", skip=False, delay_ms=2) as delayed:
        for state_dir in (tmp_path / "plain", tmp_path / "delay"):
            export = Path(bed_state(state_dir)["export"]) / "cold"
            export.mkdir()
            for name in names:  # written on the server side, never seen by the sshfs client
                (export / name).write_bytes(os.urandom(size))
        drop_caches()
        t_plain = _read_all(plain, names)
        drop_caches()
        t_delay = _read_all(delayed, names)
    msg = (f"{n} files x {size // 1024} KiB, 1 thread, cold: no delay {t_plain:.3f} s ({n / t_plain:.0f} f/s), "
           f"2 ms proxy {t_delay:.3f} s ({n / t_delay:.0f} f/s), {t_delay / t_plain:.1f}x")
    print(msg)
    assert t_delay >= n * 0.004, "each file needs at least one 4 ms round trip: " + msg
    assert t_delay >= 3 * t_plain, msg


def test_gluster_through_delay_proxy(tmp_path: Path) -> None:
    require("gluster")
    state_dir = tmp_path / "state"
    with testbed("gluster", state_dir, skip=False, delay_ms=1) as mnt:
        state = bed_state(state_dir)
        assert fstype_of(mnt) == "fuse.glusterfs"
        assert "proxy" in {r["what"] for r in state["procs"]}
        roundtrip(mnt)
        # the FUSE client talks to the brick through the proxy's port
        port = f"{state['proxy_port']:04X}"
        conns = [ln.split() for ln in Path("/proc/net/tcp").read_text().splitlines()[1:]]
        assert any(c[2].endswith(":" + port) and c[3] == "01" for c in conns), "no connection to the proxy"
    assert_all_gone(state, state_dir)


def test_bed_error_when_not_skipping(tmp_path: Path) -> None:
    require("xfs")
    with pytest.raises(BedError, match="too small"), testbed("xfs", tmp_path / "s", skip=False, size="10M"):
        pass


def test_session_fixtures(xfs_mount: Path, sshfs_mount: Path, sshfs_delay_mount: Path,
                          gluster_mount: Path) -> None:
    """The session fixtures (kept last: they stay up until the session ends)."""
    for mnt, fstype in ((xfs_mount, "xfs"), (sshfs_mount, "fuse.sshfs"),
                        (sshfs_delay_mount, "fuse.sshfs"), (gluster_mount, "fuse.glusterfs")):
        assert fstype_of(mnt) == fstype
        probe = mnt / "test_session_fixtures"
        probe.mkdir(exist_ok=True)
        (probe / "x").write_bytes(b"hello")
        assert (probe / "x").read_bytes() == b"hello"
