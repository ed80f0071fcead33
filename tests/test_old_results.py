"""Results written by earlier versions still load, report and compare, and what they say of the raw baseline names
the tool that ran it: fio on files, awscrt (the AWS CRT's S3 client) on a bucket.

The files are real results as the iobench of schema iobench.result/1 wrote them, kept as written: tests/data/v1 (the
last /1: fio on local files; awscrt on a SeaweedFS bucket; a distributed job of two ranks, no raw baseline) and
tests/data/golden/local.json (an earlier /1, before `baseline.tool` existed). Each command is the real CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import iobench

from iobench.result import READS, SCHEMA, Result

DATA = Path(__file__).parent / "data"
FIO = DATA / "v1" / "files-fio.json"
BUCKET = DATA / "v1" / "bucket-awscrt.json"
DISTRIBUTED = DATA / "v1" / "distributed.json"
EARLIER = DATA / "golden" / "local.json"
OLD = (FIO, BUCKET, DISTRIBUTED, EARLIER)


@pytest.mark.parametrize("path", OLD, ids=lambda p: p.stem)
def test_an_old_result_loads_with_its_figures_under_the_new_names(path: Path) -> None:
    raw = json.loads(path.read_text())
    assert raw["schema"] == "iobench.result/1" != SCHEMA and raw["schema"] in READS
    r = Result.load(path)
    assert r.schema_ == "iobench.result/1"  # the version it was written in, as a report says it
    assert r.settings.raw_baseline is raw["settings"]["fio"]
    old = raw.get("baseline")
    if old is None:
        assert r.baseline is None
        return
    assert r.baseline is not None
    assert r.baseline.tool == old.get("tool", "fio")
    assert r.baseline.tool_version == (old.get("tool_version") or old["fio_version"])
    assert len(r.baseline.points) == len(old["fio"]) > 0
    for p, o in zip(r.baseline.points, old["fio"], strict=True):
        assert (p.samples, p.samples_per_s, p.runs_samples_per_s, p.program) == \
            (o["files"], o["files_per_s"], o.get("runs_files_per_s", []), o["job"])
        assert (p.concurrency, p.cache, p.bytes, p.seconds, p.json_file) == \
            (o["concurrency"], o["cache"], o["bytes"], o["seconds"], o.get("json_file"))


def _report(path: Path, out: Path) -> tuple[str, str, list[dict[str, str]]]:
    iobench("report", str(path), "--md", str(out / "r.md"), "--html", str(out / "r.html"), "--csv",
            str(out / "r.csv"), check=True)
    with (out / "r.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    return (out / "r.md").read_text(), (out / "r.html").read_text(), rows


def test_the_report_of_an_old_fio_result_names_fio(tmp_path: Path) -> None:
    r = Result.load(FIO)
    assert r.baseline is not None
    md, html, rows = _report(FIO, tmp_path)
    assert "## fio baseline" in md and f"<p>fio {r.baseline.tool_version} read the same files" in html
    assert "| vs fio |" in md and "| jobs | cache | files/s |" in md
    assert "fio cold (jobs)" in html
    raw = [row for row in rows if row["kind"] == "fio"]
    assert len(raw) == len(r.baseline.points) and {(x["engine"], x["source"]) for x in raw} == {("fio", "files")}


def test_the_report_of_an_old_bucket_result_names_the_crt_client_never_fio(tmp_path: Path) -> None:
    r = Result.load(BUCKET)
    assert r.baseline is not None and r.mount.objects
    md, html, rows = _report(BUCKET, tmp_path)
    assert "## raw baseline (awscrt)" in md
    assert f"<p>awscrt {r.baseline.tool_version} (the AWS CRT's native S3 client" in html.replace("&#39;", "'")
    assert "| vs awscrt |" in md and "| in flight | cache | objects/s |" in md
    assert "awscrt cold (in flight)" in html
    assert "fio" not in md.lower() and "fio" not in html.lower()  # /1 reports said fio in the chart and the CSV
    raw = [row for row in rows if row["engine"] == "awscrt"]
    assert len(raw) == len(r.baseline.points) and {(x["kind"], x["source"]) for x in raw} == {("awscrt", "objects")}
    assert not any(row["kind"] == "fio" for row in rows)


def test_the_report_of_an_old_distributed_result_loads_its_ranks(tmp_path: Path) -> None:
    r = Result.load(DISTRIBUTED)
    assert r.distributed is not None and r.ranks and r.baseline is None and not r.settings.raw_baseline
    md, _, rows = _report(DISTRIBUTED, tmp_path)
    assert "No fio baseline in this result." in md and all(row["kind"] != "fio" for row in rows)
    assert len(rows) == len(r.runs)


def test_compare_names_the_raw_row_by_the_tools_that_ran(tmp_path: Path) -> None:
    md = tmp_path / "c.md"
    iobench("compare", *map(str, OLD), "--md", str(md), "--html", str(tmp_path / "c.html"), "--csv",
            str(tmp_path / "c.csv"), check=True)
    rows = {line.split("|")[1].strip(): line for line in md.read_text().splitlines() if line.startswith("| ")}
    raw = rows["raw baseline (fio, awscrt) cold samples/s (best)"]
    for path in OLD:
        r = Result.load(path)
        best = max((p.samples_per_s for p in r.baseline.points if p.cache == "cold"), default=None) \
            if r.baseline else None
        assert (f"{best:,.0f}" if best is not None else "-") in raw
    assert "fio cold files/s (best)" not in md.read_text()
    # fio alone names fio's files/s, as before
    iobench("compare", str(FIO), str(EARLIER), "--md", str(md), "--html", str(tmp_path / "f.html"), "--csv",
            str(tmp_path / "f.csv"), check=True)
    assert "| fio cold files/s (best) |" in md.read_text() and "awscrt" not in md.read_text()
