"""Terminal output: live progress on stderr, tables and the verdict on stdout (rich).

When stdout carries data (`--json -`), every human line goes to stderr instead; `quiet` leaves only the verdict
line (and errors)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from iobench.result import Result, Verdict

if TYPE_CHECKING:  # the report's tables are imported where printed: `iobench gpus` and friends start faster
    from iobench.report.facts import Table as ReportTable


class UI:
    def __init__(self, quiet: bool = False, *, stdout_free: bool = False):
        """quiet: no progress, warnings, tables or notes: only the verdict line (and errors, which main() prints).
        stdout_free: stdout carries data (the JSON of `--json -`): what would go to stdout goes to stderr."""
        self.quiet = quiet
        self.stdout_free = stdout_free
        self.err = Console(stderr=True)
        self.out = Console(stderr=stdout_free)
        # A log file or a pipe: no wrapping of messages, and table rows kept on one line.
        if not self.err.is_terminal:
            self.err = Console(stderr=True, soft_wrap=True)
        if not self.out.is_terminal:
            self.out = Console(stderr=stdout_free, width=160, soft_wrap=True)

    def info(self, msg: str) -> None:
        if not self.quiet:
            self.err.print(msg, highlight=False)

    def warn(self, msg: str) -> None:
        if not self.quiet:
            self.err.print(f"[bold yellow]warning:[/] {msg}", highlight=False)

    def say(self, msg: str) -> None:
        """A line of the outcome (where the result and report went): stdout, or stderr when stdout carries data."""
        if not self.quiet:
            self.out.print(msg, highlight=False, soft_wrap=True)

    def verdict(self, v: Verdict) -> None:
        """The verdict's first line, then its evidence and notes, one per line, indented (quiet: the first line
        only): on stdout, even when quiet; on stderr when stdout carries data; quiet then: nothing."""
        if self.quiet and self.stdout_free:
            return
        lines = v.text.splitlines() or [v.answer]
        self.out.print(Text.assemble(("verdict: ", "bold"), (lines[0], "bold")), soft_wrap=True)
        if not self.quiet:
            for line in lines[1:]:
                self.out.print(Text("  " + line), soft_wrap=True)

    @contextmanager
    def status(self, msg: str) -> Iterator[None]:
        """A spinner for a phase without a sample count (metadata, fio)."""
        if self.quiet or not self.err.is_terminal:
            yield
            return
        with self.err.status(msg):
            yield

    def _progress(self) -> Progress:
        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                        console=self.err, disable=self.quiet or not self.err.is_terminal, transient=True)

    @contextmanager
    def gen_progress(self, files: int) -> Iterator[Callable[[int, int], None]]:
        with self._progress() as prog:
            task = prog.add_task("gen", total=files, rate="")
            t0 = time.perf_counter()

            def update(done: int, nbytes: int) -> None:
                dt = max(time.perf_counter() - t0, 1e-9)
                prog.update(task, completed=done, rate=f"{done / dt:,.0f} files/s {nbytes / dt / 1e6:,.0f} MB/s")

            yield update

    @contextmanager
    def epoch_progress(self, label: str, samples: int) -> Iterator[Callable[[int], None]]:
        """Live samples/s over the last ~second while an epoch runs."""
        with self._progress() as prog:
            task = prog.add_task(label, total=samples, rate="")
            last = [time.perf_counter(), 0]

            def update(done: int) -> None:
                now = time.perf_counter()
                if now - last[0] >= 0.5 or done == samples:
                    rate = (done - last[1]) / (now - last[0])
                    last[0], last[1] = now, done
                    prog.update(task, rate=f"{rate:,.0f} samples/s")
                prog.update(task, completed=done)

            yield update

    def summary(self, result: Result) -> None:
        """The report's tables (metadata, runs, repeats, fio baseline, mitigations), then the invalid runs and notes."""
        if self.quiet:
            return
        from iobench.report.facts import (
            fio_table,
            metadata_table,
            mitigations_table,
            ranks_table,
            runs_table,
            stats_table,
        )

        for t in (metadata_table(result), runs_table(result) if result.runs else None, stats_table(result),
                  fio_table(result), mitigations_table(result), ranks_table(result)):
            if t is not None:
                self.table(t)
        for r in result.runs:
            if not r.valid:
                self.out.print(f"[yellow]invalid:[/] epoch {r.epoch} ({r.cache}, {r.concurrency} readers"
                               + (f", {r.gpus} GPUs" if r.gpus else "") + f"): {r.invalid_reason}", highlight=False)
        for w in result.warnings + ([result.baseline.note] if result.baseline and result.baseline.note else []):
            self.out.print(f"[yellow]note:[/] {w}", highlight=False)

    def table(self, t: ReportTable) -> None:
        """A report table (iobench.report.facts) in its narrow form, as the Markdown report shows it. Cells are
        plain text: a mitigation such as "[lmdb]" is not rich markup."""
        t = t.narrow()
        table = Table(title=Text(t.title))
        for i, h in enumerate(t.head):
            table.add_column(Text(h), justify="left" if t.is_text(i) else "right")
        for ri, row in enumerate(t.rows):
            table.add_row(*(Text(c, style="bold" if (ri, i) in t.wins else "") for i, c in enumerate(row)))
        if self.out.is_terminal:
            self.out.print(table)
            return
        # A log or a pipe: each row on one line, however wide the table (the 160 columns of `out` would wrap it).
        width = Measurement.get(self.out, self.out.options.update_width(100_000), table).maximum
        Console(file=self.out.file, width=max(width, self.out.width), soft_wrap=True).print(table)
