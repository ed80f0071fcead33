"""Safe file-system access: how iobench reads and writes the folders it owns (datasets, packs, `clean`) and every
file it writes elsewhere (results, reports, CSV, fio's files, the settings journal: all through `write_file`), so
that a link or special file planted there is never followed, opened or removed, only said in one line: folders
below MOUNT/iobench-data opened relative to their parent with O_NOFOLLOW, files made with O_EXCL|O_NOFOLLOW (or
rewritten after a check that they are regular with one link), markers written under a unique name and renamed into
place. One writer at a time: a `gen` (or `pack`) holds an flock on `iobench-writer.lock` in the folder it writes."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import platform
import re
import secrets
import stat
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import NoReturn

from iobench.errors import EnvironmentRefused, UserError

WRITER_LOCK = "iobench-writer.lock"  # flock-ed by the one process writing a dataset or pack folder

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_LEFTOVER = re.compile(r"^(" + re.escape(WRITER_LOCK) + r"|.+\.\d+-[0-9a-f]+\.tmp)$")  # our lock and temp files


_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a device file"), (stat.S_ISBLK, "a device file"), (stat.S_ISDIR, "a folder"),
          (stat.S_ISREG, "a regular file"))


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def not_followed(path: Path | str, mode: int, expected: str = "a regular file") -> str:
    """How a link or special file where iobench expects one of its files or folders is said (what to do after)."""
    return f"{path} is {kind_of(mode)}, where iobench expects {expected}: iobench does not follow, open or remove it"


def refuse(path: Path | str, mode: int, expected: str = "a regular file") -> NoReturn:
    """Stop with one line: a link or special file where iobench expects one of its files or folders."""
    raise UserError(f"{not_followed(path, mode, expected)}; move it away")


def fmt_bytes(n: float) -> str:
    """A size with a unit that shows it: 512 B, 10.00 kB, 3.42 MB, 1.20 GB (powers of 10)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{int(n):,} B"


def fmt_limit(n: int) -> str:
    """A limit set in binary units is said in them (64 MiB, not 67.11 MB)."""
    return f"{n >> 20:,} MiB" if n and n % (1 << 20) == 0 else fmt_bytes(n)


def open_dir(name: str | Path, *, dir_fd: int | None = None, where: Path | None = None, create: bool = False,
             expected: str = "a folder") -> int:
    """A file descriptor of the folder `name` (relative to `dir_fd`), never following a link at its last
    component; made first when `create`. A link or a file there is a one-line UserError (`where` names it)."""
    if create:
        with suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=dir_fd)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            raise exc from None
        refuse(where or name, st.st_mode, expected)


def _descend(fd: int, parts: Sequence[str], path: Path, *, create: bool, expected: str) -> int | None:
    """Open parts[0]/parts[1]/... below the folder open as `fd` (which this takes over and closes), never following
    a link; None when a part is missing (and not `create`)."""
    for part in parts:
        path = path / part
        try:
            sub = open_dir(part, dir_fd=fd, where=path, create=create, expected=expected)
        except FileNotFoundError:
            os.close(fd)
            if create:
                raise
            return None
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        fd = sub
    return fd


def open_tree(base: Path, parts: Sequence[str], *, create: bool) -> int | None:
    """A descriptor of base/parts[0]/parts[1]/...: `base` is opened as given (the user's path, links and all),
    every part below it without following links (made when `create`). None when a part is missing."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return _descend(fd, parts, Path(base), create=create, expected="a folder")


def _open_rel(root_fd: int, reldir: str, root: Path, *, create: bool) -> int | None:
    """A descriptor of the folder `reldir` (a/b/c) under the folder open as `root_fd`; None when missing."""
    return _descend(os.dup(root_fd), reldir.split("/") if reldir else [], root, create=create,
                    expected="a folder of the dataset")


def read_regular(where: Path, *, dir_fd: int | None = None, limit: int | None = None) -> bytes:
    """The bytes of a regular file, refusing (one line) a link or a special file without opening it (a FIFO
    would block, a device may act on open). With `dir_fd`, `where.name` is read relative to it."""
    name: str | Path = where.name if dir_fd is not None else where
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        refuse(where, st.st_mode)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    return _read_fd(fd, where, limit, "iobench's")


INPUT_LIMIT = 64 << 20  # a result or a workload file is kilobytes: one over 64 MiB is not one


def read_input(path: Path, what: str, limit: int = INPUT_LIMIT) -> bytes:
    """The bytes of a file the user names as input (`what`: "an iobench result", "a workload file"): links are
    followed (the user's own), but what is not a regular file is refused from its stat, never opened (a FIFO
    would block, /dev/zero never ends), and at most `limit` bytes are read. One line, exit 2."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{path} is {kind_of(st.st_mode)}, not a regular file: give {what} file")
    return _read_fd(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), path, limit, what)


