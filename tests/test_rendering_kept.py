"""The same results render the same: two real results (reports/example's local-disk and sshfs runs, frozen here) as
HTML, Markdown and CSV, alone and compared, byte for byte as when the digests beside them were taken. A refactor
that moves code must leave them equal; a change meant to alter what a report says takes the digests again on
purpose (and its diff of reports/example shows what changed):

    python3 tests/test_rendering_kept.py      # rewrites tests/data/golden/rendered.sha256
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from iobench.report import write
from iobench.report.html import render_html
from iobench.report.markdown import render_markdown
from iobench.result import Result

GOLDEN = Path(__file__).parent / "data" / "golden"
DIGESTS = GOLDEN / "rendered.sha256"
CASES = {"local": ["local"], "sshfs": ["sshfs"], "compare": ["local", "sshfs"]}


def _rendered(case: str, tmp: Path) -> dict[str, str]:
    results = [Result.load(GOLDEN / f"{name}.json") for name in CASES[case]]
    names = CASES[case] if len(results) > 1 else None
    csv_path = tmp / f"{case}.csv"
    write(results, csv_path=csv_path, names=names)
    return {"html": render_html(results, names=names), "md": render_markdown(results, names=names),
            "csv": csv_path.read_text()}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("case", sorted(CASES))
def test_results_render_as_kept(case: str, tmp_path: Path) -> None:
    kept = json.loads(DIGESTS.read_text())
    for kind, text in _rendered(case, tmp_path).items():
        (tmp_path / f"{case}.{kind}").write_text(text)
        assert _digest(text) == kept[f"{case}.{kind}"], (
            f"{case}.{kind} renders differently (now: {tmp_path / f'{case}.{kind}'}); if meant, take the digests "
            f"again: python3 {__file__}")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        digests = {f"{case}.{kind}": _digest(text) for case in CASES
                   for kind, text in _rendered(case, Path(tmp)).items()}
    DIGESTS.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    print(f"wrote {DIGESTS}", file=sys.stderr)
