"""Reports from result files: one self-contained HTML page (inline SVG plots: no network, no JavaScript), a
Markdown version and a flat CSV; one result gives the single-run report, several the comparison (`compare`).
facts.py and compare.py decide what is said, the writers (html.py, markdown.py, csv_writer.py, and ui.py in the
terminal) only lay it out. `write` is what `iobench report` / `compare` call; `write_reports`, what `run` writes."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from pydantic import ValidationError

from iobench.errors import UserError, explain_oserror
from iobench.report.compare import compare_headline, compare_table
from iobench.report.csv_writer import render_csv
from iobench.report.facts import facts, labels
from iobench.report.html import render_html
from iobench.report.markdown import render_markdown
from iobench.result import Result, unusable
from iobench.safefs import write_file

__all__ = ["compare_headline", "compare_table", "facts", "labels", "load_results", "result_file", "write",
           "write_reports"]


def _stderr_warning(line: str) -> None:
    sys.stderr.write(f"iobench: warning: {line}\n")


def load_results(paths: Iterable[Path], warn: Callable[[str], None] | None = _stderr_warning) -> list[Result]:
    """Result files, each checked; a missing or foreign file is a UserError naming it. A folder means the
    result.json inside it (as `iobench run --out` writes). An unfinished one (complete: false) is loaded, with
    one warning line naming it (`warn`; None: silent)."""
    out = []
    for p in map(result_file, paths):
        try:
            out.append(Result.load(p))
        except FileNotFoundError:
            raise UserError(f"no result file at {p}") from None
        except ValidationError as exc:  # not JSON, not a result, or one whose figures cannot be (result.LOADING)
            raise UserError(f"{p} is not a usable iobench result: {unusable(exc)}") from None
        except ValueError as exc:  # not UTF-8
            raise UserError(f"{p} is not a usable iobench result: {str(exc).splitlines()[0]}") from None
        except OSError as exc:
            raise UserError(f"cannot read {p}: {exc.strerror}") from None
        if warn is not None and not out[-1].complete:
            warn(f"{p} is an unfinished run (complete: false): its figures cover only what was measured before it "
                 "stopped")
    if not out:
        raise UserError("give at least one result file")
    return out


def result_file(path: Path) -> Path:
    """The result file a path names: itself, or the result.json in a folder (as `iobench run --out` writes)."""
    path = Path(path)
    return path / "result.json" if path.is_dir() else path


def write(results: Sequence[Result], html_path: Path | None = None, md_path: Path | None = None,
          csv_path: Path | None = None, names: Sequence[str] | None = None) -> list[Path]:
    """Write the reports asked for; returns the paths written."""
    written = []
    for path, render in ((html_path, render_html), (md_path, render_markdown), (csv_path, render_csv)):
        if path is None:
            continue
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file(path, render(list(results), names))
        except OSError as exc:  # a write() that fails names no file: the report's own path is said here
            raise explain_oserror(exc, f"cannot write the report {path}") from exc
        written.append(path)
    return written


def write_reports(result: Result, folder: Path) -> list[Path]:
    """report.html and report.md in `folder` (beside result.json): what `iobench run` writes by default."""
    folder = Path(folder)
    return write([result], html_path=folder / "report.html", md_path=folder / "report.md")
