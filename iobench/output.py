"""Where a command's outcome goes: the JSON (to a file, or alone on stdout with `--json -`) and the result folder,
each checked before anything is measured; the standard streams a caller closed, put back.

Shared by the command line (plan, gpus, compare write JSON) and a measured run (iobench.session)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from iobench.dataset import kind_of
from iobench.errors import EnvironmentRefused, UserError, explain_oserror
from iobench.safefs import write_file

STDOUT = "-"  # `--json -`: the JSON goes to stdout, alone
CLOSED_AT_START: set[int] = set()  # of stdin, stdout, stderr: those closed when iobench started (cli.main)


def reopen_closed_std_fds() -> set[int]:
    """Put /dev/null on stdin, stdout or stderr where the caller closed it (`>&-`): else the next file iobench opens
    (a result, a dataset file) would get that number and what is printed would be written into it. Returns the ones
    that were closed."""
    closed = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            closed.add(fd)
    if 1 in closed:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's stdout, for its whole life
    if 2 in closed:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    return closed


def _writable(folder: Path, what: str) -> None:
    """An existing folder iobench must write in: refused (exit 3) when read-only or not writable."""
    if os.statvfs(folder).f_flag & os.ST_RDONLY:
        raise EnvironmentRefused(f"{what}: {folder} is on a read-only file system")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise EnvironmentRefused(f"{what}: cannot write in {folder} (permission denied)")


def check_json_target(path: str | None, what: str = "--json") -> None:
    """Before anything is measured: the JSON file can be written (its folder exists and takes files), or stdout is
    open for `-`."""
    if path == STDOUT and 1 in CLOSED_AT_START:
        raise UserError(f"{what} -: stdout is closed: give a file name, or run with stdout open")
    if path is None or path == STDOUT:
        return
    p = Path(path)
    with contextlib.suppress(FileNotFoundError):
        mode = os.lstat(p).st_mode
        if not stat.S_ISREG(mode):  # a link or special file is never written through (safefs.write_file)
            raise UserError(f"{what} {path}: is {kind_of(mode)}, not a regular file; give a file name (or - for "
                            "stdout)")
    folder = p.parent
    if not folder.is_dir():
        raise UserError(f"{what} {path}: the folder {folder} does not exist")
    _writable(folder, f"{what} {path}")
    if p.exists() and not os.access(p, os.W_OK):
        raise EnvironmentRefused(f"{what} {path}: the file is not writable (permission denied)")


def check_out_target(folder: Path, what: str = "--out") -> None:
    """Before anything is measured: the result folder exists and takes files, or can be made."""
    p = folder.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        raise UserError(f"{what} {folder}: {p} is a file, not a folder")
    _writable(p, f"{what} {folder}")


def write_json(text: str, path: str) -> None:
    """JSON to a file (atomically) or, for `-`, to stdout."""
    if path == STDOUT:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        return
    try:
        write_file(Path(path), text if text.endswith("\n") else text + "\n")
    except OSError as exc:
        raise explain_oserror(exc, f"cannot write {path}") from exc


def _finite(x: Any) -> Any:
    """Something json.dumps writes as standard JSON: inf and nan become null (JSON has neither)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def dump(data: Any) -> str:
    """Data as the JSON a command writes: indented, standard (no inf or nan)."""
    return json.dumps(_finite(data), indent=1, ensure_ascii=False)


@contextmanager
def stdout_to_stderr(active: bool) -> Iterator[None]:
    """While stdout is kept for the JSON (`--json -`), whatever else writes to file descriptor 1 (rich, fio,
    DataLoader worker processes, libraries) writes to stderr instead."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
