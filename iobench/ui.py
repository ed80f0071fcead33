"""Terminal output: live progress on stderr, tables and the verdict on stdout (rich).

When stdout carries data (`--json -`), every human line goes to stderr instead; `quiet` leaves only the verdict
line (and errors)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, Progress, TaskID
from rich.table import Table
from rich.text import Text

from iobench.answer.words import raw_tool
from iobench.progress import Plan, clock
from iobench.result import Result, Verdict

BAR = 12  # a bar's columns in the live display
VS = "vs "  # the runs table's comparison with the raw baseline (its efficiency): "vs fio", "vs awscrt"

# A bar's figures, in the order shown: (separator before it, its text, how much it is needed). A terminal too narrow
# for them all drops the least needed first (the rightmost of equals); CORE ones stay.
Part = tuple[str, str, int]
CORE, RATE, PLACE, EXTRA = 3, 2, 1, 0

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
        self._prog: Progress | None = None  # the live display while one is shown
        self.plan: Plan | None = None  # the run's steps, while a run is shown
        self._run_task: TaskID | None = None
        self._shown: dict[str, int] = {}  # the report's tables: rows shown so far (`tables`)
        self._warned: set[str] = set()  # warnings printed as they came: the summary's notes do not repeat them

    def info(self, msg: str) -> None:
        if not self.quiet:
            self.err.print(msg, highlight=False)

    def warn(self, msg: str) -> None:
        if not self.quiet:
            self._warned.add(msg)
            self.err.print(f"[bold yellow]warning:[/] {msg}", highlight=False)

    def say(self, msg: str) -> None:
        """A line of the outcome (where the result and report went): stdout, or stderr when stdout carries data."""
        if not self.quiet:
            self.out.print(msg, highlight=False, soft_wrap=True)

    def verdict(self, v: Verdict) -> None:
        """The verdict's first line, then its evidence and notes, indented (quiet: the first line only; nothing
        when stdout carries data too)."""
        if self.quiet and self.stdout_free:
            return
        lines = v.text.splitlines() or [v.answer]
        self.out.print(Text.assemble(("verdict: ", "bold"), (lines[0], "bold")), soft_wrap=True)
        if not self.quiet:
            for line in lines[1:]:
                self.out.print(Text("  " + line), soft_wrap=True)

    def _screen(self) -> Console:
        """Where a table goes while the live display runs: when stdout and stderr are the same terminal, through the
        display's console, which redraws the display below it (rich's stdout past it leaves a stale frame)."""
        if self._prog is not None and self._prog.live.is_started and _same_terminal(self.out, self.err):
            return self.err
        return self.out

    # ------------------------------------------------------------------ the live display (stderr)

    @contextmanager
    def _live(self) -> Iterator[Progress]:
        """The one live display: the first bar starts it, the bars inside share it."""
        if self._prog is not None:
            yield self._prog
            return
        prog = _Display(BarColumn(bar_width=BAR), console=self.err, disable=self.quiet or not self.err.is_terminal,
                        transient=True, refresh_per_second=4)
        self._prog = prog
        try:
            with prog:
                yield prog
        finally:
            self._prog = None

    @contextmanager
    def _bar(self, label: str, total: float | None, info: Callable[[], list[Part]],
             counts: bool = True) -> Iterator[Callable[[float], None]]:
        """A bar of the live display, gone when done; its callback takes the work done so far, which the run's
        ETA follows too (`counts`: the bar is the running step's measure, not its warming)."""
        with self._live() as prog:
            task = prog.add_task(label, total=total, info=info)

            def update(done: float) -> None:
                prog.update(task, completed=done)
                if counts and self.plan is not None and total:
                    self.plan.frac = min(done / total, 1.0)

            try:
                yield update
            finally:
                prog.remove_task(task)

    @contextmanager
    def run_plan(self, plan: Plan) -> Iterator[None]:
        """The run's line above every bar: the step running, its place in its phase and in the run, the run's ETA."""
        self.plan = plan
        with self._live() as prog:
            t0 = time.perf_counter()

            def info() -> list[Part]:
                return [("", f"run ETA {clock(plan.run_left())}", CORE), (", ", _took(t0), PLACE)]

            self._run_task = prog.add_task(self._run_words(), total=None, info=info)
            try:
                yield
            finally:
                prog.remove_task(self._run_task)
                self.plan, self._run_task = None, None

    def _run_words(self) -> str:
        if self.plan is None or (step := self.plan.current()) is None:
            return "run"
        k, n, i, m = self.plan.place()
        return f"[bold]{step.phase} {k}/{n}[/]: {step.what} (step {i} of {m})"

    @contextmanager
    def step(self, phase: str, what: str, work: float = 0.0, kind: str | None = None) -> Iterator[None]:
        """One step of the run's plan (an epoch, a fio point, a metadata pass): named on the run's line, and timed
        for the ETAs of the steps to come."""
        if self.plan is None:
            yield
            return
        self.plan.start(phase, what, work, kind or phase)
        if self._prog is not None and self._run_task is not None:
            self._prog.update(self._run_task, description=self._run_words())
        try:
            yield
        finally:
            self.plan.end()

    @contextmanager
    def status(self, msg: str, figures: Callable[[], str] | None = None) -> Iterator[None]:
        """A part of a step without a count to end at (metadata, eviction, a scan): its words, what `figures` says
        so far, and the time it has taken."""
        t0 = time.perf_counter()
        with self._bar(msg, None, lambda: [*([("", figures(), CORE)] if figures else []), (", ", _took(t0), CORE)]):
            yield

    @contextmanager
    def fio_progress(self, msg: str) -> Iterator[Callable[[float, tuple[float, float] | None, tuple[int, int],
                                                                  float | None], None]]:
        """fio's progress (iobench.phases.fio's `status`): update(percent done, (files/s, MB/s) or None while it sets
        up, (run k, of n), seconds left)."""
        t0 = time.perf_counter()
        live: dict = {"rate": None, "run": (1, 1), "eta": None}

        def info() -> list[Part]:
            k, n = live["run"]
            run: list[Part] = [(", ", f"run {k}/{n}", PLACE)] if n > 1 else []
            if live["rate"] is None:
                return [("", "setting up", CORE), *run, (", ", _took(t0), CORE)]
            files_s, mb_s = live["rate"]
            return [("", f"{files_s:,.0f} files/s", CORE), (" ", f"{mb_s:,.1f} MB/s", EXTRA), *run,
                    (", ", f"ETA {clock(live['eta'])}", CORE), (", ", _took(t0), EXTRA)]

        with self._bar(msg, 100.0, info) as bar:
            def update(pct: float, rate: tuple[float, float] | None, run: tuple[int, int], eta_s: float | None) -> None:
                live["rate"], live["run"], live["eta"] = rate, run, eta_s
                bar(pct)

            yield update

    @contextmanager
    def progress(self, label: str, total: int, unit: str = "samples",
                 counts: bool = True) -> Iterator[Callable[..., None]]:
        """`unit`s done of `total` (an epoch's samples; the files or objects gen, pack or a scan writes), the live
        rate (over the last ~second), MB/s where bytes are counted, the ETA (`counts`: as `_bar`)."""
        t0 = time.perf_counter()
        live = {"done": 0, "bytes": 0, "rate": 0.0, "t": t0, "at": 0}

        def info() -> list[Part]:
            done = live["done"]  # until the first interval's rate: the mean since the start
            rate = live["rate"] or done / max(time.perf_counter() - t0, 1e-9)
            left = (total - done) / rate if rate > 0 else None
            mb = [(" ", f"{rate * live['bytes'] / done / 1e6:,.0f} MB/s", EXTRA)] if live["bytes"] and done else []
            return [("", f"{done:,}/{total:,}", CORE), (" ", f"{rate:,.0f} {unit}/s", RATE), *mb,
                    (", ", f"ETA {clock(left)}", CORE), (", ", _took(t0), EXTRA)]

        with self._bar(label, total, info, counts) as bar:
            def update(done: int, nbytes: int = 0, at: float | None = None) -> None:
                """`nbytes`: the bytes of the `done`; `at`: when `done` was counted (a distributed job's count, once
                a second), else now."""
                now = time.perf_counter() if at is None else at
                if now - live["t"] >= 0.5 or done == total:
                    live["rate"] = (done - live["at"]) / max(now - live["t"], 1e-9)
                    live["t"], live["at"] = now, done
                live["done"], live["bytes"] = done, nbytes
                bar(done)

            yield update

    def summary(self, result: Result) -> None:
        """The report's tables not shown yet (the repeats', the ranks', rows the last phases added), then the invalid
        runs and the notes (those not printed as a warning when they came)."""
        if self.quiet:
            return
        self.tables(result)
        for r in result.runs:
            if not r.valid:
                self.out.print(f"[yellow]invalid:[/] epoch {r.epoch} ({r.cache}, {r.concurrency} readers"
                               + (f", {r.gpus} GPUs" if r.gpus else "") + f"): {r.invalid_reason}", highlight=False)
        for w in result.warnings + ([result.baseline.note] if result.baseline and result.baseline.note else []):
            if w not in self._warned:
                self.out.print(f"[yellow]note:[/] {w}", highlight=False)

    def tables(self, result: Result) -> None:
        """The report's tables, each with the rows not shown yet (called as each phase ends)."""
        if self.quiet:
            return
        from iobench.report.facts import tables

        for key, t in tables(result).items():
            shown = self._shown.get(key, 0)
            if key == "training" or t is None or len(t.rows) <= shown:  # training runs are rows of the runs table
                continue
            self._shown[key] = len(t.rows)
            if shown:
                t = replace(t, title=f"{t.title} (continued)", rows=t.rows[shown:],
                            wins=frozenset((r - shown, c) for r, c in t.wins if r >= shown))
            vs = next((c for c in t.head if c.startswith(VS)), None)
            if key == "runs" and vs is not None and all(row[t.head.index(vs)] == "-" for row in t.rows):
                # the raw baseline has not run yet (or will not): its column would be all dashes, its figures come
                # later in the efficiency table, printed once it has run (rather than the whole runs table again)
                t = replace(t, wide=(*t.wide, t.head.index(vs)))
                self.table(t)
                if self.plan is not None and any(s.phase == raw_tool(result) and s.seconds is None
                                                   for s in self.plan.steps):
                    self._screen().print(Text(f"  {vs}: in the efficiency table, once {raw_tool(result)} has run",
                                              style="dim"))
                continue
            self.table(t)

    def table(self, t: ReportTable) -> None:
        """A report table in its narrow form (cells plain text, not rich markup); a terminal too narrow for it loses
        its least needed columns (`ReportTable.ranked`), named below it, never a cut cell."""
        t = t.narrow()
        if not self.out.is_terminal:
            # A log or a pipe: each row on one line, however wide the table (the 160 columns of `out` would wrap it).
            table = rich_table(t, dict.fromkeys(range(len(t.head))), framed=True)
            Console(file=self.out.file, width=max(_width(self.out, table), self.out.width), soft_wrap=True).print(table)
            return
        table, hidden = fit(t, self.out, self.out.width)
        screen = self._screen()
        screen.print(table)
        if hidden:
            screen.print(Text(f"  not shown at {self.out.width} columns (see the report): {', '.join(hidden)}",
                                style="dim"))


def rich_table(t: ReportTable, widths: Mapping[int, int | None], gap: int = 2, framed: bool = False) -> Table:
    """The rich table of `t`'s columns in `widths` (column -> width; None: as wide as it needs), `gap` spaces apart
    (`framed`: rich's boxed table, for a log). A header wraps at its spaces, a text cell narrower than its text
    too; a figure's width is its longest cell's (`_widths`)."""
    look: dict = {} if framed else {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False,
                                    "padding": (0, gap - 1, 0, 0)}
    table = Table(title=Text(t.title), **look)
    cols = sorted(widths)
    for i in cols:
        table.add_column(Text(t.head[i]), justify="left" if t.is_text(i) else "right", width=widths[i])
    for ri, row in enumerate(t.rows):
        table.add_row(*(Text(row[i], style="bold" if (ri, i) in t.wins else "") for i in cols))
    return table


def _widths(t: ReportTable, cols: Iterable[int]) -> tuple[dict[int, int], dict[int, int]]:
    """Per column, the width of its longest cell (or header word), and the least it can take: a figure the same,
    a text column its longest word."""
    most, least = {}, {}
    for i in cols:
        head = max((cell_len(w) for w in t.head[i].split()), default=1)
        most[i] = max([cell_len(row[i]) for row in t.rows] + [head])
        least[i] = max([cell_len(w) for row in t.rows for w in row[i].split()] + [head]) if t.is_text(i) else most[i]
    return most, least


RATES = ("samples/s", "files/s")  # the rate a table is read for: the last column a narrow terminal leaves out


def fit(t: ReportTable, console: Console, width: int) -> tuple[Table, list[str]]:
    """`t` as a rich table within `width` columns, every cell whole: its least needed columns left out (never its
    `core`), then one space between columns, then the widest text cells wrapped at their spaces, then columns down to
    the first, the rate (samples/s, fio's files/s: what the table is read for) last. Returns it and the headers left
    out."""
    ranked = t.ranked()
    core = max(t.core, 1)
    rate = [i for i in ranked[:core] if t.head[i] in RATES][:1]
    ranked = rate + [i for i in ranked if i not in rate]
    tries = [(n, False, 2) for n in range(len(ranked), core - 1, -1)] + [(core, False, 1)] + [
        (n, True, 1) for n in range(core, 0, -1)]
    for n, wrap, gap in tries:
        most, least = _widths(t, ranked[:n])
        over = _width(console, rich_table(t, most, gap)) - width
        if over > 0 and wrap:  # the widest text column gives a column at a time, down to its longest word
            while over > 0 and any(most[i] > least[i] for i in most):
                i = max((i for i in most if most[i] > least[i]), key=lambda i: most[i])
                most[i] -= 1
                over -= 1
        if over <= 0 or (n, wrap, gap) == tries[-1]:
            return rich_table(t, most, gap), [t.head[i] for i in sorted(ranked[n:])]
    raise AssertionError("unreachable: the last try is returned")


def _width(console: Console, table: Table) -> int:
    """The columns `table` takes, its title aside (a title wraps): rich's measure of it, however wide the screen."""
    return Measurement.get(console, console.options.update_width(100_000), table).maximum

def _same_terminal(a: Console, b: Console) -> bool:
    try:
        return (a.is_terminal and b.is_terminal
                and os.path.samestat(os.fstat(a.file.fileno()), os.fstat(b.file.fileno())))
    except (OSError, ValueError, AttributeError):  # a file without a descriptor (a test's StringIO)
        return False


def _took(t0: float) -> str:
    return f"{clock(time.perf_counter() - t0)} in"


def fit_parts(parts: list[Part], width: int) -> str:
    """A bar's figures within `width` columns: the least needed parts left out first (CORE ones never)."""
    keep = list(parts)
    while cell_len(_joined(keep)) > width:
        drop = [i for i, p in enumerate(keep) if p[2] < CORE]
        if not drop:
            break
        keep.pop(min(drop, key=lambda i: (keep[i][2], -i)))
    return _joined(keep)


def _joined(parts: list[Part]) -> str:
    return "".join(sep + text for sep, text, _ in parts).lstrip(", ")


class _Display(Progress):
    """The live display: per bar, its words, its bar and its figures on one line, never wrapped. The words line up
    while the terminal is wide enough for all but the EXTRA figures; a narrower one loses that line's padding, then
    its least needed figures (`fit_parts`), then the end of its words (an ellipsis)."""

    def get_renderables(self) -> Iterable[Table]:
        if not hasattr(self, "live"):  # rich asks once before the display starts
            return
        width = self.console.width
        rows = [(Text.from_markup(t.description), t, t.fields.get("info")) for t in self.tasks if t.visible]
        pad = max((d.cell_len for d, _, _ in rows), default=0)
        bar = self.columns[0]
        for words, task, info in rows:
            parts: list[Part] = info() if callable(info) else []
            least = cell_len(_joined([p for p in parts if p[2] >= CORE]))
            wanted = cell_len(_joined([p for p in parts if p[2] > EXTRA]))  # a rate is worth more than lining up
            room = width - BAR - 2  # the words and the figures, a space either side of the bar
            own = pad if pad + wanted <= room else min(words.cell_len, max(room - least, 8))
            words = words.copy()
            words.truncate(own, overflow="ellipsis", pad=True)
            figures = Text(fit_parts(parts, room - own), no_wrap=True, overflow="crop")
            figures.truncate(max(room - own, 0))
            line = Table.grid(padding=(0, 1))
            for _ in range(3):
                line.add_column(no_wrap=True)
            line.add_row(words, bar(task) if isinstance(bar, BarColumn) else "", figures)
            yield line