def _read_fd(fd: int, where: Path, limit: int | None, what: str) -> bytes:
    """Read the regular file open as `fd` (closed here) to its end, or refuse it past `limit` bytes: its size is
    checked first, and the reading stops at the bound also where the size says nothing (a file of /proc, one that
    grows)."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since its stat
            refuse(where, st.st_mode)
        bound = (1 << 62) if limit is None else limit
        if st.st_size > bound:
            raise UserError(f"{where} holds {fmt_bytes(st.st_size)}: too big to be {what} file (at most "
                            f"{fmt_limit(bound)} is read)")
        parts, got = [], 0
        while got <= bound and (chunk := os.read(fd, min(1 << 22, bound + 1 - got))):
            parts.append(chunk)
            got += len(chunk)
        if got > bound:
            raise UserError(f"{where} holds over {fmt_limit(bound)}: too big to be {what} file (at most that is read)")
        return b"".join(parts)
    finally:
        os.close(fd)


def write_atomic(dir_fd: int, name: str, data: Iterable[bytes], where: Path) -> None:
    """Write `name` in the folder open as `dir_fd` so that a reader never sees half of it: a new file of a unique
    name (O_EXCL|O_NOFOLLOW: no link is followed, two writers never share it), fsync, rename over `name`. A link
    or special file at `name` is reported, not replaced."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            refuse(where, st.st_mode)
    except FileNotFoundError:
        pass
    tmp = f"{name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, _NEW_FILE, 0o644, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as f:
            for chunk in data:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def write_file(path: Path | str, data: str | bytes | Iterable[bytes]) -> None:
    """Write the file `path` (a result, a report, a journal: any output iobench writes outside a dataset) as
    `write_atomic` writes a dataset's: through a temporary file of a unique name beside it, made exclusively and
    never through a link, renamed over `path` once whole, removed on failure. A link or special file at `path` is a
    one-line UserError, left as it is. The folder must exist."""
    path = Path(path)
    chunks: Iterable[bytes] = [data.encode()] if isinstance(data, str) else [data] if isinstance(data, bytes) else data
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_atomic(dfd, path.name, chunks, path)
    finally:
        os.close(dfd)


def write_json_atomic(dir_fd: int, name: str, obj: dict, where: Path) -> None:
    """Write a marker so that a reader never sees half of it (see `write_atomic`)."""
    write_atomic(dir_fd, name, [json.dumps(obj, indent=1).encode()], where)


@contextmanager
def writer_lock(dir_fd: int, where: Path) -> Iterator[None]:
    """Hold the exclusive flock of the folder open as `dir_fd` while writing it: a second writer gets one line
    (EnvironmentRefused, exit code 3) naming the holder, at once. The lock file is removed on release (a writer
    that locked a file removed meanwhile locks the new one). Where the file system has no flock, writing goes on
    (temporary files have unique names, so two writers still cannot trip on each other's)."""
    while True:
        fd = _open_lock(dir_fd, where)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            for _ in range(10):  # the holder writes its pid right after it locks
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                if holder:
                    break
                time.sleep(0.02)
            os.close(fd)
            raise EnvironmentRefused(f"another iobench ({holder or 'pid unknown'}) is writing {where}: wait for it "
                                     "to finish, or stop it, then run this again") from None
        except OSError:
            pass  # no flock here (some FUSE file systems)
        try:
            same = os.stat(WRITER_LOCK, dir_fd=dir_fd, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # its holder removed it as we opened it: lock the one there now
    try:
        with suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {platform.node()}\n".encode(), 0)
        yield
    finally:
        with suppress(OSError):
            os.unlink(WRITER_LOCK, dir_fd=dir_fd)  # still held: whoever opened it retries on a new one
        os.close(fd)


def _open_lock(dir_fd: int, where: Path) -> int:
    try:
        fd = os.open(WRITER_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644,
                     dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EOPNOTSUPP):
            raise
        st = os.stat(WRITER_LOCK, dir_fd=dir_fd, follow_symlinks=False)
        refuse(where / WRITER_LOCK, st.st_mode)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        refuse(where / WRITER_LOCK, st.st_mode)
    return fd


def only_leftovers(dir_fd: int, marker: str) -> bool:
    """Whether the folder holds nothing but what an iobench writer interrupted before its first marker leaves:
    its lock and temporary files (of the marker)."""
    with os.scandir(dir_fd) as it:
        return all(_LEFTOVER.match(e.name) and e.name.startswith((WRITER_LOCK, marker)) for e in it)
