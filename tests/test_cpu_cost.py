"""iobench's own cost per sample, from a real run through the CLI: each run's and each fio point's CPU per sample is
its CPU seconds over its samples, decode counted apart when --decode is given, and the runs table shows it; the
client's CPU ceiling (cores / CPU per sample) in the result and the verdict's evidence; the caveat when iobench's
reading costs over 1.5x fio's."""

import pytest
from conftest import iobench
from test_verdict import H200, _fio, _result, _run

from iobench.answer.client import ceiling, verdict
from iobench.answer.rules import costlier_than_fio
from iobench.phases.pipeline import finish
from iobench.report.facts import caveats, runs_table
from iobench.report.format import num
from iobench.result import Result


def test_cpu_per_sample_is_cpu_seconds_over_samples(tmp_path):
    out = tmp_path / "out"
    iobench("run", "--mount", str(tmp_path), "--files", "1000", "--size-dist", "fixed:8kB", "--engine", "threads",
            "--threads", "1", "--cache", "warm", "--no-metadata", "--out", str(out), check=True)
    r = Result.load(out / "result.json")
    assert r.runs
    for x in r.runs:
        assert x.cpu.iobench_cpu_s is not None and x.samples == 1000 * x.passes  # a short warm epoch: passes
        assert x.cpu_us_per_sample == pytest.approx(1e6 * x.cpu.iobench_cpu_s / x.samples, abs=0.01)
        assert x.decode_cpu_us_per_sample is None and x.cpu.decode_cpu_s is None  # no decode: nothing apart
    assert any(x.cpu_us_per_sample > 0 for x in r.runs)
    table = runs_table(r)
    col = table.head.index("CPU us/sample")
    assert [row[col] for row in table.rows] == [num(x.cpu_us_per_sample, 1) for x in r.runs]
    for b in r.baseline.points if r.baseline and r.baseline.tool_version else []:
        assert b.cpu_s is not None and b.samples > 0  # fio's jobs' own CPU, from its JSON
        assert b.cpu_us_per_sample == pytest.approx(1e6 * b.cpu_s / b.samples, abs=0.01)


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


def _saturated(us: float, decode_us: float | None = None, usable: float = 2.0) -> Result:
    """A client whose CPU set the pace (iobench used 1.9 of 2 cores), each run measuring `us` of CPU per sample."""
    extra = {"cpu_us_per_sample": us, "decode_cpu_us_per_sample": decode_us}
    runs = [_run(1, 900, cores=1.8, **extra), _run(4, 1100, cores=1.9, **extra), _run(16, 1150, cores=1.95, **extra)]
    return _result(runs, fio=[_fio(4, 2400, cores=0.5)], usable=usable, **H200)


@pytest.mark.parametrize("decode_us", [None, 900.0])
def test_the_ceiling_in_the_verdicts_evidence_is_cores_over_cpu_per_sample(tmp_path, decode_us):
    result = _saturated(1700.0, decode_us)
    finish(result, tmp_path / "result.json")
    v = result.verdict
    assert v is not None and v.limit == "client-cpu"
    top = ceiling(result)
    assert top is not None and top.run.samples_per_s == 1150  # the pipeline's run
    assert top.samples_per_s == pytest.approx(2.0 / 1700e-6, abs=0.01) == result.host.client_ceiling_samples_per_s
    line = next(x for x in v.evidence if x.startswith("This client's CPU ceiling"))
    assert f"~{2.0 / 1700e-6:,.0f} samples/s = its 2 cores / 1,700.0 us of CPU per sample" in line
    assert ("900.0 us of it decoding" in line) == (decode_us is not None)
    # the cores one GPU needs, at the same measured CPU per sample: 0.9 x 1,000 samples/s x 1,700 us = 1.53
    assert any(x.startswith("At the 1,700.0 us of CPU per sample measured here") and "~1.6 cores" in x
               for x in v.evidence)
    assert Result.load(tmp_path / "result.json").host.client_ceiling_samples_per_s == top.samples_per_s


def test_no_ceiling_without_a_cpu_per_sample():
    result = _saturated(1700.0)
    result.runs = [r.model_copy(update={"cpu_us_per_sample": None}) for r in result.runs]
    assert ceiling(result) is None
    assert not any(x.startswith("This client's CPU ceiling") for x in verdict(result).evidence)


def test_a_path_costlier_than_fios_is_a_caveat():
    fio = _fio(4, 2400).model_copy(update={"cpu_s": 0.4, "cpu_us_per_sample": 20.0})
    runs = [_run(1, 900, cpu_us_per_sample=25.0), _run(4, 1100, cpu_us_per_sample=50.5)]
    result = _result(runs, fio=[fio])
    assert [(r.concurrency, round(x, 3)) for r, _, x in costlier_than_fio(result)] == [(4, 2.525)]
    (line,) = [c for c in caveats(result) if c.startswith("iobench's own path")]
    assert "1.5x fio's CPU per sample in 1 run(s)" in line and "50.5 us of reading against fio's 20.0" in line
    # decode is not reading: a run that decodes is set against fio by its reading alone
    runs = [_run(4, 1100, cpu_us_per_sample=1050.0, decode_cpu_us_per_sample=1020.0)]
    assert not costlier_than_fio(_result(runs, fio=[fio]))
    # a DataLoader's reading lands each batch's bytes in memory, which fio's does not: the caveat says so
    runs = [_run(4, 1100, engine="dataloader", workers=4, cpu_us_per_sample=50.5)]
    (line,) = [c for c in caveats(_result(runs, fio=[fio])) if c.startswith("iobench's own path")]
    assert "2.5x; a DataLoader's includes landing each batch's bytes in memory" in line
