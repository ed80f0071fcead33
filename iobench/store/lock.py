"""What keeps two iobench processes apart: one run (or pack) per dataset at a time (an flock(2) the kernel releases
when its holder exits, SIGKILL included; the holder writes its pid and command in it so that the one refused can
name it), and a result folder of its own for every run (os.mkdir is exclusive: NAME, NAME-2, ...). A second run
fails at once (DatasetBusy, exit code 3): two runs at once disturb each other's figures, and cold runs drop the page
cache under each other."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from iobench.dataset.folder import DATA_ROOT, MARKER
from iobench.errors import EnvironmentRefused, explain_oserror
from iobench.s3.url import S3Location
from iobench.store.base import Location

STATE_ENV = "IOBENCH_STATE_DIR"  # overrides where the journal and this host's locks live (tests)
LOCK_SUFFIX = ".lock"


class DatasetBusy(EnvironmentRefused):
    """Another iobench process is running on the dataset (exit code 3)."""


def state_dir() -> Path:
    """iobench's own state on this host: /var/lib/iobench as root, else ~/.cache/iobench ($IOBENCH_STATE_DIR)."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    if os.geteuid() == 0:
        return Path("/var/lib/iobench")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "iobench"


def lock_path(folder: Location) -> Path:
    """Where the lock of the dataset in `folder` lives: `<folder>.lock` beside it, on its own file system (a client
    on another host sees it where the file system supports it); in this host's state folder for a dataset iobench
    did not make, one whose parent it cannot write, or one in object storage (S3 has no lock a client could hold
    and lose when it dies)."""
    if isinstance(folder, S3Location):
        digest = hashlib.sha1(f"{folder.endpoint} {folder}".encode()).hexdigest()[:16]
        return state_dir() / "locks" / f"s3-{folder.name}-{digest}{LOCK_SUFFIX}"
    folder = Path(os.path.realpath(folder))
    # os.path.isfile: a folder it may not read (EACCES) is not known to be ours, and is said unreadable where read
    ours = folder.parent.name == DATA_ROOT or os.path.isfile(folder / MARKER)
    if ours:
        try:
            folder.parent.mkdir(exist_ok=True)  # a dataset about to be made: MOUNT/iobench-data may not exist yet
            if os.access(folder.parent, os.W_OK | os.X_OK) and not os.statvfs(folder.parent).f_flag & os.ST_RDONLY:
                return folder.parent / (folder.name + LOCK_SUFFIX)
        except OSError:
            pass  # read-only or not ours to write: this host's lock instead
    digest = hashlib.sha1(str(folder).encode()).hexdigest()[:16]
    return state_dir() / "locks" / f"{folder.name}-{digest}{LOCK_SUFFIX}"


def _holder(fd: int) -> dict:
    """What the process holding the lock wrote in it ({} while it has not yet)."""
    for _ in range(20):  # it writes right after it locks: give it a moment
        try:
            text = os.pread(fd, 65536, 0).decode(errors="replace")
            if text.strip():
                return json.loads(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.025)
    return {}


def _busy(folder: Location, fd: int) -> DatasetBusy:
    h = _holder(fd)
    who = f"pid {h.get('pid', '?')}"
    if h.get("host") and h["host"] != platform.node():
        who += f" on {h['host']}"
    command = " ".join(h.get("command") or []) or "command unknown"
    since = f", since {h['started']}" if h.get("started") else ""
    return DatasetBusy(f"the dataset {folder} is in use by another iobench ({who}: {command}{since}); wait for it "
                       "to finish, or stop it: two runs at once disturb each other's figures")


@contextmanager
def hold(folder: Location, command: list[str] | None = None) -> Iterator[Path]:
    """Hold the dataset's lock for the duration; DatasetBusy (one line naming the holder) when another process
    holds it. Yields the lock file, removed on release."""
    path = lock_path(folder)
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise explain_oserror(exc, f"cannot make the lock for {folder}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            err = _busy(folder, fd)
            os.close(fd)
            raise err from None
        except OSError as exc:
            os.close(fd)
            raise explain_oserror(exc, f"cannot lock {path}") from exc
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file as we opened it: lock the file that is there now
    try:
        info = {"pid": os.getpid(), "host": platform.node(), "command": command or ["iobench", *sys.argv[1:]],
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "dataset": str(folder)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        yield path
    except BaseException:
        # Stopped (Ctrl-C, SIGTERM, the storage stopped answering): the lock file may be on a storage that no
        # longer answers, where an unlink would hang this process in the kernel. Leave it; closing drops the lock,
        # and the next holder rewrites it.
        os.close(fd)
        raise
    with suppress(OSError):
        os.unlink(path)  # still holding it: whoever opened this file retries on the path's new one
    os.close(fd)


def claim_folder(path: Path) -> Path:
    """Make a result folder of our own: `path`, or `path-2`, `path-3`, ... when it exists (os.mkdir is exclusive)."""
    n = 1
    while True:
        p = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            os.makedirs(p)  # the folders above it made as needed; exclusive for `p` itself
            return p
        except FileExistsError:
            n += 1
        except OSError as exc:
            raise explain_oserror(exc, f"cannot make the result folder {p}") from exc
