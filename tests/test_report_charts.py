"""The report's charts read right: cold and warm on scales of their own, a timeline only where it shows a trend,
no text on a plot's lines, wide tables scrolling inside the page. On a saved result, no measuring."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from iobench.report.charts import MIN_TREND_POINTS, _rates, main_timeline, shows_trend, throughput_charts
from iobench.report.facts import facts
from iobench.report.html import render_html
from iobench.report.svg import TICK_CHAR_PX, Series, bar_chart, line_chart
from iobench.result import Result

EXAMPLE = Path(__file__).parent.parent / "reports" / "example" / "local" / "result.json"  # cold and warm runs


def _texts(svg: str) -> list[tuple[float, float, str, str]]:
    """(x, y, class, text) of every positioned <text> (the rotated axis label has none)."""
    return [(float(x), float(y), cls, text) for x, y, cls, text in
            re.findall(r'<text x="([\d.]+)" y="([\d.]+)"[^>]*class="(\w+)">([^<]*)</text>', svg)]


def test_cold_and_warm_throughput_on_scales_of_their_own():
    r = Result.load(EXAMPLE)
    figs = throughput_charts(r, facts(r))
    assert len(figs) == 2
    cold, warm = (dict.fromkeys(t for *_, cls, t in _texts(f.svg) if cls == "legend") for f in figs)
    assert cold and all("warm" not in name for name in cold)
    assert warm and all("cold" not in name for name in warm)
    # the cold chart's scale ends near the cold rates, far below the warm ones that flattened it on a shared axis
    ticks = [float(t.replace(",", "").replace("k", "e3")) for *_, cls, t in _texts(figs[0].svg) if cls == "tick"
             and re.fullmatch(r"[\d,.]+k?", t)]
    best_warm = max(x.samples_per_s for x in r.runs if x.cache == "warm" and x.kind == "replay")
    assert max(ticks) < best_warm / 2


def test_the_timeline_is_drawn_only_with_enough_points_for_a_trend():
    r = Result.load(EXAMPLE)
    f = facts(r)
    assert f.main is not None
    steps = [(round(0.2 * i, 3), 1000 * i) for i in range(MIN_TREND_POINTS + 3)]
    long = dataclasses.replace(f, main=f.main.model_copy(update={"timeline": steps}))
    short = dataclasses.replace(f, main=f.main.model_copy(update={"timeline": steps[:3]}))
    assert shows_trend(long.main) and main_timeline(long) is not None
    assert not shows_trend(short.main) and main_timeline(short) is None


def test_the_last_partial_interval_of_a_timeline_is_dropped():
    """Ticks every 0.2 s at 1,000 samples/s, then the epoch ends 8 ms after the last tick with a batch of 256: that
    interval's 32,000/s is an artefact, not a spike the storage made."""
    steps = [(round(0.2 * i, 3), 200 * i) for i in range(8)]
    end = [*steps, (steps[-1][0] + 0.008, steps[-1][1] + 256)]
    assert max(rate for _, rate in _rates(end)) == pytest.approx(1000) and _rates(end) == _rates(steps)
    full = [*steps, (steps[-1][0] + 0.15, steps[-1][1] + 150)]  # most of an interval: kept, it is a measurement
    assert _rates(full)[-1] == (steps[-1][0] + 0.15, pytest.approx(1000))


def test_no_text_on_the_plot_area():
    """Reference lines are named in the legend, above the plot: no label sits on a line."""
    svg = line_chart([Series("cold, shuffled", [(1, 100.0), (4, 380.0), (16, 420.0)], "#000"),
                      Series("warm, shuffled", [(1, 900.0), (4, 2400.0), (16, 2500.0)], "#f00", dash=True)],
                     title="t", x_label="readers", y_label="samples/s", x_log=True,
                     hlines=[(400, "1 H200 needs 400/s")])
    x, y, w, h = (float(v) for v in re.search(r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" '
                                               r'height="([\d.]+)" class="plot"', svg).groups())
    texts = _texts(svg)
    assert any(t == "1 H200 needs 400/s" for *_, t in texts)
    for tx, ty, _, t in texts:
        assert not (x < tx < x + w and y < ty < y + h), f"{t!r} at ({tx}, {ty}) on the plot"


def test_bar_chart_marks_do_not_overlap():
    crowded = [(k * 100.0, f"{k} H200" if k == 1 else str(k)) for k in range(1, 13)]
    close = [(1000.0, "1 H200 needs"), (1050.0, "2 H200s"), (1100.0, "3 H200s")]
    for marks in (crowded, close):
        svg = bar_chart([("storage, cold", 1150.0, "#000"), ("page cache, warm", 1190.0, "#f00")], title="t",
                        x_label="samples/s", marks=marks, label_width=130)
        labels = [(x, y, t) for x, y, cls, t in _texts(svg) if cls == "reftext"]
        assert len(labels) == len(marks)
        for i, (x1, y1, t1) in enumerate(labels):
            for x2, y2, t2 in labels[i + 1:]:
                if y1 == y2:
                    assert abs(x1 - x2) >= TICK_CHAR_PX * (len(t1) + len(t2)) / 2, (t1, t2)


def test_wide_tables_scroll_inside_the_page():
    page = render_html([Result.load(EXAMPLE)])
    assert re.search(r'<div class="scroll"><table>\s*<thead><tr><th class="l">engine</th>', page)
    assert ".scroll { max-width: 100%; overflow-x: auto;" in page
