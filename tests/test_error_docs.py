"""docs/errors.md lists every error a user can meet, with its exit code: generated from the source, kept in step."""

from pathlib import Path

from iobench.errors import EXIT_CODES, catalogue, docs_markdown

DOCS = Path(__file__).resolve().parent.parent / "docs" / "errors.md"


def test_docs_list_every_error():
    assert DOCS.read_text() == docs_markdown(), "regenerate: python -m iobench.errors > docs/errors.md"


def test_the_catalogue_finds_errors_of_both_codes_from_the_source():
    found = catalogue()
    codes = {code for code, _, _ in found}
    assert codes == {2, 3} and set(EXIT_CODES) == {0, 1, 2, 3, 129, 130, 141, 143}
    assert any("--repeat must be >= 1" in text and where == "iobench/cli/options.py" for _, text, where in found)
    assert any(code == 3 and "does not exist" in text for code, text, _ in found)  # a missing mount
