from pathlib import Path

from iobench.result import Result, docs_markdown

DOCS = Path(__file__).resolve().parent.parent / "docs" / "results.md"


def test_docs_list_every_result_field():
    assert DOCS.read_text() == docs_markdown(), "regenerate: python -m iobench.result > docs/results.md"


def test_every_field_is_described():
    def walk(model):
        for name, f in model.model_fields.items():
            assert f.description, f"{model.__name__}.{name} has no description"
    walk(Result)
    from iobench import result as r
    for m in (r.Run, r.Latency, r.Cpu, r.Disk, r.Mount, r.Dataset, r.Host, r.Settings, r.Verdict, r.Metadata,
              r.RawPoint, r.Baseline):
        walk(m)
