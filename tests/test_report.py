"""Reports from real result files: the HTML in headless Chromium, the Markdown and CSV by parsing them."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import iobench
from rich.console import Console

from iobench.errors import UserError
from iobench.report import load_results, write, write_reports
from iobench.report.charts import shows_trend
from iobench.report.csv_writer import CSV_COLUMNS
from iobench.report.facts import facts, metadata_table, mitigations_table, raw_table, runs_table, training_table
from iobench.report.format import num
from iobench.report.html import render_html
from iobench.report.markdown import render_markdown
from iobench.report.svg import Series, line_chart
from iobench.result import Result
from iobench.ui import UI

EXAMPLE = Path(__file__).parent.parent / "reports" / "example" / "local" / "result.json"  # mitigations, training
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0"]


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> tuple[Result, Result]:
    """Two real results from the CLI on the local disk: a 1,4-thread sweep and a 2-thread one, same dataset. Enough
    small files that the cold runs last over half a second and count (the warm ones may be too short: marked)."""
    base = tmp_path_factory.mktemp("report")
    out1, out2 = base / "a", base / "b"
    iobench("run", "--mount", str(base), "--files", "6000", "--size-dist", "fixed:64kB", "--engine", "threads",
            "--threads", "1,4", "--out", str(out1), check=True)
    iobench("run", "--mount", str(base), "--files", "6000", "--size-dist", "fixed:64kB", "--engine", "threads",
            "--threads", "2", "--no-fio",
            "--no-metadata", "--cache", "cold", "--out", str(out2), check=True)
    return Result.load(out1 / "result.json"), Result.load(out2 / "result.json")


def _find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium; installed with apt-get when missing and root (once), else the tests skip."""
    path = _find_chromium()
    if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], env=env, capture_output=True, timeout=900)
        path = _find_chromium()
    if path is None:
        pytest.skip("headless Chromium is not installed and cannot be installed here (apt-get install chromium, "
                    "as root)")
    return path


def _browse(chromium: str, page: Path, profile: Path) -> tuple[str, list[str]]:
    """(the DOM after load, the console messages) from headless Chromium reading `page` from disk."""
    proc = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=90)
    assert proc.stdout.strip(), f"Chromium printed no DOM (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


