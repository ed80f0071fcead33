"""Terminal output: live progress on stderr, tables and the verdict on stdout (rich).

When stdout carries data (`--json -`), every human line goes to stderr instead; `quiet` leaves only the verdict
line (and errors)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from iobench.result import Result
from iobench.verdict import au_cell


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

    def verdict(self, text: str) -> None:
        """The verdict line: on stdout, even when quiet; on stderr when stdout carries data; quiet then: nothing."""
        if not (self.quiet and self.stdout_free):
            self.out.print(f"[bold]verdict:[/] {text}", highlight=False)

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
        """Tables of what was measured (metadata, loader runs, fio baseline), then the notes."""
        if self.quiet:
            return
        if result.metadata:
            t = Table(title=f"metadata: {result.metadata[0].files:,} files in {result.metadata[0].dirs} folders, "
                            "one thread")
            for col in ("cache", "list s", "stat/s", "stat p99 ms", "open+close/s", "open p99 ms",
                        f"list at {result.metadata[0].scale_files:,} files (predicted)"):
                t.add_column(col, justify="left" if col == "cache" else "right")
            for m in result.metadata:
                t.add_row(m.cache, f"{m.list_s:.3f}", f"{m.stat_per_s:,.0f}", f"{m.stat_ms.p99:.3f}",
                          f"{m.open_close_per_s:,.0f}", f"{m.open_close_ms.p99:.3f}", f"{m.projected_list_s:,.1f} s")
            self.out.print(t)
        if result.runs:
            t = Table(title=f"{result.mount.fstype} at {result.mount.path}: {result.dataset.files:,} files, "
                            f"{result.dataset.bytes / 1e9:.2f} GB (MB = 10^6 B)")
            for col in ("engine", "readers", "cache", "measures", "files/s", "MB/s", "p50 ms", "p99 ms",
                        "p99.9 ms", "cores used", "vs fio", "GPUs", "AU"):
                t.add_column(col, justify="left" if col in ("engine", "cache", "measures") else "right")
            for r in result.runs:
                engine = "threads" if r.engine == "threads" else ("decode " if r.decode else "") + "DataLoader"
                readers = f"{r.concurrency} thr" if r.workers is None else f"{r.workers} wkr"
                what = f" [{r.mitigation}]" if r.mitigation else ("" if r.order == "shuffled" else f" ({r.order})")
                t.add_row(engine + what, readers,
                          r.cache + ("" if r.complete else " (interrupted)") + ("" if r.valid else " INVALID"),
                          r.measures, f"{r.samples_per_s:,.0f}", f"{r.mb_per_s:,.1f}", f"{r.latency_ms.p50:.3f}",
                          f"{r.latency_ms.p99:.3f}", f"{r.latency_ms.p999:.3f}",
                          f"{r.cpu.iobench_cores:.2f}" if r.cpu.iobench_cores is not None else "-",
                          f"{r.efficiency:.2f}" if r.efficiency is not None else "-",
                          str(r.gpus) if r.gpus else "-", au_cell(r.au))
            self.out.print(t)
        if any(st.repeats > 1 for st in result.stats):
            t = Table(title=f"over {result.settings.repeat} repeats: steady-state samples/s (epochs after the first)")
            for col in ("engine", "readers", "cache", "repeats", "mean", "std", "spread", "stable"):
                t.add_column(col, justify="left" if col in ("engine", "cache", "stable") else "right")
            for st in result.stats:
                t.add_row(st.engine, str(st.readers), st.cache, str(st.repeats), f"{st.mean_samples_per_s:,.0f}",
                          "-" if st.std_samples_per_s is None else f"{st.std_samples_per_s:,.0f}",
                          "-" if st.spread is None else f"{100 * st.spread:.1f}%",
                          "UNSTABLE (> 5%)" if st.unstable else "yes")
            self.out.print(t)
        if result.baseline and result.baseline.fio:
            t = Table(title=f"fio {result.baseline.fio_version} on {result.baseline.fio[0].files:,} of the files")
            for col in ("jobs", "cache", "files/s", "MB/s", "read p50 ms", "read p99 ms"):
                t.add_column(col, justify="left" if col == "cache" else "right")
            for b in result.baseline.fio:
                t.add_row(str(b.concurrency), b.cache, f"{b.files_per_s:,.0f}", f"{b.mb_per_s:,.1f}",
                          f"{b.latency_ms.p50:.3f}", f"{b.latency_ms.p99:.3f}")
            self.out.print(t)
        if result.mitigations:
            t = Table(title="mitigations: cold, same pattern and readers as the baseline")
            for col in ("mitigation", "source", "samples/s", "speed-up", "extra space", "pack time", "GPUs fed"):
                t.add_column(col, justify="left" if col in ("mitigation", "source") else "right")
            for m in result.mitigations:
                t.add_row(m.name, m.source, f"{m.samples_per_s:,.0f}", f"{m.speedup:.2f}x",
                          f"{m.extra_bytes / 1e9:.2f} GB" if m.extra_bytes else "-",
                          f"{m.pack_s:.1f} s" if m.pack_s else "-",
                          str(m.gpus_fed) if m.gpus_fed is not None else "-")
            self.out.print(t)
        for r in result.runs:
            if not r.valid:
                self.out.print(f"[yellow]invalid:[/] epoch {r.epoch} ({r.cache}, {r.concurrency} readers"
                               + (f", {r.gpus} GPUs" if r.gpus else "") + f"): {r.invalid_reason}", highlight=False)
        for w in result.warnings + ([result.baseline.note] if result.baseline and result.baseline.note else []):
            self.out.print(f"[yellow]note:[/] {w}", highlight=False)
