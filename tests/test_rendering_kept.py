"""The same results render the same: two real results (reports/example's local-disk and sshfs runs, frozen here) as
HTML, Markdown and CSV, alone and compared, byte for byte against the files kept beside them. A refactor that moves
code must leave these equal; a change meant to alter what a report says regenerates them on purpose:

    python3 tests/test_rendering_kept.py      # rewrites tests/data/golden/*.{html,md,csv}; review the diff
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from iobench.report.csv_writer import write_csv
from iobench.report.html import render_html
from iobench.report.markdown import render_markdown
from iobench.result import Result

GOLDEN = Path(__file__).parent / "data" / "golden"
CASES = {"local": ["local"], "sshfs": ["sshfs"], "compare": ["local", "sshfs"]}


def _rendered(case: str, tmp: Path) -> dict[str, str]:
    results = [Result.load(GOLDEN / f"{name}.json") for name in CASES[case]]
    names = CASES[case] if len(results) > 1 else None
    csv_path = tmp / f"{case}.csv"
    write_csv(results, csv_path, names=names)
    return {"html": render_html(results, names=names), "md": render_markdown(results, names=names),
            "csv": csv_path.read_text()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_results_render_as_kept(case: str, tmp_path: Path) -> None:
    for kind, text in _rendered(case, tmp_path).items():
        kept = (GOLDEN / f"{case}.{kind}").read_text()
        assert text == kept, f"{case}.{kind} renders differently: regenerate with `python3 {__file__}` if meant"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            for kind, text in _rendered(case, Path(tmp)).items():
                (GOLDEN / f"{case}.{kind}").write_text(text)
                print(f"wrote {GOLDEN / f'{case}.{kind}'}", file=sys.stderr)