class _Dom(HTMLParser):
    """Tags counted, ids, text, and every URL-bearing attribute."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: dict[str, int] = {}
        self.ids: set[str] = set()
        self.urls: list[str] = []
        self.parts: list[str] = []
        self.feed(text)
        self.text = re.sub(r"\s+", " ", " ".join(self.parts))

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for k, v in attrs:
            if k == "id" and v:
                self.ids.add(v)
            if k in ("src", "href", "xlink:href", "action", "data") and v:
                self.urls.append(v)

    def handle_data(self, data):
        self.parts.append(data)


def _self_contained(html_text: str) -> None:
    dom = _Dom(html_text)
    assert dom.urls == [], f"external references in a self-contained report: {dom.urls}"
    assert "<script" not in html_text and "<link" not in html_text and "@import" not in html_text
    assert "url(" not in html_text


# ------------------------------------------------------------------------------------------------ HTML


def test_single_report_in_headless_chromium(results, chromium, tmp_path):
    r = results[0]
    page = tmp_path / "report.html"
    page.write_text(render_html([r]))
    _self_contained(page.read_text())
    dom_text, console = _browse(chromium, page, tmp_path / "profile")
    assert console == [], "console messages:\n" + "\n".join(console)
    dom = _Dom(dom_text)
    # gauge, throughput, latency, timeline: all drawn here as inline SVG
    assert dom.tags.get("svg", 0) >= 4, dom.tags
    assert dom.tags.get("polyline", 0) >= 3 and dom.tags.get("circle", 0) >= 5
    assert {"verdict", "headline", "gpus-fed", "client-fed", "caveats"} <= dom.ids
    assert r.verdict is not None  # the verdict, word for word, line by line
    assert all(re.sub(r"\s+", " ", line) in dom.text for line in r.verdict.text.splitlines())
    assert r.verdict.storage_gpus_fed is not None and r.verdict.client_gpus_fed is not None
    assert "the storage feeds" in dom.text and "fed by this" in dom.text
    gpu = (r.settings.gpu or "").upper()
    assert f"{gpu} GPU" in dom.text and "Limit" in dom.text and "Storage gives (cold)" in dom.text
    assert "Pipeline delivers" in dom.text and r.verdict.answer in dom.text
    assert f"One {gpu} needs" in dom.text and (r.settings.rate_source or "") in dom.text
    for section in ("Environment", "Throughput", "Latency", "fio baseline", "Metadata", "Mitigations",
                    "Training runs", "What-ifs (predictions)", "Little's law"):
        assert section in dom.text, section
    # samples/s over time: drawn only where the main run's timeline can show a trend
    assert ("Samples/s over time" in dom.text) == shows_trend(facts(r).main)
    assert "iobench run --mount" in dom.text  # the command to repeat it
    assert "Small client" in dom.text or (r.host.cpus or 0) > 4


def test_compare_report_in_headless_chromium(results, chromium, tmp_path):
    a, b = results
    page = tmp_path / "compare.html"
    page.write_text(render_html([a, b], names=["system A", "system B"]))
    _self_contained(page.read_text())
    dom_text, console = _browse(chromium, page, tmp_path / "profile")
    assert console == [], "console messages:\n" + "\n".join(console)
    dom = _Dom(dom_text)
    assert "gpus-fed-per-system" in dom.ids and dom.tags.get("svg", 0) >= 3
    assert "Pre-purchase comparison: 2 storage systems" in dom.text
    assert "Side by side" in dom.text and "Winners:" in dom.text
    assert "Not like for like" in dom.text and "reader sweeps differ" in dom.text  # 1,4 against 2
    assert dom.tags.get("details", 0) == 2  # each system in full, folded


def test_chromium_check_sees_console_errors(chromium, tmp_path):
    """The console check above can fail: a malformed SVG attribute shows up as a console message."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><body><svg><rect width="5" height="5/"/></svg></body></html>')
    _, console = _browse(chromium, page, tmp_path / "profile")
    assert console and "height" in console[0]


def test_unfinished_and_bare_results_render(results):
    r = results[0].model_copy(deep=True)
    r.complete, r.verdict, r.finished = False, None, None
    r.runs[-1].complete = False
    html_text = render_html([r])
    assert 'id="incomplete"' in html_text and "Unfinished run (complete: false)" in html_text
    assert "Verdict (provisional)" in html_text  # computed here from what was measured
    md = render_markdown([r])
    assert "Unfinished run" in md and "provisional" in md
    # nothing but the environment: no runs, no fio, no metadata, no mitigations, no verdict
    bare = r.model_copy(update={"runs": [], "metadata": [], "baseline": None, "mitigations": [], "verdict": None})
    html_text = render_html([bare])
    for needle in ("No replay runs", "No metadata phase", "No mitigation phase", "No training runs",
                   "no fio baseline"):
        assert needle in html_text, needle
    assert "Environment" in render_markdown([bare])
    _self_contained(html_text)
    if results[0].baseline and results[0].baseline.points:  # `iobench fio` alone: a baseline, no loader runs
        settings = results[0].settings.model_copy(update={"rate_per_gpu": None, "replay": False})
        fio_only = results[0].model_copy(update={"runs": [], "verdict": None, "settings": settings})
        assert "fio baseline only" in render_html([fio_only])


