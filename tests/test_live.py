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
from iobench.report.facts import runs_table
from iobench.report.format import ms, num
from iobench.result import Result
from iobench.ui import UI

GOLDEN = Path(__file__).parent / "data" / "golden"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


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
