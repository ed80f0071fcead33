from test_error_docs import ROOT, gen_docs

from iobench.result import Result

DOCS = ROOT / "docs" / "results.md"


def test_docs_list_every_result_field():
    assert DOCS.read_text() == gen_docs().results_markdown(), \
        "regenerate: python3 scripts/gen_docs.py results > docs/results.md"


def test_every_field_is_described():
    def walk(model):
        for name, f in model.model_fields.items():
            assert f.description, f"{model.__name__}.{name} has no description"
    walk(Result)
    from iobench import result as r
    for m in (r.Run, r.Latency, r.Cpu, r.Disk, r.Mount, r.Dataset, r.Host, r.Settings, r.Verdict, r.Metadata,
              r.RawPoint, r.Baseline):
        walk(m)