def test_invalid_runs_are_marked_and_au_never_rounds_up_to_the_target(results):
    r = results[0].model_copy(deep=True)
    train = r.runs[0].model_copy(update={"gpus": 2, "au": 0.8964, "au_min": 0.8999, "consumer_rate": 4677.3,
                                         "batch_size": 256, "delivered_per_s": 9000.0, "valid": False,
                                         "invalid_reason": "5 batches per GPU, fewer than the 11 that AU needs"})
    r.runs.append(train)
    text, md = render_html([r]), render_markdown([r])
    assert "run(s) are marked invalid and left out of the verdict" in text
    assert "starved (invalid)" in text and "89.6%" in text and "90.0%" not in text.split("Training runs")[-1]
    au = [row[t[0].index("AU")] for t in _md_tables(md) if "AU" in t[0] for row in t[1:]]
    assert "89.6%" in au and "90.0%" not in au and "0.89" not in au  # AU by the verdict's rule in every cell


def test_html_escapes_what_it_shows(results):
    r = results[0].model_copy(deep=True)
    r.warnings.append("<script>alert(1)</script> & more")
    text = render_html([r])
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in text


def test_line_chart_axes_are_finite():
    svg = line_chart([Series("s", [(1, 10.0), (4, 40.0), (64, 35.0)], "#000")], title="t", x_label="x",
                     y_label="y", x_log=True, hlines=[(50, "need")])
    assert "nan" not in svg and "inf" not in svg and svg.count("<circle") == 3
    assert line_chart([Series("empty", [], "#000")], title="t", x_label="x", y_label="y") == ""


# ------------------------------------------------------------------------------------------------ Markdown, CSV


def _md_tables(md: str) -> list[list[list[str]]]:
    """Every Markdown table as rows of cells (header first, the |---| line dropped)."""
    tables, cur = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(re.fullmatch(r"-+", c) for c in cells):
                cur.append(cells)
        elif cur:
            tables.append(cur)
            cur = []
    return tables


def test_markdown_parses(results):
    r = results[0]
    md = render_markdown([r])
    tables = _md_tables(md)
    assert len(tables) >= 5  # verdict facts, environment, runs, fio, metadata
    for t in tables:
        assert len({len(row) for row in t}) == 1, t  # every row as wide as its header
    runs = next(t for t in tables if t[0][:3] == ["engine", "pattern", "readers"])
    assert len(runs) == 1 + len(r.runs)
    rates = [float(row[runs[0].index("samples/s")].replace(",", "")) for row in runs[1:]]
    assert rates == pytest.approx([x.samples_per_s for x in r.runs], abs=0.5)
    assert r.verdict is not None and all(line in md for line in r.verdict.text.splitlines())
    least = "at least " if r.verdict.storage_is_lower_bound else ""
    assert f"**The storage feeds {least}{r.verdict.storage_gpus_fed} ×" in md or r.verdict.storage_gpus_range
    assert f"**This client fed {r.verdict.client_gpus_fed}**" in md or r.verdict.client_gpus_range
    cmp = render_markdown(list(results), names=["A", "B"])
    side = next(t for t in _md_tables(cmp) if t[0] == ["metric", "A", "B"])
    assert [row[0] for row in side][1:3] == ["GPUs the storage feeds (one client)", "storage, cold samples/s"]


def test_csv_parses(results, tmp_path):
    a, b = results
    path = tmp_path / "runs.csv"
    write([a, b], csv_path=path, names=["A", "B"])
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames or ()) == CSV_COLUMNS
        rows = list(reader)
    fio = len(a.baseline.points) if a.baseline else 0
    assert len(rows) == len(a.runs) + fio + len(b.runs)
    mine = [row for row in rows if row["system"] == "A" and row["kind"] != "fio"]
    assert [float(row["samples_per_s"]) for row in mine] == pytest.approx([x.samples_per_s for x in a.runs])
    assert [int(row["readers"]) for row in mine] == [x.concurrency for x in a.runs]
    for row in rows:
        assert row["kind"] in ("replay", "training", "mitigation", "fio")
        assert row["cache"] in ("cold", "warm") and float(row["latency_p99_ms"]) >= float(row["latency_p50_ms"])
        assert row["fstype"] == a.mount.fstype and row["engine"] in ("threads", "dataloader", "fio")
    assert sum(row["kind"] == "fio" for row in rows) == fio


