"""What a run measured on: the mount under a path, its file system, device, readahead, and the host."""

from __future__ import annotations

import os
import platform
import re
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
        out = {}
        for item in self.options.split(","):
            key, _, value = item.partition("=")
            out[key] = value
        return out


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
        "ram_bytes": mem.total,
        "ram_available_bytes": mem.available,
        "python": sys.version.split()[0],
        "iobench": __version__,
        "root": os.geteuid() == 0,
    }
