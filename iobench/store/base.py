"""The Store and Home protocols: a dataset's home, whatever holds it, behind the operations iobench needs of it
(docs/architecture.md, "One storage interface, two backends", tables them for both backends). What differs between
backends is said by their values (`items`, `raw`, `client_cache`, `probes`, `entry`), never asked by type."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from iobench.dataset.folder import Manifest
from iobench.s3.url import S3Location
from iobench.safefs import fmt_bytes
from iobench.sources.pack_folder import PackReport, Progress

if TYPE_CHECKING:
    from iobench.result import Metadata
    from iobench.sources import Source
    from iobench.ui import UI

Location = Path | S3Location  # where one dataset lives: a folder, or a bucket's prefix
Content = Callable[[int], Sequence[bytes | memoryview]]  # the bytes of the k-th sample written, in parts


@dataclass
class Cleaned:
    """One entry where iobench's datasets live and what clean did (or would do) with it."""

    path: Path | S3Location
    kind: str  # "dataset", "pack", or "" (kept: not iobench's)
    removed: bool  # removed (with --dry-run: would be)
    why: str = ""  # why it was kept
    files: int = 0
    bytes: int = 0
    packs: list[str] = field(default_factory=list)  # packs inside a dataset (relative paths)
    left: list[str] = field(default_factory=list)  # what was left inside (mount points; objects not iobench's)
    left_why: str = "a mount point: another file system"  # what the left entries are
    unit: str = "files"  # what `files` counts (objects in a bucket)

    def line(self, dry_run: bool) -> str:
        if not self.removed:
            return f"kept {self.path}: {self.why}"
        verb = "would remove" if dry_run else "removed"
        packs = f"; with its pack(s) {', '.join(self.packs)}" if self.packs else ""
        left = f"; left {', '.join(self.left)} ({self.left_why})" if self.left else ""
        return f"{verb} {self.kind} {self.path} ({self.files:,} {self.unit}, {fmt_bytes(self.bytes)}){packs}{left}"


class Home(Protocol):
    """One dataset's place in a store, open (for gen: made, checked, completed). Keys are relative paths
    (`train/n00000000/n00000000_00000000.JPEG`), the same in a folder and under a prefix."""

    @property
    def where(self) -> Location:
        """Where the dataset is (a folder, or a bucket's prefix): what messages name it by."""
        ...

    def marker(self) -> dict | None:
        """The dataset's marker (checked: a one-line error when it is not one), or None where there is none."""
        ...

    def only_leftovers(self) -> bool:
        """Whether the place holds nothing but what a writer interrupted before its first marker leaves."""
        ...

    def entries(self) -> tuple[list[str], np.ndarray]:
        """The manifest's keys and sizes; FileNotFoundError when there is no manifest."""
        ...

    def entry_line(self, index: int) -> int:
        """The line of the manifest that holds its index-th entry (for an error naming it)."""
        ...

    def sizes(self, keys: list[str], threads: int, stop: threading.Event) -> np.ndarray:
        """The size of every key's sample there (-1: missing), listed or stat-ed on `threads` threads."""
        ...

    def writing(self) -> AbstractContextManager[object]:
        """Held while this process writes the dataset: a second writer is refused (one line naming the first)."""
        ...

    def put_marker(self, marker: dict) -> None:
        """Write the marker so that a reader never sees half of it."""
        ...

    def put_manifest(self, keys: list[str], sizes: np.ndarray) -> None:
        """Write the manifest (keys and sizes, in the order `sequential` reads them)."""
        ...

    def put_samples(self, keys: list[str], ids: list[int], lengths: list[int], content: Content, threads: int,
                    progress: Progress | None, stop: threading.Event) -> tuple[int, int]:
        """Write the samples keys[ids[k]] (lengths[k] bytes, content(k)) on `threads` writers, stopping within a
        sample when `stop` is set; (samples, bytes) written."""
        ...

    def sync(self) -> None:
        """Return once what was written is on the storage (the marker says complete only then)."""
        ...

    def manifest(self, expect: tuple[Sequence[str], np.ndarray] | None = None) -> Manifest:
        """The dataset's Manifest as a run reads it; with `expect` (keys and sizes just checked), derived again
        where a cached form of it holds anything else."""
        ...

    def close(self) -> None:
        ...


