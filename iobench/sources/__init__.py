"""Sample sources: where a sample's bytes come from, one module each behind the two protocols below; `open` makes
one by name. The per-sample contract (a reader reads and times, an engine schedules and stores) is
docs/architecture.md's "Read" and "Timed"."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from iobench.errors import UserError

if TYPE_CHECKING:
    from iobench.dataset import Manifest
    from iobench.ui import UI

NAMES = ("files", "lmdb", "tar")


class Reader(Protocol):
    buffer: memoryview  # the last sample's bytes are buffer[:n]; it starts on a page (sources/buffers.py)
    open_ns: int  # time the last read spent opening (0 where a source has no open)
    total_ns: int  # the last read's whole time: open + read to EOF + close
    # answers throttled (and retried) before the last read's: 0 but for objects (503 SlowDown); engines read it
    # where a reader has it. The objects reader also has start(index)/finish() for --in-flight (sources/s3.py).
    throttled: int

    def read(self, index: int) -> int: ...
    # optional: read_into(index, out), straight into the caller's memory (files: sources/files.py)


class Source(Protocol):
    name: str  # "files", "lmdb", "tar", "objects" (files in a bucket): the value of runs[].source
    max_size: int  # bytes of the biggest sample (readers size their buffers by it)

    def __len__(self) -> int: ...

    def reader(self) -> Reader: ...

    def sample_name(self, index: int) -> str:
        """What sample `index` is called in an error (a file's path; "lmdb sample 12")."""
        ...

    def files(self) -> Sequence[str]:
        """The files this source reads: what a cold epoch evicts and the residency check samples."""
        ...

    def describe(self) -> dict:
        """What a result records about this source; a pack's `extra_bytes` and `pack_seconds` among it."""
        ...

    def close(self) -> None:
        """Let go of what the source holds open (envs, shard descriptors); nothing for files."""
        ...


def open(name: str, manifest: Manifest, ui: UI | None = None, *, advice: str | None = None,
         readahead: bool = True) -> Source:
    """The source `name` over the samples of a dataset in a folder (a bucket's: store/s3.py `source`). A pack
    (lmdb, tar) that is missing is made first, beside the dataset, and found there by later runs. `advice`: files,
    posix_fadvise per file; `readahead`: lmdb, the env's."""
    # The modules are imported on use: the protocols stay light to import (engines and fio import them).
    if name == "files":
        from iobench.sources.files import FileSource

        return FileSource(manifest, advice=advice)
    if name not in NAMES:
        raise UserError(f"unknown source {name!r}: {', '.join(NAMES)}")
    from iobench.sources.pack_folder import find_pack
    from iobench.sources.pack_lmdb import pack_lmdb
    from iobench.sources.pack_tar import pack_tar

    found = find_pack(manifest, name)
    if found is None:
        make = pack_lmdb if name == "lmdb" else pack_tar
        with (ui.progress(f"pack {name}", len(manifest), "files") if ui else nullcontext()) as progress:
            rep = make(manifest, progress=progress)
        if ui:
            ui.info(f"packed {rep.samples:,} samples as {name} in {rep.seconds:.1f} s ({rep.bytes / 1e9:.2f} GB)")
        assert isinstance(rep.path, Path)
        found = rep.path
    if name == "lmdb":
        from iobench.sources.lmdb import LmdbSource

        return LmdbSource(found, len(manifest), readahead=readahead)
    from iobench.sources.tar import TarSource

    return TarSource(found)
