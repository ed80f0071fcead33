"""What a run measured on: the mount under a path, its file system, device, readahead, and the host."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from iobench import __version__

_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/mounts."""

    source: str
    path: str
    fstype: str
    options: str

    @classmethod
    def parse(cls, line: str) -> MountEntry:
        # fields are space-separated with spaces/tabs/newlines/backslashes octal-escaped (\040 ...)
        src, path, fstype, opts = (_unescape(f) for f in line.split()[:4])
        return cls(src, path, fstype, opts)

    @property
    def option_map(self) -> dict[str, str]:
        return {key: value for key, _, value in (item.partition("=") for item in self.options.split(","))}


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def mount_of(path: Path, mounts_text: str | None = None) -> MountEntry:
    """The mount that holds path: the longest mount point that is a prefix of its real path."""
    if mounts_text is None:
        mounts_text = Path("/proc/mounts").read_text()
    real = os.path.realpath(path)
    best: MountEntry | None = None
    for line in mounts_text.splitlines():
        if not line.strip():
            continue
        m = MountEntry.parse(line)
        inside = real == m.path or real.startswith(m.path.rstrip("/") + "/")
        # a later line for the same mount point is the one on top (mounted over the earlier one)
        if inside and (best is None or len(m.path) >= len(best.path)):
            best = m
    if best is None:  # pragma: no cover - "/" is always mounted
        raise RuntimeError(f"no mount holds {real}")
    return best


def mount_points() -> set[str]:
    """Every mount point of this process (bind mounts of the same file system included, which st_dev misses)."""
    points = set()
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 4:
                points.add(_unescape(fields[4]))
    return points


@dataclass(frozen=True)
class BlockInfo:
    """The block device behind a mount, when there is one (network and FUSE mounts have none)."""

    device: str | None  # kernel name as in /proc/diskstats (vda, loop3, nvme0n1, dm-0), or None
    read_ahead_kb: int | None  # the backing device info's readahead: what the page cache reads ahead
    bdi: str  # major:minor of the file system's backing device info


def block_info(path: Path) -> BlockInfo:
    """Device and readahead of the file system holding path, from its st_dev and /sys."""
    dev = os.stat(path).st_dev
    bdi = f"{os.major(dev)}:{os.minor(dev)}"
    device: str | None = None
    sys_dev = Path("/sys/dev/block") / bdi
    if sys_dev.exists():
        real = sys_dev.resolve()
        device = real.name
        if (real / "partition").exists():  # readahead lives on the whole disk
            sys_dev = real.parent
    read_ahead = _read_int(Path("/sys/class/bdi") / bdi / "read_ahead_kb")
    if read_ahead is None:
        read_ahead = _read_int(sys_dev / "queue" / "read_ahead_kb")
    return BlockInfo(device, read_ahead, bdi)


def _read_int(p: Path) -> int | None:
    try:
        return int(p.read_text().strip())
    except (OSError, ValueError):
        return None


def host_info() -> dict:
    mem = psutil.virtual_memory()
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "cpus_usable": usable_cpus(),
        "ram_bytes": mem.total,
        "ram_available_bytes": mem.available,
        "python": sys.version.split()[0],
        "iobench": __version__,
        "root": os.geteuid() == 0,
    }


def usable_cpus() -> float:
    """Cores this process may use: its CPU affinity (taskset, cpusets), capped by its cgroup's CPU quota
    (cgroup v2 cpu.max, v1 cpu.cfs_quota_us), as a container's limit. Not the host's core count."""
    cores = float(len(os.sched_getaffinity(0)))
    quota = _cgroup_quota()
    return min(cores, quota) if quota else cores


