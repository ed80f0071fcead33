"""Errors a user can act on: the CLI prints them as one line, never as a traceback."""

from __future__ import annotations

import errno
import os


class UserError(Exception):
    """Bad input or an environment problem the user must fix; printed as one line."""


def explain_oserror(exc: OSError, doing: str) -> UserError:
    """Turn an OSError into a one-line UserError that names what iobench was doing."""
    where = f" {exc.filename}" if exc.filename else ""
    hints = {
        errno.ENOSPC: "no space left on the device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EROFS: "the file system is mounted read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
        errno.ENOENT: "no such file or directory",
        errno.ENOTDIR: "not a directory",
        errno.EIO: "I/O error from the storage",
        errno.ESTALE: "stale file handle (the server lost the file)",
    }
    reason = hints.get(exc.errno or 0, exc.strerror or os.strerror(exc.errno or 0))
    return UserError(f"{doing}:{where}: {reason}")
