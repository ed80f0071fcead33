"""Errors a user can act on: the CLI prints them as one line, never as a traceback."""

from __future__ import annotations

import errno
import os


class UserError(Exception):
    """Bad input the user must fix (a bad option value, options that do not apply); one line, exit code 2."""


class EnvironmentRefused(UserError):
    """The environment refused what iobench must do there: the mount (or a path on it) is missing or not a folder,
    read-only, full, over quota, or permission was denied. One line, exit code 3."""


# errno values that are the environment refusing, not a mistake on the command line
REFUSALS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT,
                      errno.ENOTDIR})


def explain_oserror(exc: OSError, doing: str) -> UserError:
    """Turn an OSError into a one-line UserError that names what iobench was doing: an EnvironmentRefused for
    the refusals (no space, quota, read-only, permission, missing path)."""
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
    kind = EnvironmentRefused if exc.errno in REFUSALS else UserError
    return kind(f"{doing}:{where}: {reason}")
