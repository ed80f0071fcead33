"""Errors a user can act on: the CLI prints them as one line, never as a traceback."""

from __future__ import annotations

import errno
import os
import signal

# the exit codes iobench.cli.main maps errors to (besides 0, and 128 + the signal for an interrupted run)
EXIT_NOT_FED = 1  # run --check: the GPUs asked about are not fed
EXIT_USER_CODE = 1  # the user's own code (run --pipeline FILE.py:FUNC) raised
EXIT_USAGE = 2  # bad option values, options that do not apply
EXIT_REFUSED = 3  # the environment refused: mount missing or not a folder, read-only, no space, permission denied
EXIT_STDOUT_CLOSED = 128 + signal.SIGPIPE  # 141: the reader of stdout left (`| head -1`), as for a tool SIGPIPE kills
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # each stops iobench with 128 + its number


class UserError(Exception):
    """Bad input the user must fix (a bad option value, options that do not apply); one line, exit code 2."""


class EnvironmentRefused(UserError):
    """The environment refused what iobench must do there: the mount (or a path on it) is missing or not a folder,
    read-only, full, over quota, or permission was denied. One line, exit code 3."""


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM) during a run; the result file holds what was measured. Exit code 128 + the signal."""


class UserCodeError(Exception):
    """The user's own code raised (`run --pipeline FILE.py:FUNC`): not iobench's error, so its traceback is shown
    (`traceback`, the user's frames), marked as theirs, then one line naming the user's file and line. Exit code 1;
    the result keeps what was measured (complete: false)."""

    def __init__(self, line: str, traceback: str):
        super().__init__(line)
        self.traceback = traceback
        self.kept = ""  # where the result was kept, said after the line

    @classmethod
    def of(cls, exc: BaseException, what: str, files: tuple[str, ...]) -> UserCodeError:
        """`exc` raised by the user's `what` (e.g. "your pipeline train.py:loader"): its traceback, and the last
        line naming the deepest frame in one of `files` (the user's). Raised in another process (a DataLoader
        worker, re-raised by torch), its traceback is in its message: the frame is looked for there."""
        import re
        import traceback as tb

        frames = [(f.filename, f.lineno) for f in tb.extract_tb(exc.__traceback__)
                  if os.path.realpath(f.filename) in files]
        lines = str(exc).strip().splitlines() or ["no message"]
        words = lines[0]
        if not frames:
            frames = [(m[1], int(m[2])) for m in re.finditer(r'File "([^"]+)", line (\d+)', str(exc))
                      if os.path.realpath(m[1]) in files]
            if frames:
                words = lines[-1].removeprefix(f"{type(exc).__name__}: ")
        where = f"{frames[-1][0]}:{frames[-1][1]}" if frames else "(no frame of yours in its traceback)"
        text = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
        return cls(f"{what} raised {type(exc).__name__} at {where}: {words}", text)


# errno values that are the environment refusing, not a mistake on the command line
REFUSALS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT,
                      errno.ENOTDIR})


def explain_oserror(exc: OSError, doing: str) -> UserError:
    """Turn an OSError into a one-line UserError that names what iobench was doing: an EnvironmentRefused for
    the refusals (no space, quota, read-only, permission, missing path). The path is the exception's file name
    when `doing` does not already say it; where the exception names none (a failed write() or fsync() names no
    file), `doing` must: "DOING: PATH: REASON" or "DOING PATH: REASON", never an empty part."""
    name = os.fsdecode(exc.filename) if isinstance(exc.filename, str | bytes) else ""
    where = f" {name}:" if name and name not in doing else ""
    hints = {
        errno.ENOSPC: "no space left on the device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EROFS: "the file system is mounted read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
        errno.ENOENT: "no such file or directory",
        errno.ENOTDIR: "not a directory",
        errno.EISDIR: "a directory where a file should be",
        errno.EIO: "I/O error from the storage",
        errno.ESTALE: "stale file handle (the server lost the file)",
    }
    reason = hints.get(exc.errno or 0, exc.strerror or os.strerror(exc.errno or 0))
    kind = EnvironmentRefused if exc.errno in REFUSALS else UserError
    return kind(f"{doing}:{where} {reason}")
