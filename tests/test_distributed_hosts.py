"""A distributed run across two hosts: two network namespaces joined by a veth pair stand for two
nodes, each with its own host name (a UTS namespace), its own /etc/hosts (the cluster's name service) and its own
sshfs mount of the same export (a private mount namespace), at the same path on both. The storage server, an sshd,
listens on node A's veth address only, and the rendezvous store and gloo reach each other over the veth pair: no
shared loopback address, no shared mount. torchrun on each node (`--nnodes 2 --node-rank K`, a c10d rendezvous at
node A's address) starts one rank; rank 0 (node A) writes the one result.

Needs root, `ip` (iproute2), `unshare`, sshfs and sshd: skipped, saying which is missing, where namespaces or the
mounts cannot be made. ~15 s on a 2-core VM (each node's torchrun and rank import torch)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import make_dataset

from iobench.result import Result

pytestmark = [pytest.mark.root, pytest.mark.testbed]

FILES = 1200
BATCH = 16
EPOCHS = 2
SUBNET = "10.213.0"
SSHD_PORT = 2222  # each namespace has its own ports: nothing else listens there
RDZV_PORT = 29400
RUN_TIMEOUT_S = 180


@dataclass(frozen=True)
class Node:
    name: str  # host name inside its UTS namespace
    ns: str  # network namespace
    dev: str  # its end of the veth pair
    addr: str  # its address on the pair


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, Node]
    export: Path  # the folder sshd serves
    mnt: Path  # where every node mounts it (its own mount, in its own mount namespace)
    key: Path  # the client key every node's sshfs uses
    hosts: Path  # the /etc/hosts every node sees
    sshd_log: Path


def _why_not() -> str | None:
    """Why two hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, mounts)"
    for binary, package in (("ip", "iproute2"), ("unshare", "util-linux"), ("mount", "mount"),
                            ("sshfs", "sshfs"), ("fusermount3", "fuse3"), ("ssh-keygen", "openssh-client"),
                            ("/usr/sbin/sshd", "openssh-server")):
        if shutil.which(binary) is None:
            return f"{binary} is missing (apt-get install -y {package})"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing: no FUSE here"
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed: a distributed run needs torch.distributed"
    return None


