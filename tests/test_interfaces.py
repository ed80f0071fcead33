"""Every source and every engine has the whole interface its protocol declares (iobench/sources/__init__.py,
iobench/engines/__init__.py): callers use it as such, never probing with hasattr/getattr."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from iobench.engines import Engine
from iobench.engines.threads import ThreadEngine
from iobench.sources import Source
from iobench.sources.files import FileSource
from iobench.sources.lmdb import LmdbSource
from iobench.sources.tar import TarSource


def _members(protocol: type) -> set[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {k for k, v in vars(protocol).items() if callable(v) and not k.startswith("_")}
    return names | ({"__len__"} if "__len__" in vars(protocol) else set())


@pytest.mark.parametrize("cls", [FileSource, LmdbSource, TarSource])
def test_every_source_declares_the_whole_protocol(cls):
    methods = {k for k in _members(Source) if callable(getattr(Source, k, None))}
    assert methods <= set(dir(cls)), methods - set(dir(cls))
    assert "sample_name" in methods and "close" in methods


def test_the_file_source_and_the_engines_have_every_member(small_dataset):
    src = FileSource(small_dataset)
    assert _members(Source) <= set(dir(src))
    assert src.sample_name(3) == small_dataset.paths[3]
    engines: list = [ThreadEngine(2)]
    try:
        from iobench.engines.dataloader import DataLoaderEngine

        engines.append(DataLoaderEngine(2, batch_size=8))
    except ImportError:
        pass
    for engine in engines:
        missing = _members(Engine) - set(dir(engine))
        assert not missing, (type(engine).__name__, missing)
        engine.close()
    assert (engines[0].workers, engines[0].batch_size) == (None, None)


def test_the_runner_does_not_probe_engines_or_sources():
    tree = ast.parse(Path(__file__).parents[1].joinpath("iobench", "runner.py").read_text())
    probes = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id == "hasattr"]
    assert not probes, f"hasattr in runner.py at lines {probes}"
