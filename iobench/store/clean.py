"""`iobench clean`: remove iobench's datasets and packs under MOUNT/iobench-data/, and nothing else: only a real
folder directly under it that carries iobench's marker, on open folder descriptors (a link inside unlinked, never
followed; a mount point inside neither entered nor removed; the marker last), and never one being written or run on.
Everything else is listed as kept, untouched."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from contextlib import ExitStack, suppress
from pathlib import Path

from iobench.dataset.folder import DATA_ROOT, MARKER, MARKER_LIMIT, check_mount
from iobench.errors import explain_oserror
from iobench.host.mounts import mount_points
from iobench.safefs import _DIR_FLAGS, WRITER_LOCK, kind_of, open_dir, read_regular
from iobench.sources.pack_folder import PACK_MARKER
from iobench.store.base import Cleaned

RUN_LOCK_SUFFIX = ".lock"  # `<dataset folder>.lock` beside a dataset: held by a run measuring it


def _marker_kind(dir_fd: int, where: Path) -> str | None:
    """"dataset" or "pack" when the folder open as `dir_fd` carries iobench's marker, else None."""
    for name, kind in ((MARKER, "dataset"), (PACK_MARKER, "pack")):
        try:
            data = read_regular(where / name, dir_fd=dir_fd, limit=MARKER_LIMIT)
            obj = json.loads(data)
        except Exception:  # missing, a link or special file, not JSON: not a marker of ours
            continue
        if isinstance(obj, dict) and "iobench" in obj:
            return kind
    return None


def _try_lock(stack: ExitStack, name: str, dir_fd: int) -> bool:
    """flock an existing lock file (never made here, never followed); False when another process holds it."""
    try:
        fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return True  # no lock file: nobody holds it
    stack.callback(os.close, fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        pass
    return True


def _packs(dir_fd: int, where: Path) -> list[str]:
    """The packs in a dataset's `packed/` folder (relative names), for the listing."""
    found = []
    with suppress(OSError):
        pfd = os.open("packed", _DIR_FLAGS, dir_fd=dir_fd)
        try:
            with os.scandir(pfd) as it:
                names = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
            for name in names:
                with suppress(OSError):
                    sub = os.open(name, _DIR_FLAGS, dir_fd=pfd)
                    try:
                        if _marker_kind(sub, where / "packed" / name) == "pack":
                            found.append(f"packed/{name}")
                    finally:
                        os.close(sub)
        finally:
            os.close(pfd)
    return found


def _remove_tree(parent_fd: int, name: str, where: Path, dry_run: bool) -> tuple[int, int, list[str]]:
    """Remove the folder `name` (under `parent_fd`) and what is in it, iteratively, on descriptors: links are
    unlinked, not followed; mount points (another file system, or a bind mount) are left whole. Markers go last in
    each folder. Returns (files, bytes, mount points left)."""
    points = mount_points()
    top = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    dev = os.fstat(top).st_dev
    files = nbytes = 0
    left: list[str] = []

    def listing(fd: int) -> list[os.DirEntry]:
        with os.scandir(fd) as it:
            return sorted(it, key=lambda e: (e.name in (MARKER, PACK_MARKER), e.name), reverse=True)

    # each frame: (parent fd, name in it, its fd, path, entries left to do (popped from the end))
    stack = [(parent_fd, name, top, where, listing(top))]
    try:
        while stack:
            pfd, dname, fd, path, entries = stack[-1]
            if not entries:
                stack.pop()
                os.close(fd)
                if not dry_run:
                    try:
                        os.rmdir(dname, dir_fd=pfd)
                    except OSError as exc:
                        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EBUSY) or not left:
                            raise
                continue
            e = entries.pop()
            if e.is_dir(follow_symlinks=False):
                if str(path / e.name) in points:
                    left.append(str(path / e.name))
                    continue
                sub = os.open(e.name, _DIR_FLAGS, dir_fd=fd)
                if os.fstat(sub).st_dev != dev:
                    os.close(sub)
                    left.append(str(path / e.name))
                    continue
                stack.append((fd, e.name, sub, path / e.name, listing(sub)))
                continue
            st = e.stat(follow_symlinks=False)
            files += 1
            nbytes += st.st_size if stat.S_ISREG(st.st_mode) else 0
            if not dry_run:
                os.unlink(e.name, dir_fd=fd)
    finally:
        for frame in stack:
            with suppress(OSError):
                os.close(frame[2])
    return files, nbytes, left


def clean(mount: Path, *, dry_run: bool = False) -> list[Cleaned]:
    """Remove (or, with dry_run, list) iobench's datasets and packs under mount/iobench-data; see the module."""
    mount = check_mount(mount, writable=not dry_run)
    root = mount / DATA_ROOT
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(st.st_mode):
        return [Cleaned(root, "", False, f"{kind_of(st.st_mode)}, not followed")]
    out: list[Cleaned] = []
    try:
        rfd = open_dir(root)
    except OSError as exc:
        raise explain_oserror(exc, f"cannot list {root}") from exc
    try:
        with os.scandir(rfd) as it:
            entries = sorted(it, key=lambda e: e.name)
        names = {e.name for e in entries}
        for e in entries:
            path = root / e.name
            st = e.stat(follow_symlinks=False)
            if e.name.endswith(RUN_LOCK_SUFFIX) and stat.S_ISREG(st.st_mode) and \
                    e.name[: -len(RUN_LOCK_SUFFIX)] in names:
                continue  # a run's lock beside its dataset: goes with it
            if not stat.S_ISDIR(st.st_mode):
                out.append(Cleaned(path, "", False, f"{kind_of(st.st_mode)}, not iobench's" if
                                   stat.S_ISLNK(st.st_mode) else f"{kind_of(st.st_mode)}, not an iobench folder"))
                continue
            out.append(_clean_one(rfd, e.name, path, dry_run))
    except OSError as exc:
        raise explain_oserror(exc, f"cannot clean {root}") from exc
    finally:
        os.close(rfd)
    return out


def _clean_one(rfd: int, name: str, path: Path, dry_run: bool) -> Cleaned:
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=rfd)
    except OSError as exc:
        return Cleaned(path, "", False, f"cannot open it ({os.strerror(exc.errno or 0)})")
    with ExitStack() as stack:
        stack.callback(os.close, fd)
        kind = _marker_kind(fd, path)
        if kind is None:
            return Cleaned(path, "", False, f"no iobench marker ({MARKER} or {PACK_MARKER})")
        if os.fstat(fd).st_dev != os.fstat(rfd).st_dev or str(path) in mount_points():
            return Cleaned(path, kind, False, "a mount point: another file system")
        if not _try_lock(stack, WRITER_LOCK, fd):
            return Cleaned(path, kind, False, "another iobench is writing it")
        if not _try_lock(stack, name + RUN_LOCK_SUFFIX, rfd):
            return Cleaned(path, kind, False, "another iobench is using it")
        packs = _packs(fd, path) if kind == "dataset" else []
        files, nbytes, left = _remove_tree(rfd, name, path, dry_run)
        if not dry_run and not left:
            with suppress(OSError):
                lock = os.stat(name + RUN_LOCK_SUFFIX, dir_fd=rfd, follow_symlinks=False)
                if stat.S_ISREG(lock.st_mode):
                    os.unlink(name + RUN_LOCK_SUFFIX, dir_fd=rfd)
        return Cleaned(path, kind, True, "", files, nbytes, packs, left)
