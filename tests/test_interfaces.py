"""Every source and every engine has the whole interface its protocol declares (iobench/sources/__init__.py,
iobench/engines/__init__.py): callers use it as such, never probing with hasattr/getattr."""

from __future__ import annotations

import ast
import ctypes
import mmap
from pathlib import Path

import pytest
from conftest import make_dataset

from iobench import engines, sources
from iobench.engines import Engine
from iobench.engines.threads import ThreadEngine
from iobench.errors import UserError
from iobench.result import Result, Settings
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
    for name in ("phases/pipeline.py", "phases/epoch.py"):
        tree = ast.parse(Path(__file__).parents[1].joinpath("iobench", name).read_text())
        probes = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                  and n.func.id == "hasattr"]
        assert not probes, f"hasattr in {name} at lines {probes}"


@pytest.mark.parametrize("name", ["files", "lmdb", "tar"])
def test_sources_open_packs_once_and_every_source_reads_the_same_bytes(tmp_path, name):
    m = make_dataset(tmp_path, 40, "fixed:8KiB", classes=2)
    src = sources.open(name, m)
    try:
        assert src.name == name and len(src) == len(m)
        assert src.files() and all(Path(f).is_file() for f in src.files())
        assert (src.costs() == (None, None)) is (name == "files")  # a pack's bytes and time, none for files
        reader = src.reader()
        n = reader.read(7)
        assert bytes(reader.buffer[:n]) == Path(m.paths[7]).read_bytes()
        assert address(reader.buffer) % mmap.PAGESIZE == 0  # where the copy lands: sources/buffers.py
    finally:
        src.close()
    again = sources.open(name, m)  # the pack is found beside the dataset, not made again
    assert list(again.files()) == list(src.files())
    again.close()


def test_the_file_reader_reads_into_the_callers_memory_or_its_own_buffer_when_it_does_not_fit(tmp_path):
    m = make_dataset(tmp_path, 4, "fixed:8KiB", classes=1)
    reader = FileSource(m).reader()
    want = Path(m.paths[2]).read_bytes()
    out = bytearray(len(want) + 100)
    n = reader.read_into(2, memoryview(out))
    assert n == len(want) and bytes(out[:n]) == want and 0 < reader.open_ns <= reader.total_ns
    small = bytearray(100)  # shorter than the sample: it is in the reader's buffer, whole
    n = reader.read_into(2, memoryview(small))
    assert n == len(want) and bytes(reader.buffer[:n]) == want


def test_a_file_reader_whose_sample_outgrew_its_buffer_keeps_it_on_a_page(tmp_path):
    """A file bigger than the manifest said (it grew after gen) is read whole into a bigger buffer, on a page too."""
    m = make_dataset(tmp_path, 2, "fixed:8KiB", classes=1)
    reader = FileSource(m).reader()
    grown = Path(m.paths[1]).read_bytes() * 20  # 160 KiB: past the buffer and past the EOF read's 64 KiB
    Path(m.paths[1]).write_bytes(grown)
    n = reader.read(1)
    assert n == len(grown) and bytes(reader.buffer[:n]) == grown
    assert len(reader.buffer) > len(grown) and address(reader.buffer) % mmap.PAGESIZE == 0


def address(buffer: memoryview) -> int:
    """The address of a writable buffer's first byte."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def test_engines_make_the_engine_the_settings_name():
    settings = Settings(orders=["shuffled"], concurrency=[3], cache=["cold"], epochs=1, seed=0, engine="threads")
    engine = engines.make(settings, 3)
    assert isinstance(engine, ThreadEngine) and engine.concurrency == 3
    with pytest.raises(UserError, match="--decode needs --engine dataloader"):
        engines.make(settings.model_copy(update={"decode": True}), 3)


def test_run_kind_is_derived_and_survives_a_round_trip():
    example = Path(__file__).parents[1] / "reports" / "example" / "local" / "result.json"
    run = Result.load(example).runs[0].model_copy(update={"mitigation": None, "gpus": None})
    assert run.kind == "replay"
    assert run.model_copy(update={"gpus": 2}).kind == "training"
    assert run.model_copy(update={"mitigation": "lmdb"}).kind == "mitigation"
    again = type(run).model_validate_json(run.model_copy(update={"gpus": 2}).model_dump_json())
    assert again.kind == "training"