# ------------------------------------------------------------------------------------------------ files


def test_write_reports_and_load_errors(results, tmp_path):
    folder = tmp_path / "run"
    written = write_reports(results[0], folder)
    assert written == [folder / "report.html", folder / "report.md"]
    assert all(p.stat().st_size > 1000 for p in written)
    results[0].save(folder / "result.json")
    assert load_results([folder])[0].created == results[0].created  # a folder means its result.json
    paths = write(list(results), tmp_path / "c.html", tmp_path / "c.md", tmp_path / "c.csv")
    assert [p.name for p in paths] == ["c.html", "c.md", "c.csv"]
    with pytest.raises(UserError, match="no result file"):
        load_results([tmp_path / "missing.json"])
    (tmp_path / "other.json").write_text('{"hello": 1}')
    with pytest.raises(UserError, match="other.json is not a usable iobench result: created: Field required"):
        load_results([tmp_path / "other.json"])
    (tmp_path / "text.json").write_text("not JSON")
    with pytest.raises(UserError, match="text.json is not a usable iobench result: Invalid JSON: expected ident at "
                                        "line 1 column 2$"):
        load_results([tmp_path / "text.json"])


# ---------------------------------------------------------------------------------------------- one table, every writer


class _Tables(HTMLParser):
    """Every HTML table as rows of cell texts (header first)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append(re.sub(r"\s+", " ", "".join(self.cell)).strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def _terminal(result: Result) -> list[list[str]]:
    """The terminal summary as a pipe sees it, each table line split into its cells."""
    ui = UI()
    ui.out = Console(file=io.StringIO(), width=160, soft_wrap=True)
    ui.summary(result)
    text = ui.out.file.getvalue()
    return [[c.strip() for c in line.split("│" if "│" in line else "┃")[1:-1]] for line in text.splitlines()
            if line.startswith(("│", "┃"))]


def test_every_writer_prints_the_tables_facts_built(results, tmp_path):
    """Each table is built once (facts) and printed by each writer: the page shows it whole, the Markdown and the
    terminal its narrow form, the CSV the same runs' figures."""
    for r in (results[0], Result.load(EXAMPLE)):
        tables = [t for t in (runs_table(r), metadata_table(r), raw_table(r), mitigations_table(r), training_table(r))
                  if t is not None]
        assert len(tables) >= 3
        page = _Tables(render_html([r])).tables
        md = [[[c.strip("*") for c in row] for row in t] for t in _md_tables(render_markdown([r]))]
        term = _terminal(r)
        for t in tables:
            assert [list(t.head), *map(list, t.rows)] in page, t.title
            n = t.narrow()
            assert [list(n.head), *map(list, n.rows)] in md, t.title
            if t.title.startswith("training"):
                continue  # the terminal shows training runs in the runs table
            assert list(n.head) in term, t.title
            for row in n.rows:
                assert list(row) in term, (t.title, row)
        path = tmp_path / "runs.csv"
        write([r], csv_path=path)
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        runs = runs_table(r)
        rate, readers = runs.head.index("samples/s"), runs.head.index("readers")
        csv_runs = [row for row in rows if row["kind"] != "fio"]
        assert len(csv_runs) == len(runs.rows)
        for row, cells in zip(csv_runs, runs.rows, strict=True):
            assert num(float(row["samples_per_s"])) == cells[rate] and row["readers"] in cells[readers]
        fio = raw_table(r)
        if fio is not None:
            assert [num(float(row["samples_per_s"])) for row in rows if row["kind"] == "fio"] == \
                [row[fio.head.index("files/s")] for row in fio.rows]
