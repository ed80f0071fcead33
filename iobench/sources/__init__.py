"""Sample sources: where a sample's bytes come from, one module each behind the two protocols below; `open` makes
one by name. The per-sample contract (a reader reads and times, an engine schedules and stores) is
docs/architecture.md's "Read" and "Timed"."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Protocol, TypeVar

from iobench.errors import UserError

if TYPE_CHECKING:
    from iobench.dataset import Manifest
    from iobench.sources.pack_folder import PackReport, Progress
    from iobench.ui import UI

NAMES = ("files", "lmdb", "tar")
T = TypeVar("T")


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

    def costs(self) -> tuple[int | None, float | None]:
        """A pack's costs, as its mitigation records them: the bytes it takes and the seconds making it took (None,
        None for samples read where they are)."""
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
    from iobench.sources.pack_folder import DEFAULT_SHARD_SIZE, find_pack

    found = made(manifest, name, ui, lambda: find_pack(manifest, name),
                 lambda progress: pack(manifest, name, DEFAULT_SHARD_SIZE, progress), "packed", lambda rep: name)
    if name == "lmdb":
        from iobench.sources.lmdb import LmdbSource

        return LmdbSource(found, len(manifest), readahead=readahead)
    from iobench.sources.tar import TarSource

    return TarSource(found)


def pack(manifest: Manifest, fmt: str, shard_size: int, progress: Progress | None) -> PackReport:
    """A folder's dataset packed as `fmt` in its default place, made or reused (a bucket's: pack_s3.py)."""
    from iobench.sources.pack_lmdb import pack_lmdb
    from iobench.sources.pack_tar import pack_tar

    return (pack_lmdb(manifest, progress=progress) if fmt == "lmdb" else
            pack_tar(manifest, shard_size=shard_size, progress=progress))


def made(manifest: Manifest, fmt: str, ui: UI | None, find: Callable[[], T | None],
         make: Callable[[Progress | None], PackReport], verb: str, what: Callable[[PackReport], str]) -> T:
    """The pack `find` finds; a missing one is made first (`make`, under a progress bar, then a line: `verb` so many
    samples as `what`) and found again, for a folder's packs and a bucket's alike."""
    found = find()
    if found is None:
        with (ui.progress(f"pack {fmt}", len(manifest), "files") if ui else nullcontext()) as progress:
            rep = make(progress)
        if ui:
            ui.info(f"{verb} {rep.samples:,} samples as {what(rep)} in {rep.seconds:.1f} s ({rep.bytes / 1e9:.2f} GB)")
        found = find()
        if found is None:
            raise UserError(f"the {fmt} pack of {manifest.root} was {verb} but is not found complete: is another "
                            "iobench packing it?")
    return found