def _cgroup_quota() -> float | None:
    """The CPU quota of this process's cgroup and its ancestors, in cores; None when unlimited or unreadable."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2: cpu.max is "QUOTA PERIOD" or "max PERIOD"
            base, name = Path("/sys/fs/cgroup"), "cpu.max"
        elif "cpu" in controllers.split(","):
            base, name = Path("/sys/fs/cgroup/cpu"), None
            if not base.is_dir():
                base = Path("/sys/fs/cgroup/cpu,cpuacct")
        else:
            continue
        node = base / path.lstrip("/")
        while True:
            limits += _quota_at(node, name)
            if node == base or base not in node.parents:
                break
            node = node.parent
    return min(limits) if limits else None


def _quota_at(node: Path, v2_file: str | None) -> list[float]:
    try:
        if v2_file:
            max_text, period_text = (node / v2_file).read_text().split()[:2]
            return [] if max_text == "max" else [int(max_text) / int(period_text)]
        quota = int((node / "cpu.cfs_quota_us").read_text())
        period = int((node / "cpu.cfs_period_us").read_text())
        return [quota / period] if quota > 0 and period > 0 else []
    except (OSError, ValueError):
        return []


NFS_KEYS = ("vers", "proto", "rsize", "wsize", "nconnect", "timeo", "retrans", "hard", "soft", "ac", "noac",
            "actimeo", "acregmin", "acregmax", "acdirmin", "acdirmax", "lookupcache", "local_lock", "sec",
            "addr", "clientaddr", "max_connect", "nocto")
FUSE_KEYS = ("max_read", "allow_other", "default_permissions", "user_id")
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "lustre", "gpfs", "beegfs", "ceph", "glusterfs", "9p", "fuse")
FAMILIES = {"nfs": "nfs", "nfs4": "nfs", "lustre": "lustre", "fuse": "fuse"}  # the others: network or local


def fs_family(fstype: str) -> str:
    """'nfs' (nfs, nfs4), 'lustre', 'fuse' (fuse.*), 'network' (other remote), or 'local'."""
    if fstype.startswith(("fuse.", "fuseblk")):
        return "fuse"
    return FAMILIES.get(fstype) or ("network" if fstype in NETWORK_FS else "local")


def fs_details(entry: MountEntry, path: Path) -> tuple[dict[str, str | int | None], list[str]]:
    """The settings that matter for small-file reads on this kind of file system, and the list of
    those that could not be read (with why), so a report never passes off a guess as a setting."""
    family = fs_family(entry.fstype)
    opts = entry.option_map
    details: dict[str, str | int | None] = {"family": family}
    unread: list[str] = []
    if family == "nfs":
        details["server"] = entry.source.rpartition(":")[0] or None
        details.update({key: _num(opts[key]) if opts[key] else "set" for key in NFS_KEYS if key in opts})
        # The kernel lists vers/rsize/wsize/timeo always; nconnect and actimeo only when set.
        details.setdefault("nconnect", "not set (1 connection)")
        if not {"noac", "actimeo", "acregmin", "acregmax", "acdirmin", "acdirmax"} & opts.keys():
            details.setdefault("actimeo", "not set (kernel default: acregmin=3 s .. acdirmax=60 s)")
    elif family == "lustre":
        _lustre(path, details, unread)
    elif family == "fuse":
        details["subtype"] = entry.fstype.partition(".")[2] or opts.get("subtype") or None
        details.update({key: _num(opts[key]) if opts[key] else "set" for key in FUSE_KEYS if key in opts})
    return details, unread


def _num(value: str) -> str | int:
    return int(value) if value.isdigit() else value


def _lustre(path: Path, details: dict, unread: list[str]) -> None:
    """Stripe layout (lfs getstripe) and client readahead/statahead (lctl get_param), when the tools exist."""
    lfs, lctl = shutil.which("lfs"), shutil.which("lctl")
    if lfs is None:
        unread.append("stripe_count, stripe_size: lfs not installed")
    else:
        out = _run([lfs, "getstripe", "-d", str(path)])
        if out is None:
            unread.append("stripe_count, stripe_size: lfs getstripe failed")
        else:
            for key in ("stripe_count", "stripe_size", "pattern", "stripe_offset"):
                m = re.search(rf"{key}:\s*(-?\w+)", out)
                if m:
                    details[key] = _num(m.group(1))
    if lctl is None:
        unread.append("llite readahead/statahead: lctl not installed")
        return
    out = _run([lctl, "get_param", "llite.*.max_read_ahead_mb", "llite.*.max_read_ahead_per_file_mb",
                "llite.*.statahead_max"])
    if out is None:
        unread.append("llite readahead/statahead: lctl get_param failed")
        return
    for line in out.splitlines():  # llite.fsname-ffff8800.max_read_ahead_mb=64
        name, _, value = line.partition("=")
        details[name.rsplit(".", 1)[-1]] = _num(value.strip())


def _run(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def describe(path: Path) -> dict:
    """Everything the result records about the file system holding path (the `mount` object)."""
    entry = mount_of(path)
    blk = block_info(path)
    details, unread = fs_details(entry, path)
    if blk.read_ahead_kb is None:
        unread.append(f"read_ahead_kb: no /sys/class/bdi/{blk.bdi}/read_ahead_kb")
    return {"path": entry.path, "source": entry.source, "fstype": entry.fstype, "options": entry.options,
            "family": details.pop("family"), "device": blk.device, "read_ahead_kb": blk.read_ahead_kb,
            "bdi": blk.bdi, "details": details, "unread": unread}
