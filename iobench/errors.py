"""Errors a user can act on: the CLI prints them as one line, never as a traceback."""

from __future__ import annotations

import errno
import os
import signal
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import ast


# the exit codes iobench.cli.main maps errors to (besides 0, and 128 + the signal for an interrupted run)
EXIT_NOT_FED = 1  # run --check: the GPUs asked about are not fed
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


EXIT_USER_CODE = 1  # the user's own code (run --pipeline FILE.py:FUNC) raised


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


# ------------------------------------------------------------------------------------- docs/errors.md, generated

EXIT_CODES = {
    0: "done",
    EXIT_NOT_FED: "done, but the GPUs asked about (--gpus N) are not fed (only with --check); or your own code "
                  "(run --pipeline FILE.py:FUNC) raised: its traceback, then one line naming your file and line, the "
                  "result kept (complete: false)",
    EXIT_USAGE: "usage error: a bad option value, options that do not apply, bad input (UserError); also a standard "
                "output that cannot be written (full, an I/O error): never blamed on the storage",
    EXIT_REFUSED: "the environment refused: mount or path missing, read-only, full, over quota, permission "
                  "(EnvironmentRefused)",
    129: "interrupted by SIGHUP (the terminal closed): the result keeps what was measured (complete: false)",
    130: "interrupted by SIGINT (Ctrl-C): likewise; a stop signal while iobench is still starting ends it at once "
         "(nothing was done), one that comes once a run has finished (its verdict printed) is said and changes "
         "nothing",
    EXIT_STDOUT_CLOSED: "the reader of standard output left (`iobench run` piped into `head -1`): nothing more is "
                        "printed, the command still does its work (a run saves its result, reports and --json file), "
                        "no line",
    143: "interrupted by SIGTERM: likewise",
}


def catalogue() -> list[tuple[int, str, str]]:
    """Every one-line error iobench can raise, from its source: (exit code, message template, module). Messages
    built at run time show their parts in braces. No line numbers: the doc changes only when an error does."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent
    trees = {p: ast.parse(p.read_text()) for p in sorted(root.rglob("*.py"))}
    codes = {"UserError": 2, "EnvironmentRefused": 3}
    changed = True
    while changed:  # subclasses of the error classes, in any module
        changed = False
        for tree in trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in codes:
                    for base in node.bases:
                        if isinstance(base, ast.Name) and base.id in codes:
                            codes[node.name] = codes[base.id]
                            changed = True
    out = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                call = node.exc
                name = call.func.id if isinstance(call.func, ast.Name) else None
                if name in codes:
                    text = _template(call.args[0]) if call.args else f"({name}: see its class in the module)"
                    out.append((codes[name], text, str(path.relative_to(root.parent))))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Refusal"
                  and len(node.args) == 3):  # a row of the command line's refusals (iobench/cli/refusals.py)
                out.append((2, _template(node.args[2]), str(path.relative_to(root.parent))))
    return sorted(set(out))


def _template(arg: ast.expr) -> str:
    import ast

    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        # an f-string's parts are its literal text (str constants) and its {fields} (FormattedValue)
        return "".join(cast(str, v.value) if isinstance(v, ast.Constant)
                       else "{" + ast.unparse(cast(ast.FormattedValue, v).value) + "}"
                       for v in arg.values)
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
        return _template(arg.left) + _template(arg.right)
    return "{" + ast.unparse(arg) + "}"


def docs_markdown() -> str:
    """docs/errors.md: the exit codes, then every error a user can meet with its code."""
    lines = ["# Errors and exit codes", "",
             "Generated from the source by `python -m iobench.errors > docs/errors.md` (a test keeps it in step).",
             "Every error is one line on stderr, `iobench: error: MESSAGE`, never a traceback. Braces stand for",
             "the parts filled in at run time.", "", "| exit code | meaning |", "|---|---|"]
    lines += [f"| {code} | {text} |" for code, text in EXIT_CODES.items()]
    lines += ["", "Operating-system errors while reading or writing are named with what iobench was doing, the",
              "path and the reason; exit code 3 for "
              + ", ".join(sorted(errno.errorcode[e] for e in REFUSALS)) + ", else 2.", "",
              "| exit code | message | raised at |", "|---|---|---|"]
    for code, text, where in catalogue():
        cell = text.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {code} | {cell} | `{where}` |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(docs_markdown())