class Store(Protocol):
    """Where iobench's datasets live (see the module)."""

    items: str  # what a sample is there, in words: "files", "objects"
    raw: str  # the raw baseline's program: "fio" (files), "awscrt" (objects)
    client_cache: bool  # whether a read leaves the sample in this host's cache (else warm is the second read)
    probes: str  # what the metadata phase times after listing: "stat, open+close", "HEAD, first byte"
    entry: str  # what holds one dataset there, in words: "folder", "dataset" (a prefix)

    @property
    def url(self) -> str:
        """What messages name it by: the mount (resolved once checked), or s3://BUCKET/PREFIX."""
        ...

    def check(self, *, writable: bool) -> None:
        """A one-line EnvironmentRefused (exit code 3) when the store cannot be read (or, for `writable`,
        written)."""
        ...

    def probe(self, timeout_s: float | None) -> None:
        """Ask the storage something it must answer itself, bounded by `timeout_s`, before any work there: one
        that already stopped answering is StorageStalled (exit 3), not a hang."""
        ...

    def root(self) -> Location:
        """Where its datasets are (MOUNT/iobench-data), as messages name it."""
        ...

    def location(self, name: str) -> Location:
        """Where the dataset `name` lives, made or not."""
        ...

    def names(self) -> list[str]:
        """The datasets there that carry iobench's marker, sorted."""
        ...

    def marker(self, name: str) -> dict | None:
        """The marker of the dataset `name` (see Home.marker)."""
        ...

    def open(self, name: str, *, create: bool) -> Home | None:
        """The dataset `name`'s Home (made when `create`); None when it is not there. The caller closes it."""
        ...

    def free_bytes(self) -> int:
        """Bytes a dataset may still take there."""
        ...

    def writers(self) -> int:
        """gen's writers where --threads is not given."""
        ...

    def lock(self, dataset: Location) -> AbstractContextManager[object]:
        """Held while one process runs on the dataset: DatasetBusy (exit code 3, naming the holder) for a second."""
        ...

    def clean(self, *, dry_run: bool) -> list[Cleaned]:
        """Remove (or list) what carries iobench's marker there, and nothing else."""
        ...

    def evict(self, files: Sequence[str], *, timeout_s: float | None) -> str | None:
        """Drop the client's cache of these files before a cold epoch; how (None: there is no client cache)."""
        ...

    def resident(self, files: Sequence[str], *, seed: int = 0, timeout_s: float | None) -> float | None:
        """The fraction of a sample of the files in the client's cache; None where that cannot be told."""
        ...

    def describe(self, dataset: Location) -> dict:
        """What the result records about where the dataset lives (the `mount` object of result.json)."""
        ...

    def place(self, dataset: Location) -> tuple[str, str]:
        """(kind, where): the file system type and mount point holding the dataset, made or not (a result folder's
        name is made of them)."""
        ...

    def source(self, name: str, manifest: Manifest, ui: UI | None = None, *, advice: str | None = None,
               readahead: bool = True, stream: bool = False) -> Source:
        """The source `name` (a layout: files, lmdb, tar) over the dataset's samples; a missing pack is made first
        (see sources.open). `advice`: per-file posix_fadvise; `readahead`: LMDB's; `stream`: a tar pack read a
        shard per request."""
        ...

    def pack(self, manifest: Manifest, fmt: str, *, shard_size: int, progress: Progress | None) -> PackReport:
        """The dataset packed as `fmt` (lmdb, tar) beside it, made or reused (`iobench pack`)."""
        ...

    def metadata(self, manifest: Manifest, state: str, scale_files: int, seed: int = 0,
                 timeout_s: float | None = None) -> Metadata:
        """One pass of the metadata phase (list, then stat and open of a sample, each timed) in this cache state."""
        ...

    def raw_command(self, dataset: Location, keys: str, in_flight: int,
                    io_timeout_s: float) -> tuple[list[str], dict[str, str]]:
        """The raw baseline's command line and environment reading the keys listed in the file `keys` (relative to
        its working folder) with `in_flight` requests at once, giving up a throttled sample within `io_timeout_s`
        (fio's is phases/fio_job.py's, on files)."""
        ...

    def raw_version(self) -> str | None:
        """The raw baseline's version where it is not fio (None: not installed)."""
        ...

    def fuse_folders(self, dataset: Location, mount: Path) -> list[Path]:
        """Where a FUSE mount at `mount` would hold the dataset (none for a folder: it is already files)."""
        ...
