"""docs/errors.md lists every error a user can meet, with its exit code: generated from the source
(scripts/gen_docs.py), kept in step."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "errors.md"


def gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_list_every_error():
    assert DOCS.read_text() == gen_docs().errors_markdown(), \
        "regenerate: python3 scripts/gen_docs.py errors > docs/errors.md"


def test_the_catalogue_finds_errors_of_both_codes_from_the_source():
    docs = gen_docs()
    found = docs.catalogue()
    codes = {code for code, _, _ in found}
    assert codes == {2, 3} and set(docs.EXIT_CODES) == {0, 1, 2, 3, 129, 130, 141, 143}
    assert any("--repeat must be >= 1" in text and where == "iobench/cli/options.py" for _, text, where in found)
    assert any(code == 3 and "does not exist" in text for code, text, _ in found)  # a missing mount
