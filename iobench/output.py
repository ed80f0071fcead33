"""Where a command's outcome goes: the JSON (to a file, or alone on stdout with `--json -`), the reports and the result
folder, each checked before anything is read or measured; the standard streams a caller closed, put back. The one
home of the rules that keep what is the user's: no output is an input (after links), an --out that exists is empty,
nothing goes inside a dataset (the user's tree, or MOUNT/iobench-data, which `iobench clean` removes)."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from iobench.errors import EnvironmentRefused, UserError, explain_oserror
from iobench.safefs import not_followed, write_file

STDOUT = "-"  # `--json -`: the JSON goes to stdout, alone
CLOSED_AT_START: set[int] = set()  # of stdin, stdout, stderr: those closed when iobench started (cli.main)
STDOUT_FAULT: list[int] = []  # the errno of the first write to stdout that failed (guard_stdout)


class StdoutClosed(Exception):
    """The reader of stdout left (EPIPE: `iobench run | head -1`): nothing to say, exit 141 (errors)."""


class _GuardedStdout(io.FileIO):
    """File descriptor 1, whose failures are the output's, never the storage's: the first is noted (STDOUT_FAULT),
    stdout is pointed at /dev/null (Python's advice for a closed pipe) and the command goes on, so that a run
    still saves its result, its reports and its --json file; cli.main says it at the end (check_stdout)."""

    def write(self, data: Any) -> int:
        try:
            return super().write(data)
        except BlockingIOError:
            raise
        except OSError as exc:
            STDOUT_FAULT.append(exc.errno or errno.EIO)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.close(null)
            return memoryview(data).nbytes


def guard_stdout() -> None:
    """sys.stdout as before (encoding, line buffering), written through `_GuardedStdout`: print, click and rich
    all write through it."""
    old = sys.stdout
    with contextlib.suppress(OSError, ValueError):
        old.flush()
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(_GuardedStdout(1, "w", closefd=False)),
                                  encoding=old.encoding, errors=old.errors, line_buffering=bool(old.line_buffering))


def check_stdout() -> None:
    """At the end of a command that did its work: what is left is written out, then a stdout that failed is said:
    StdoutClosed where its reader left, else a UserError (exit 2)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    if not STDOUT_FAULT:
        return
    if STDOUT_FAULT[0] == errno.EPIPE:
        raise StdoutClosed()
    raise UserError(f"cannot write to standard output: {os.strerror(STDOUT_FAULT[0])}")


def reopen_closed_std_fds() -> set[int]:
    """Put /dev/null on stdin, stdout or stderr where the caller closed it (`>&-`), so that no file iobench opens gets
    that number (and what is printed). Returns the ones that were closed."""
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


def check_no_link(path: str | Path | None, what: str) -> None:
    """Before anything is read: no link or special file where an output file (--html, --md, --csv, --json) goes
    (safefs.write_file never writes through one; this says so before the work, in the same words)."""
    if path is None or path == STDOUT:
        return
    with contextlib.suppress(FileNotFoundError):
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            raise UserError(f"{what} {not_followed(path, mode)}; give another file name"
                            + (" (or - for stdout)" if what == "--json" else ""))


def check_json_target(path: str | None, what: str = "--json") -> None:
    """Before anything is measured: the JSON file can be written (its folder exists and takes files), or stdout is
    open for `-`."""
    if path == STDOUT and 1 in CLOSED_AT_START:
        raise UserError(f"{what} -: stdout is closed: give a file name, or run with stdout open")
    if path is None or path == STDOUT:
        return
    p = Path(path)
    check_no_link(p, what)
    folder = p.parent
    if not folder.is_dir():
        raise UserError(f"{what} {path}: the folder {folder} does not exist")
    _writable(folder, f"{what} {path}")
    if p.exists() and not os.access(p, os.W_OK):
        raise EnvironmentRefused(f"{what} {path}: the file is not writable (permission denied)")


def check_out_target(folder: Path, what: str = "--out", *, given: bool = True) -> None:
    """Before anything is measured: the result folder exists and takes files, or can be made. One the user named
    (`given`) that exists must be empty: a result is never written over, and neither is anything else of theirs
    (a report.html, a fio/ or awscrt/ folder)."""
    p = folder.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        raise UserError(f"{what} {folder}: {p} is a file, not a folder")
    _writable(p, f"{what} {folder}")
    if given and p == folder.absolute():
        _refuse_not_empty(folder, what)


def _refuse_not_empty(folder: Path, what: str) -> None:
    with os.scandir(folder) as entries:
        names = sorted(e.name for e in entries)
    if not names:
        return
    if "result.json" in names:
        raise UserError(f"{what} {folder} already holds a result ({folder / 'result.json'}); give a new folder, or "
                        "move that one away")
    listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise UserError(f"{what} {folder} is not empty ({listed}) and holds no result of iobench's: iobench writes "
                    "result.json, report.html, report.md and the raw baseline's fio/ or awscrt/ there and "
                    "overwrites nothing; give a new or empty folder")


def check_report_files(outputs: Sequence[tuple[str, str | Path | None]], inputs: Iterable[Path | None]) -> None:
    """report's and compare's output files, before anything is read: none is an input (checked first, so that a link
    to one is said as the input), none a link or special file."""
    check_apart(outputs, inputs)
    for what, path in outputs:
        check_no_link(path, what)


def check_apart(outputs: Iterable[tuple[str, str | Path | None]], inputs: Iterable[Path | None] = (),
                dataset: Path | None = None) -> None:
    """Before anything is read: no output (option, path) is one of the `inputs` (after links) or inside the `dataset`
    tree or an iobench-data folder (one line, exit 2); STDOUT and None are no file."""
    from iobench.dataset import DATA_ROOT  # numpy and PIL: not for the commands that write no file

    ins = [i for i in inputs if i is not None]
    for what, out in outputs:
        if out is None or out == STDOUT:
            continue
        out = Path(out)
        for i in ins:
            with contextlib.suppress(OSError):  # an output not there yet is no input
                if os.path.samefile(out, i):
                    raise UserError(f"{what} {out} is the input {i}: iobench never writes over what it reads; give "
                                    "another file name")
        option = what if what.startswith("--") else "--out"  # the default result folder: --out moves it
        if dataset is not None and _inside(out, dataset):
            raise UserError(f"{what} {out} is inside the dataset {dataset}: iobench writes nothing among your files "
                            f"(a later scan would list it too); give {option} a path outside it")
        root = next((a for a in (_real(out), *_real(out).parents) if a.name == DATA_ROOT), None)
        if root is not None:
            raise UserError(f"{what} {out} is inside {root}, where iobench keeps the datasets it makes: "
                            f"`iobench clean` would delete it with them; give {option} a path outside it")


def _real(path: Path) -> Path:
    """`path` with its links resolved, as far as it exists (the rest as given): where a write would land."""
    return Path(os.path.realpath(path.absolute()))


def _inside(path: Path, tree: Path) -> bool:
    """`path` (there or not yet) is `tree` or below it: compared by device and inode, so that a bind mount or a
    link of the tree is the tree."""
    try:
        top = os.stat(tree)
    except OSError:
        return False
    for p in (_real(path), *_real(path).parents):
        with contextlib.suppress(OSError):
            st = os.stat(p)
            if (st.st_dev, st.st_ino) == (top.st_dev, top.st_ino):
                return True
    return False


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
def stdout_to_stderr() -> Iterator[None]:
    """While stdout is kept for the JSON (`--json -`), whatever else writes to file descriptor 1 (rich, fio,
    DataLoader worker processes, libraries) writes to stderr instead."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