def _sh(*cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _ns_pids(ns: str) -> list[int]:
    out = _sh("ip", "netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split()]


def _empty_ns(ns: str, grace: float = 5.0) -> list[int]:
    """End every process in network namespace `ns` (all of them started by this test: sshd, sshfs and its ssh,
    torchrun, the ranks and their DataLoader workers): SIGTERM, then SIGKILL. Returns those still there."""
    deadline = time.monotonic() + grace
    sig = signal.SIGTERM
    while True:
        pids = _ns_pids(ns)
        if not pids:
            return []
        if time.monotonic() > deadline:
            if sig == signal.SIGKILL:
                return pids
            sig, deadline = signal.SIGKILL, time.monotonic() + grace
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(0.1)


def _sshfs_mounts() -> list[str]:
    return [ln for ln in Path("/proc/mounts").read_text().splitlines() if ln.split()[2] == "fuse.sshfs"]


@contextlib.contextmanager
def two_hosts(work: Path) -> Iterator[Cluster]:
    """Two network namespaces joined by a veth pair, an sshd on node A's address serving `work`/export, and the
    keys and files the nodes need. Afterwards nothing is left: no process in either namespace (so no mount namespace
    made in them, and no sshfs mount, survives), no namespace, no veth."""
    tag = f"{os.getpid() % 100000}"
    a = Node("iob-node-a", f"iob-a-{tag}", f"iob{tag}a", f"{SUBNET}.1")
    b = Node("iob-node-b", f"iob-b-{tag}", f"iob{tag}b", f"{SUBNET}.2")
    made: list[str] = []
    failed = False
    try:
        for node in (a, b):
            res = _sh("ip", "netns", "add", node.ns, check=False)
            if res.returncode != 0:
                pytest.skip(f"cannot make a network namespace here: ip netns add: {res.stderr.strip()}")
            made.append(node.ns)
        res = _sh("ip", "link", "add", a.dev, "type", "veth", "peer", "name", b.dev, check=False)
        if res.returncode != 0:
            pytest.skip(f"cannot make a veth pair here: ip link add: {res.stderr.strip()}")
        for node in (a, b):
            _sh("ip", "link", "set", node.dev, "netns", node.ns)
            _sh("ip", "-n", node.ns, "addr", "add", f"{node.addr}/24", "dev", node.dev)
            _sh("ip", "-n", node.ns, "link", "set", node.dev, "up")
            _sh("ip", "-n", node.ns, "link", "set", "lo", "up")

        ssh = work / "ssh"
        ssh.mkdir()
        for name in ("hostkey", "id"):
            _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"iobench-hosts-{name}", "-f", str(ssh / name))
        auth = ssh / "authorized_keys"
        shutil.copyfile(ssh / "id.pub", auth)
        auth.chmod(0o600)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation folder
        conf = ssh / "sshd_config"
        conf.write_text(
            f"Port {SSHD_PORT}\nListenAddress {a.addr}\nHostKey {ssh}/hostkey\nPidFile {ssh}/sshd.pid\n"
            f"AuthorizedKeysFile {auth}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nX11Forwarding no\nAllowTcpForwarding no\n"
            "PrintMotd no\nUseDNS no\nLogLevel INFO\nSubsystem sftp internal-sftp\n")
        _sh("/usr/sbin/sshd", "-t", "-f", str(conf))
        export, mnt = work / "export", work / "mnt"
        export.mkdir()
        mnt.mkdir()  # on the machine's own disk: each node mounts over it in its own mount namespace
        hosts = work / "hosts"
        hosts.write_text(f"127.0.0.1 localhost\n{a.addr} {a.name}\n{b.addr} {b.name}\n")
        sshd_log = ssh / "sshd.log"
        subprocess.Popen(["ip", "netns", "exec", a.ns, "/usr/sbin/sshd", "-D", "-f", str(conf), "-E", str(sshd_log)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
        deadline = time.monotonic() + 10
        while f"Server listening on {a.addr} port {SSHD_PORT}" not in (
                sshd_log.read_text(errors="replace") if sshd_log.exists() else ""):
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not listen on {a.addr}:{SSHD_PORT} within 10 s: "
                                   f"{sshd_log.read_text(errors='replace') if sshd_log.exists() else 'no log'}")
            time.sleep(0.05)
        yield Cluster((a, b), export, mnt, ssh / "id", hosts, sshd_log)
    except BaseException:
        failed = True
        raise
    finally:
        left = {ns: pids for ns in made if (pids := _empty_ns(ns))}
        for ns in made:
            _sh("ip", "netns", "del", ns, check=False)
        if _sh("ip", "link", "show", a.dev, check=False).returncode == 0:  # moving it into its namespace failed
            _sh("ip", "link", "del", a.dev, check=False)
        names = _sh("ip", "netns", "list", check=False).stdout.split()
        problems = [f"processes left in the namespaces: {left}"] if left else []
        problems += [f"namespace {ns} left" for ns in made if ns in names]
        problems += [f"sshfs mount left: {ln}" for ln in _sshfs_mounts() if str(work) in ln]
        if problems and not failed:  # a failure of the test itself is the one to report
            raise AssertionError("; ".join(problems))


def _node_script(c: Cluster, k: int, out: Path | None, rdzv_id: str, report: Path) -> str:
    """What node `k` runs, in its own network, UTS and mount namespaces: take its host name and name service, mount
    the export, say which namespaces and mount it has, run torchrun, unmount."""
    node, server = c.nodes[k], c.nodes[0]
    q = shlex.quote
    opts = (f"IdentityFile={c.key},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,BatchMode=yes,"
            "LogLevel=ERROR")
    # c10d ignores --node-rank: it numbers the nodes by their --local-addr (sorted), so node A's ranks come first
    run = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{server.addr}:{RDZV_PORT}",
           "--rdzv-id", rdzv_id, "--local-addr", node.addr, "--max-restarts", "0",
           "-m", "iobench", "run", "--mount", str(c.mnt), "--files", str(FILES), "--batch-size", str(BATCH),
           "--workers", "1", "--cache", "cold", "--rate", "400", "--epochs", str(EPOCHS), "--timeout", "60"]
    if out is not None:
        run += ["--out", str(out)]
    return "\n".join([
        "set -e",
        f"hostname {q(node.name)}",
        f"mount --bind {q(str(c.hosts))} /etc/hosts",
        f"sshfs -F /dev/null -p {SSHD_PORT} -o {q(opts)} root@{server.addr}:{q(str(c.export))} {q(str(c.mnt))}",
        # this node's own sshfs mount only (another test bed's may be mounted on the machine too)
        f"{{ hostname; readlink /proc/self/ns/net /proc/self/ns/mnt; grep {q(' ' + str(c.mnt) + ' fuse.sshfs ')}"
        " /proc/self/mounts; }"
        f" > {q(str(report))}",
        "set +e",
        " ".join(q(a) for a in run),
        "rc=$?",
        f"fusermount3 -u {q(str(c.mnt))} || fusermount3 -uz {q(str(c.mnt))}",
        "exit $rc",
    ])


def _tail(path: Path, n: int = 4000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(nothing)"


def _namespaces_in_use() -> set[str]:
    """Every network and mount namespace some process on this machine is in (net:[...], mnt:[...])."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for kind in ("net", "mnt"):
            with contextlib.suppress(OSError):
                found.add(os.readlink(f"/proc/{pid}/ns/{kind}"))
    return found


def test_two_hosts_each_with_its_own_sshfs_mount_make_one_job(tmp_path: Path) -> None:
    why = _why_not()
    if why:
        pytest.skip(why)
    out = tmp_path / "out"
    with two_hosts(tmp_path) as c:
        make_dataset(c.export, FILES)  # on the server's side; rank 0 checks it through its mount
        rdzv_id = f"iobench-hosts-{uuid.uuid4().hex[:8]}"
        procs, logs, reports = [], [], []
        started = time.monotonic()
        try:
            for k, node in enumerate(c.nodes):
                cwd = tmp_path / f"cwd-{node.name}"  # anything a rank writes by default lands here, not in the repo
                cwd.mkdir()
                log, report = tmp_path / f"{node.name}.log", tmp_path / f"{node.name}.ns"
                script = _node_script(c, k, out if k == 0 else None, rdzv_id, report)
                with open(log, "wb") as f:
                    procs.append(subprocess.Popen(
                        ["ip", "netns", "exec", node.ns, "unshare", "--uts", "--mount", "--propagation", "private",
                         "sh", "-c", script], cwd=cwd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                        start_new_session=True))
                logs.append(log)
                reports.append(report)
            codes = []
            for p in procs:
                left = max(1.0, RUN_TIMEOUT_S - (time.monotonic() - started))
                try:
                    codes.append(p.wait(timeout=left))
                except subprocess.TimeoutExpired:
                    codes.append(None)
            took = time.monotonic() - started
        finally:
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        tails = "\n".join(f"--- {node.name} (exit {code}):\n{_tail(log)}"
                          for node, code, log in zip(c.nodes, codes, logs, strict=True))
        assert codes == [0, 0], f"the nodes did not both finish within {RUN_TIMEOUT_S} s:\n{tails}"
        assert (out / "result.json").exists(), f"node A's rank 0 wrote no result in {out}:\n{tails}"
        sshd_log = c.sshd_log.read_text(errors="replace")

    # two hosts: names, network and mount namespaces of their own, and a mount each of the one export
    seen = [r.read_text().split("\n") for r in reports]
    outlived = {s[i] for s in seen for i in (1, 2)} & _namespaces_in_use()
    assert not outlived, f"the nodes' namespaces (and so their sshfs mounts) outlived the test: {outlived}"
    a, b = c.nodes
    assert [s[0] for s in seen] == [a.name, b.name]
    own_net = os.readlink("/proc/self/ns/net")
    assert len({seen[0][1], seen[1][1], own_net}) == 3, seen  # net namespaces: each node's own, neither the test's
    assert seen[0][2] != seen[1][2], seen  # mount namespaces differ
    for s in seen:
        fields = s[3].split()
        assert fields[:3] == [f"root@{a.addr}:{c.export}", str(c.mnt), "fuse.sshfs"], s
    for node in c.nodes:  # the storage server saw each node come from its own address
        assert f"Accepted publickey for root from {node.addr} port" in sshd_log, sshd_log[-2000:]

    res = Result.load(out / "result.json")
    d = res.distributed
    assert d is not None and d.world_size == 2 and d.nodes == 2, d
    assert d.ranks_per_node == {a.name: 1, b.name: 1} and not d.shared_page_cache
    assert d.launcher == "torchrun" and d.rendezvous.startswith(f"{a.addr}:"), d.rendezvous
    assert [(r.rank, r.host) for r in res.ranks] == [(0, a.name), (1, b.name)]
    assert set(d.mounts) == {a.name, b.name}
    for host, line in d.mounts.items():
        assert line.startswith(f"fuse.sshfs root@{a.addr}:{c.export} "), (host, line)
    assert not any("mounts the dataset differently" in w for w in res.warnings), res.warnings
    assert not any("share a host" in w for w in res.warnings), res.warnings
    assert res.remote is True and res.mount.fstype == "fuse.sshfs" and res.host.hostname == a.name
    assert res.complete

    runs = [r for r in res.runs if r.ranks]
    assert len(runs) == EPOCHS
    for run in runs:
        assert run.ranks == 2 and run.read_once is True, run
        assert run.samples == res.dataset.files == FILES
        assert run.bytes == res.dataset.bytes
        mine = [e for rank in res.ranks for e in rank.epochs if e.epoch == run.epoch]
        assert len(mine) == 2 and all(e.complete and e.samples > 0 for e in mine)
        assert sum(e.samples for e in mine) == res.dataset.files
        assert sum(e.bytes for e in mine) == res.dataset.bytes
    for rank in res.ranks:  # a fresh global shuffle each epoch: each rank's share changes
        digests = [e.shard_digest for e in rank.epochs]
        assert len(digests) == EPOCHS and len(set(digests)) == EPOCHS, (rank.rank, digests)
    print(f"two hosts: one job of {EPOCHS} epochs in {took:.1f} s")
