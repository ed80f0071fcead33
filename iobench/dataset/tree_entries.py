"""What the scan of an image tree (imagefolder.py) makes of one entry: whether a link may be followed (`Links`)
and an image file's size, its first bytes checked (`image_size`: an open, an fstat and an 8-byte pread in place of a
stat; 25,000 files of 32 KiB on ext4, one thread: warm 0.12 s against 0.11 s for a stat each, cold 2.0 s, the
listing 0.1 s). POSIX_FADV_RANDOM keeps the kernel from reading ahead the rest of each file (cold 2.4 s without)."""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass, field

from iobench.errors import UserError, explain_oserror
from iobench.safefs import refuse

MAGIC = (b"\xff\xd8\xff", b"\x89PNG", b"P6", b"P5", b"BM", b"II*\0", b"MM\0*", b"RIFF")  # JPEG, PNG, PPM, ...
HEAD = 8  # bytes read of each file: the longest magic above
NAMED = 3  # non-images a refusal names


@dataclass
class Links:
    """The links a scan of the tree at `root` (resolved) met whose target is outside it: skipped, or with `follow`
    followed; each counted. A link that stays inside the tree is followed, as ImageFolder follows it."""

    root: str
    follow: bool = False
    skipped: int = 0
    followed: int = 0
    # the parallel walk counts on several threads
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def allow(self, e: os.DirEntry) -> bool:
        """Whether the scan may go where `e` leads (a file to read, a folder to list)."""
        if not e.is_symlink():
            return True
        real = os.path.realpath(e.path)
        if real == self.root or real.startswith(os.path.join(self.root, "")):
            return True
        with self._lock:
            if self.follow:
                self.followed += 1
            else:
                self.skipped += 1
        return self.follow


def image_size(path: str, bad: list[tuple[str, bytes]]) -> int:
    """The size of the file at `path` (links followed), its first bytes checked: a file that is not an image is
    put in `bad` (path, first bytes), for the scan to name once all are seen. Not a regular file: one line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise explain_oserror(exc, "cannot read the dataset") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            refuse(path, st.st_mode, "an image file")
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        head = os.pread(fd, HEAD, 0)
    except OSError as exc:
        raise explain_oserror(exc, "cannot read the dataset") from exc
    finally:
        os.close(fd)
    if not head.startswith(MAGIC):
        bad.append((path, head))
    return st.st_size


def refuse_non_images(bad: list[tuple[str, bytes]], files: int, shown: object) -> None:
    """One line naming the files of the tree that are not images (the first few by path), if any."""
    if not bad:
        return
    named = "; ".join(f"{p} (first bytes {h[:4]!r})" for p, h in sorted(bad)[:NAMED])
    more = f" and {len(bad) - NAMED:,} more" if len(bad) > NAMED else ""
    are = "is not an image" if len(bad) == 1 else "are not images"
    raise UserError(f"{len(bad):,} of the {files:,} files under {shown} {are} (their first bytes "
                    f"checked): {named}{more}; --dataset reads an image tree (an ImageFolder)")


def links_words(skipped: int, followed: int) -> str:
    """What a scan did with links that leave the tree, for its line: "; 2 links out of the tree skipped (...)"."""
    said = [f"{n:,} link{'s' if n != 1 else ''} out of the tree {how}" for n, how in (
        (skipped, "skipped (--follow-links reads them)"), (followed, "followed")) if n]
    return f"; {'; '.join(said)}" if said else ""
