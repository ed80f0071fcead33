"""iobench's own cost per sample, from a real run through the CLI: each run's and each fio point's CPU per sample is
its CPU seconds over its samples, decode counted apart when --decode is given, and the runs table shows it."""

import pytest
from conftest import iobench

from iobench.report.facts import runs_table
from iobench.report.format import num
from iobench.result import Result


def test_cpu_per_sample_is_cpu_seconds_over_samples(tmp_path):
    out = tmp_path / "out"
    iobench("run", "--mount", str(tmp_path), "--files", "1000", "--size-dist", "fixed:8kB", "--engine", "threads",
            "--threads", "1", "--cache", "warm", "--no-metadata", "--out", str(out), check=True)
    r = Result.load(out / "result.json")
    assert r.runs
    for x in r.runs:
        assert x.cpu.iobench_cpu_s is not None and x.samples == 1000
        assert x.cpu_us_per_sample == pytest.approx(1e6 * x.cpu.iobench_cpu_s / x.samples, abs=0.01)
        assert x.decode_cpu_us_per_sample is None and x.cpu.decode_cpu_s is None  # no decode: nothing apart
    assert any(x.cpu_us_per_sample > 0 for x in r.runs)
    table = runs_table(r)
    col = table.head.index("CPU us/sample")
    assert [row[col] for row in table.rows] == [num(x.cpu_us_per_sample, 1) for x in r.runs]
    for b in r.baseline.fio if r.baseline and r.baseline.fio_version else []:
        assert b.cpu_s is not None and b.files > 0  # fio's jobs' own CPU, from its JSON
        assert b.cpu_us_per_sample == pytest.approx(1e6 * b.cpu_s / b.files, abs=0.01)


def test_decode_is_counted_apart(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "out"
    iobench("run", "--mount", str(tmp_path), "--files", "160", "--size-dist", "fixed:40kB", "--engine", "dataloader",
            "--workers", "1", "--batch-size", "16", "--decode", "--cache", "warm", "--no-fio", "--no-metadata",
            "--out", str(out), check=True)
    x = Result.load(out / "result.json").runs[0]
    assert x.decode and x.cpu.iobench_cpu_s is not None and x.cpu.decode_cpu_s is not None
    assert x.cpu_us_per_sample == pytest.approx(1e6 * x.cpu.iobench_cpu_s / x.samples, abs=0.01)
    assert x.decode_cpu_us_per_sample == pytest.approx(1e6 * x.cpu.decode_cpu_s / x.samples, abs=0.01)
    # decode's own CPU is part of the whole (each process's CPU is counted in 10 ms clock ticks: that much slack)
    assert 0 < x.decode_cpu_us_per_sample <= x.cpu_us_per_sample + 1e6 * 0.02 / x.samples
