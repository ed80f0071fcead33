"""What a person watching a terminal sees: a run's live display read from a pseudo-terminal while it runs (the
phase, its place in the run, a rate and an ETA, fio's phase included, redrawn at least every 2 s), and the runs
table at 80 and 120 columns (no cut figure; at 120 one line per row)."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from conftest import make_dataset
from rich.console import Console

from iobench.progress import Plan, Step, clock
from iobench.report.facts import efficiency_table, runs_table
from iobench.report.format import ms, num
from iobench.result import Result
from iobench.ui import CORE, EXTRA, UI, fit_parts

GOLDEN = Path(__file__).parent / "data" / "golden"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")
BAR = re.compile("[━╸╺]")


def _drawn(text: str) -> list[str]:
    """The lines a terminal shows, from what was written to it: split where the cursor moves to a line's start
    (carriage return, newline, or the live display's erase-and-move-up), escapes taken out."""
    return [ANSI.sub("", piece) for piece in re.split(r"\r|\n|\x1b\[1A|\x1b\[2K", text)]


def _live_lines_fit(text: str, width: int) -> list[str]:
    """The live display's lines in `text`, each checked to hold its bar and its figures on one line no wider
    than `width` (a wrapped line leaves its figures, an ETA or a time, on a line of their own, with no bar)."""
    drawn = [line.rstrip() for line in _drawn(text)]
    live = [line for line in drawn if BAR.search(line)]
    assert live, drawn[-40:]
    too_wide = [line for line in live if len(line) > width]
    assert not too_wide, too_wide[:5]
    orphans = [line for line in drawn if not BAR.search(line) and re.search(r"(ETA \S+|\d+s in)$", line)]
    assert not orphans, orphans[:5]
    return live


def _terminal(width: int) -> tuple[UI, io.StringIO]:
    ui = UI()
    buf = io.StringIO()
    ui.out = Console(file=buf, width=width, force_terminal=True, color_system=None)
    return ui, buf


@pytest.mark.parametrize("case", ["local", "sshfs"])
@pytest.mark.parametrize("width", [80, 120])
def test_the_runs_table_fits_the_terminal_with_every_figure_whole(case, width):
    result = Result.load(GOLDEN / f"{case}.json")
    ui, buf = _terminal(width)
    ui.table(runs_table(result))
    lines = buf.getvalue().splitlines()
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    text = buf.getvalue()
    assert "…" not in text and "..." not in text
    rows = [line for line in lines if line.startswith(("DataLoader", "threads", "decode"))]
    for r in result.runs:  # what matters most stays, whole: samples/s, MB/s, p99
        for figure in (num(r.samples_per_s), num(r.mb_per_s, 1), ms(r.latency_ms.p99)):
            assert re.search(rf"(?<![\d.,]){re.escape(figure)}(?![\d.,])", text), (figure, text)
    if width == 120:  # one line per row, each holding its own figures
        assert len(rows) == len(result.runs), text
        for r, line in zip(result.runs, rows, strict=True):
            assert num(r.samples_per_s) in line and ms(r.latency_ms.p99) in line, line
    assert "not shown at" in text  # the columns left out are named


def test_a_table_narrower_than_the_terminal_is_shown_whole():
    result = Result.load(GOLDEN / "local.json")
    ui, buf = _terminal(400)
    ui.table(runs_table(result))
    assert "not shown" not in buf.getvalue()
    assert "p99.9 ms" in buf.getvalue().replace("\n", " ") or "p99.9" in buf.getvalue()


def test_the_run_eta_comes_from_the_rates_measured_so_far():
    plan = Plan([Step("replay", "cold, 1 thread", 1000, "replay cold"),
                 Step("replay", "cold, 2 threads", 2000, "replay cold"),
                 Step("fio", "cold, 1 job", 1000, "fio cold")])
    assert plan.run_left() is None  # nothing measured yet
    plan.start("replay", "cold, 1 thread", 1000, "replay cold")
    plan.t0 -= 2.0  # as if it took 2 s
    plan.end()
    plan.start("replay", "cold, 2 threads", 2000, "replay cold")
    assert plan.place() == (2, 2, 2, 3)
    left = plan.run_left()
    assert left is not None and 5.5 < left < 6.5  # 2,000 samples at 500/s, then fio at the mean step (2 s)
    assert clock(left) in ("6s", "5s") and clock(125) == "2m05s" and clock(None) == "?"


def test_a_bar_drops_its_least_needed_figures_first():
    parts = [("", "2,455 files/s", CORE), (" ", "19.6 MB/s", EXTRA), (", ", "run 2/2", 1), (", ", "ETA 7s", CORE),
             (", ", "18s in", EXTRA)]
    assert fit_parts(parts, 80) == "2,455 files/s 19.6 MB/s, run 2/2, ETA 7s, 18s in"
    assert fit_parts(parts, 40) == "2,455 files/s 19.6 MB/s, run 2/2, ETA 7s"  # the time in goes first
    assert fit_parts(parts, 32) == "2,455 files/s, run 2/2, ETA 7s"  # then MB/s
    assert fit_parts(parts, 10) == "2,455 files/s, ETA 7s"  # the core stays, however narrow


@pytest.mark.parametrize("width", [60, 80, 160])
def test_the_live_display_never_wraps(width):
    """Every kind of bar at once, the longest words a run has (the metadata pass, the warming, a long step): one line
    each, within the terminal."""
    ui = UI()
    buf = io.StringIO()
    ui.err = Console(file=buf, width=width, force_terminal=True, color_system="standard")  # a bar drawn whole
    plan = Plan([Step("mitigations", "lmdb, shuffled cold, 16 workers", 25_000, "m")] * 12)
    with ui.run_plan(plan), ui.step("mitigations", "lmdb, shuffled cold, 16 workers", 25_000), \
            ui.status("metadata, cold: listing 25,000 files, stat, open+close"), \
            ui.progress("warming the page cache (not measured)", 1_250_000) as warm, \
            ui.fio_progress("fio, cold: 1,250,000 files, 16 jobs") as fio, \
            ui.progress("gen", 1_250_000, "files") as gen, \
            ui.progress("gen s3://iobench/demo", 20_000, "objects") as put:
        warm(625_000)
        fio(50.0, (123_456.0, 9_876.5), (2, 3), 3_725.0)
        gen(1_000, 10_000_000)
        put(1_000, 10_000_000)
        assert ui._prog is not None
        ui._prog.refresh()
    live = _live_lines_fit(buf.getvalue(), width)
    text = "\n".join(live)
    assert "123,456 files/s" in text and "ETA 1h02m" in text and "625,000/1,250,000" in text
    if width >= 80:  # narrower, a rate gives way to the count and the ETA
        assert re.search(r"1,000/20,000 [\d,]+ objects/s", text), text  # a bucket's gen counts objects
    if width >= 160:
        assert "9,876.5 MB/s" in text and "run 2/3" in text


def test_at_80_columns_an_epoch_keeps_its_rate_under_a_long_step_line():
    """A run's usual display at 80 columns: the epoch's line gives up lining up with the step's words before it
    gives up its rate."""
    ui = UI()
    buf = io.StringIO()
    ui.err = Console(file=buf, width=80, force_terminal=True, color_system="standard")
    plan = Plan([Step("replay", "cold, 2 threads", 20_000, "r")] * 5)
    with ui.run_plan(plan), ui.step("replay", "cold, 2 threads", 20_000), \
            ui.progress("shuffled cold   2 threads", 20_000) as epoch:
        epoch(2_794)
        assert ui._prog is not None
        ui._prog.refresh()
    live = _live_lines_fit(buf.getvalue(), 80)
    assert any(re.search(r"2,794/20,000 [\d,]+ samples/s, ETA \S+", line) for line in live), live


def _pty_run(argv: list[str], width: int, timeout_s: float) -> tuple[int, list[tuple[float, str]]]:
    """Run argv with its stdout and stderr on a pseudo-terminal `width` columns wide; each chunk read, timed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, width, 0, 0))
    env = {**os.environ, "COLUMNS": str(width), "LINES": "50", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks: list[tuple[float, str]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append((time.monotonic(), data.decode("utf-8", "replace")))
            elif proc.poll() is not None:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        rc = proc.wait(timeout=30)
        os.close(master)
    return rc, chunks


def test_a_run_in_a_terminal_shows_its_phase_place_rate_and_eta_while_it_runs(tmp_path):
    mount = tmp_path / "m"
    mount.mkdir()
    make_dataset(mount, 12_000, "fixed:8kB")
    argv = [sys.executable, "-m", "iobench.cli", "run", "--mount", str(mount), "--files", "12000", "--size-dist",
            "fixed:8kB", "--engine", "threads", "--threads", "1", "--cache", "cold", "--epochs", "2",
            "--no-metadata", "--out", str(tmp_path / "out")]
    rc, chunks = _pty_run(argv, 120, timeout_s=600)
    text = "".join(c for _, c in chunks)
    plain = ANSI.sub("", text)
    assert rc == 0, plain[-3000:]
    # the phase and its place in the run, as the run's line says it
    assert re.search(r"replay 1/2: cold, 1 thread \(step 1 of 3\)", plain), plain[-3000:]
    assert re.search(r"replay 2/2: cold, 1 thread \(step 2 of 3\)", plain)
    assert re.search(r"fio 1/1: cold, 1 job \(step 3 of 3\)", plain)
    # an ETA for the run once a step is measured, and the epoch's own rate and ETA
    assert re.search(r"run ETA \d", plain)
    assert re.search(r"[\d,]+/12,000 [\d,]+ samples/s, ETA \d", plain)
    # fio's phase: its rate and ETA from its progress
    assert re.search(r"fio, cold: 12,000 files, 1 job.*[\d,]+ files/s [\d,.]+ MB/s(, run \d/\d)?, ETA \d", plain)
    # redrawn at least every 2 s from the first step to the verdict
    start = next(t for t, c in chunks if "(step 1 of" in ANSI.sub("", c))
    end = next(t for t, c in chunks if "verdict:" in ANSI.sub("", c))
    times = [t for t, _ in chunks if start <= t <= end]
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) <= 2.0
    # each phase's table as it ends: the runs table before fio's progress
    assert plain.index("samples/s") < plain.rindex("fio, cold")


def test_iobench_fio_shows_its_live_bar_within_80_columns(tmp_path):
    """The standalone `iobench fio`: the same bar as a run's fio phase (its step, files/s and ETA), no line wider
    than the terminal."""
    mount = tmp_path / "m"
    mount.mkdir()
    make_dataset(mount, 20_000, "fixed:8kB")
    argv = [sys.executable, "-m", "iobench.cli", "fio", "--mount", str(mount), "--files", "20000", "--size-dist",
            "fixed:8kB", "--threads", "2", "--cache", "cold", "--out", str(tmp_path / "out")]
    rc, chunks = _pty_run(argv, 80, timeout_s=600)
    text = "".join(c for _, c in chunks)
    assert rc == 0, ANSI.sub("", text)[-3000:]
    live = "\n".join(_live_lines_fit(text, 80))
    assert re.search(r"fio 1/1: cold, 2 jobs \(step 1 of 1\)", live), live[-2000:]
    assert re.search(r"fio, cold: 20,000 files, 2 jobs +\S+ [\d,]+ files/s.*, ETA \d", live), live[-2000:]


def test_the_runs_table_before_fio_leaves_vs_fio_to_the_efficiency_table_printed_after_it():
    """Printed as the replay ends, the runs table has no fio to compare with: no column of dashes, a line saying
    where the comparison comes; once fio has run, only the comparison is printed (not the whole table again)."""
    done = Result.load(GOLDEN / "local.json")
    ratios = [r.efficiency for r in done.runs]
    assert any(x is not None for x in ratios)
    early = done.model_copy(deep=True)
    early.baseline = None
    for r in early.runs:
        r.efficiency = None
    ui, buf = _terminal(120)
    ui.plan = Plan([Step("replay", "cold, 1 thread", 1000, "replay cold"), Step("fio", "cold, 1 job", 1000, "fio")])
    ui.plan.start("replay", "cold, 1 thread", 1000, "replay cold")
    ui.plan.end()
    ui.tables(early)
    first = buf.getvalue()
    assert "samples/s" in first and "vs fio" not in first.split("\n  vs fio:")[0], first
    assert "  vs fio: in the efficiency table, once fio has run" in first
    assert not re.search(r"\s-\s*$", first.split("\n")[4]), first  # no trailing column of dashes
    ui.plan.start("fio", "cold, 1 job", 1000, "fio")
    ui.plan.end()
    ui.tables(done)
    later = buf.getvalue()[len(first):]
    assert "efficiency" in later and "(continued)" not in later, later
    eff = efficiency_table(done)
    assert eff is not None and eff.rows
    for row in eff.rows:
        assert re.search(rf"{re.escape(row[2])} +{re.escape(row[3])}\n", later), (row, later)
    assert later.count(num(done.runs[0].samples_per_s)) <= 1  # the runs are not printed again


def test_rank_0_of_a_distributed_run_shows_the_jobs_progress(tmp_path):
    """`run --ranks 2` in a terminal: rank 0's bar counts every rank's samples of the epoch's total (past its own
    share of 600), with the job's rate and an ETA; the other rank shows nothing (its stderr is not the terminal's
    display); nothing wider than the terminal."""
    mount = tmp_path / "m"
    mount.mkdir()
    make_dataset(mount, 1200)
    argv = [sys.executable, "-m", "iobench.cli", "run", "--ranks", "2", "--mount", str(mount), "--files", "1200",
            "--batch-size", "16", "--workers", "1", "--cache", "cold", "--rate", "100", "--epochs", "1", "--no-fio",
            "--no-metadata", "--out", str(tmp_path / "out")]
    rc, chunks = _pty_run(argv, 80, timeout_s=300)
    text = "".join(c for _, c in chunks)
    assert rc == 0, ANSI.sub("", text)[-3000:]
    live = _live_lines_fit(text, 80)
    counts = [int(m.group(1).replace(",", "")) for line in live
              if (m := re.search(r"epoch 1 cold, 2 ranks +\S+ ([\d,]+)/1,200 [\d,]+ samples/s, ETA \d", line))]
    assert counts and max(counts) > 600, live  # the job's samples, not rank 0's share alone
    assert counts == sorted(counts)
    assert not any("rank 1" in line for line in live)


def test_a_warning_printed_as_it_came_is_not_repeated_as_a_note_at_the_end():
    """A warning goes to stderr when it comes; the summary's notes recap only what was not printed then (a note the
    run never warned of, read from the result, is still shown)."""
    done = Result.load(GOLDEN / "local.json").model_copy(deep=True)
    done.warnings = ["warned while it ran", "only in the result"]
    ui, buf = _terminal(120)
    err = io.StringIO()
    ui.err = Console(file=err, width=120, color_system=None)
    ui.warn("warned while it ran")
    ui.summary(done)
    assert err.getvalue().count("warned while it ran") == 1
    assert "warned while it ran" not in buf.getvalue(), buf.getvalue()
    assert "note: only in the result" in buf.getvalue(), buf.getvalue()
