"""The same results render the same: two real results (reports/example's local-disk and sshfs runs, frozen here) as
HTML, Markdown and CSV, alone and compared, line for line as the texts kept beside them (tests/data/golden/rendered/).
A refactor that moves code must leave them equal; a change meant to alter what a report says writes them again on
purpose, and their diff in the commit shows what a user now reads:

    python3 tests/test_rendering_kept.py      # rewrites tests/data/golden/rendered/
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import pytest

from iobench.report import write
from iobench.report.html import render_html
from iobench.report.markdown import render_markdown
from iobench.result import Result

GOLDEN = Path(__file__).parent / "data" / "golden"
KEPT = GOLDEN / "rendered"
CASES = {"local": ["local"], "sshfs": ["sshfs"], "compare": ["local", "sshfs"]}


def _rendered(case: str, tmp: Path) -> dict[str, str]:
    results = [Result.load(GOLDEN / f"{name}.json") for name in CASES[case]]
    names = CASES[case] if len(results) > 1 else None
    csv_path = tmp / f"{case}.csv"
    write(results, csv_path=csv_path, names=names)
    return {"html": render_html(results, names=names), "md": render_markdown(results, names=names),
            "csv": csv_path.read_text()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_results_render_as_kept(case: str, tmp_path: Path) -> None:
    for kind, text in _rendered(case, tmp_path).items():
        kept = (KEPT / f"{case}.{kind}").read_text()
        if text != kept:
            diff = difflib.unified_diff(kept.splitlines(), text.splitlines(), f"kept {case}.{kind}",
                                        f"rendered {case}.{kind}", lineterm="", n=1)
            pytest.fail(f"{case}.{kind} renders differently; if meant, write the kept texts again: python3 {__file__}"
                        "\n" + "\n".join(list(diff)[:60]))


if __name__ == "__main__":
    import tempfile

    KEPT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            for kind, text in _rendered(case, Path(tmp)).items():
                (KEPT / f"{case}.{kind}").write_text(text)
    print(f"wrote {KEPT}", file=sys.stderr)
