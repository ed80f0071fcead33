"""The second Store: a bucket's prefix, s3://BUCKET/PREFIX/<name>/ (docs/s3.md, "Where things are"). A PUT is atomic
(a reader never sees half an object), so markers need no rename; it also overwrites, so gen writes only under a
prefix that is empty or carries iobench's marker. Control requests (list, head, put, delete) go through boto3 with a
few retries; the reading is the sources' (iobench/sources/s3.py, s3_tar.py)."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager, suppress
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import iobench
from iobench.dataset.folder import CHUNK, MARKER, MARKER_LIMIT, Manifest, check_marker, entry_line, run_bounded
from iobench.dataset.paths import MANIFEST, PathTable, parse_tsv, tsv_bytes
from iobench.errors import UserError
from iobench.result import Metadata
from iobench.s3.clients import (
    READ_CONNECTIONS,
    READ_RETRIES,
    boto3_client,
    explain,
    get_small,
    put_small,
    quiet_metadata_service,
    region,
    versions,
)
from iobench.s3.raw import NAME, version
from iobench.s3.url import S3Location
from iobench.sources import made
from iobench.sources.pack_folder import PACK_MARKER, PACKED, PackReport, Progress
from iobench.sources.pack_s3 import PAGE, S3Pack, below, delete, find_pack, listing, pack_tar_s3
from iobench.store import lock
from iobench.store.base import Cleaned, Content, Location
from iobench.store.metadata import measure

if TYPE_CHECKING:
    from iobench.sources import Source
    from iobench.ui import UI

WRITERS = 32  # gen's writers where --threads is not given: a PUT mostly waits for its round trip
STOP_S = 0.5  # gen stopped (Ctrl-C): how long its PUTs in flight may take to end before it exits without them
OBJECT_SAMPLE = 2_000  # HEADs and first-byte GETs: each a round trip of milliseconds, one at a time as start-up does


class S3Store:
    """The datasets under s3://BUCKET/PREFIX (see the module); a Store."""

    items, raw, client_cache, probes, entry = "objects", NAME, False, "HEAD, first byte", "dataset"

    def __init__(self, loc: S3Location, *, timeout_s: float = 60.0):
        quiet_metadata_service()
        self.loc = loc
        self.timeout_s = timeout_s

    @cached_property
    def client(self) -> Any:  # made on first use: opening a store touches nothing
        return boto3_client(self.loc, connections=WRITERS, timeout_s=self.timeout_s)

    @property
    def url(self) -> str:
        return str(self.loc)

    def check(self, *, writable: bool) -> None:
        """The bucket answers to these credentials (a HEAD of it, bounded by the time-out): no endpoint, no
        credentials, no bucket and no access are each one line (exit 3). Writing is known at the first PUT."""
        try:
            self.client.head_bucket(Bucket=self.loc.bucket)
        except Exception as exc:
            raise explain(exc, self.loc, "checking the bucket of") from None

    def probe(self, timeout_s: float | None) -> None:
        self.check(writable=False)  # a HEAD of the bucket, bounded by the store's time-out

    def root(self) -> S3Location:
        return self.loc

    def location(self, name: str) -> S3Location:
        return self.loc / name

    def names(self) -> list[str]:
        """The prefixes directly under PREFIX/ that hold iobench's marker."""
        try:
            return [name for name in below(self.client, self.loc)
                    if name and self._exists(self.location(name).key(MARKER))]
        except Exception as exc:
            raise explain(exc, self.loc, "listing the datasets under") from None

    def _exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.loc.bucket, Key=key)
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def marker(self, name: str) -> dict | None:
        return S3Home(self, self.location(name)).marker()

    def open(self, name: str, *, create: bool) -> S3Home | None:
        home = S3Home(self, self.location(name))
        return home if create or not home.only_leftovers() else None

    def free_bytes(self) -> int:
        return sys.maxsize  # a bucket has no free space to ask for: a full one refuses a PUT, said then

    def writers(self) -> int:
        return WRITERS

    def lock(self, dataset: Location) -> AbstractContextManager[object]:
        return lock.hold(dataset)

    def clean(self, *, dry_run: bool) -> list[Cleaned]:
        """Each dataset that carries iobench's marker: its manifest's keys, the manifest and the marker (last)
        deleted; a key under it that iobench did not write is left and named. A dataset a run on this host
        holds is kept."""
        done = []
        for name in self.names():
            home = S3Home(self, self.location(name))
            try:
                with lock.hold(home.where), home.writing():  # not while a run reads it or a gen writes it here
                    done.append(home.clean(dry_run))
            except lock.DatasetBusy as exc:
                done.append(Cleaned(home.where, "", False, why=str(exc)))
        return done

    def evict(self, files: Sequence[str], *, timeout_s: float | None) -> str | None:
        return None  # no client cache: there is nothing of the bucket in this host's page cache

    def resident(self, files: Sequence[str], *, seed: int = 0, timeout_s: float | None) -> float | None:
        return 0.0  # none of it: every read goes to the server (an epoch's figures are the storage's)

    def describe(self, dataset: Location) -> dict:
        """The result's `mount` object for a bucket: the endpoint and bucket (no credential), the client and the
        settings that matter."""
        dataset = _loc(dataset)
        details: dict[str, str | int | None] = {
            "endpoint": dataset.endpoint or "AWS S3", "bucket": dataset.bucket, "prefix": dataset.prefix,
            "client": dataset.client, "profile": dataset.profile, "path_style": str(dataset.path_style).lower(),
            "read_retries": READ_RETRIES[dataset.client],
            # s3torchconnector's CRT sizes its own pool by its throughput target (10 Gbps: ~26), as a job's has it
            "read_connections": None if dataset.client == "s3torchconnector" else READ_CONNECTIONS,
            **{f"version_{k}": v for k, v in versions().items()}}
        return {"path": str(self.loc), "source": dataset.endpoint or "AWS S3", "fstype": "s3", "options": "",
                "family": "object", "device": None, "read_ahead_kb": None, "bdi": "", "details": details,
                "unread": []}

    def place(self, dataset: Location) -> tuple[str, str]:
        return "s3", str(self.loc)

    def pack(self, manifest: Manifest, fmt: str, *, shard_size: int, progress: Progress | None) -> PackReport:
        """tar shards uploaded beside the dataset (an LMDB is not made in a bucket: refused before)."""
        return pack_tar_s3(manifest, shard_size=shard_size, progress=progress)

    def source(self, name: str, manifest: Manifest, ui: UI | None = None, *, advice: str | None = None,
               readahead: bool = True, stream: bool = False) -> Source:
        """Its objects (a GET per sample), or its tar shards (uploaded first when missing): a ranged GET per sample,
        or one GET per shard (`stream`). The modules load on use: the CRT client only for a run on objects."""
        if name in ("files", "objects"):  # a run's source (objects) names it again in the training phase
            from iobench.sources.s3 import ObjectSource

            return ObjectSource(manifest)
        if name != "tar":
            raise UserError(f"--source {name} reads an LMDB, which is not made in object storage: --url reads "
                            "objects (--source files) or tar shards (--source tar)")
        from iobench.sources.s3_tar import RangeSource, StreamSource

        found = made(manifest, "tar", ui, lambda: find_pack(manifest),
                     lambda progress: pack_tar_s3(manifest, progress=progress), "uploaded",
                     lambda rep: f"{rep.shards:,} tar shards")
        return (StreamSource if stream else RangeSource)(manifest, found)

    def metadata(self, manifest: Manifest, state: str, scale_files: int, seed: int = 0,
                 timeout_s: float | None = None) -> Metadata:
        """The metadata phase of a dataset in a bucket, as a map-style dataset's start-up meets it: LIST of its
        prefix in pages of 1,000 keys (`dirs`: the LIST requests), then one at a time on a random sample, HEAD (in
        `stat_*`) and a ranged GET of the first byte (in `open_close_*`: the request without the body's transfer).
        No cache to drop: "cold" is the first pass, "warm" the second. Each request is bounded by the client's
        time-out (no hang on a server that stops answering: one line, exit 3)."""
        loc = _loc(manifest.root)
        client = boto3_client(loc, timeout_s=self.timeout_s if timeout_s is None else timeout_s, attempts=1)

        def listing() -> tuple[int, int]:
            pages = keys = 0
            for page in client.get_paginator("list_objects_v2").paginate(
                    Bucket=loc.bucket, Prefix=loc.key(""), PaginationConfig={"PageSize": PAGE}):
                pages += 1
                keys += page.get("KeyCount", len(page.get("Contents", [])))
            return pages, keys

        try:
            return measure(manifest, OBJECT_SAMPLE, seed, state, scale_files, listing,
                           lambda k: client.head_object(Bucket=loc.bucket, Key=k),
                           lambda k: client.get_object(Bucket=loc.bucket, Key=k, Range="bytes=0-0")["Body"].read(),
                           lambda part: "no client cache (object storage): a warm pass is the second")
        except Exception as exc:
            raise explain(exc, loc, "the metadata phase (LIST, HEAD) on") from None

    def raw_command(self, dataset: Location, keys: str, in_flight: int,
                    io_timeout_s: float) -> tuple[list[str], dict[str, str]]:
        """The AWS CRT's client (iobench/s3/raw.py, a process of its own) over the listed keys; its environment:
        this one (the credentials' chain), the location's profile, and this iobench first on the path (`-m
        iobench.s3.raw` must be this checkout's)."""
        from iobench.sources.s3 import GIVE_UP  # here: it loads the CRT

        loc = _loc(dataset)
        env = dict(os.environ)
        if loc.profile:
            env["AWS_PROFILE"] = loc.profile
        top = str(Path(iobench.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([top, *filter(None, [env.get("PYTHONPATH")])])
        return [sys.executable, "-m", "iobench.s3.raw", "--bucket", loc.bucket, "--region", region(loc),
                "--in-flight", str(in_flight), "--keys", keys, "--progress", "progress",
                "--give-up", f"{GIVE_UP * io_timeout_s:g}", *(["--endpoint", loc.endpoint] if loc.endpoint else []),
                *(["--path-style"] if loc.path_style else [])], env

    def raw_version(self) -> str | None:
        return version()

    def fuse_folders(self, dataset: Location, mount: Path) -> list[Path]:
        """The bucket mounted at its top (MOUNT/PREFIX/NAME), the bucket as a folder (MOUNT/BUCKET/PREFIX/NAME), or
        the --url prefix mounted (MOUNT/NAME)."""
        loc = _loc(dataset)
        return list(dict.fromkeys((mount / loc.prefix, mount / loc.bucket / loc.prefix, mount / loc.name)))


def _loc(dataset: Location) -> S3Location:
    assert isinstance(dataset, S3Location), dataset  # a bucket's datasets are prefixes
    return dataset


class S3Home:
    """One dataset's prefix; a Home."""

    def __init__(self, store: S3Store, where: S3Location):
        self.store = store
        self.where = where

    def marker(self) -> dict | None:
        data = get_small(self.store.client, self.where, MARKER, MARKER_LIMIT)
        if data is None:
            return None
        try:
            obj = json.loads(data)
        except ValueError:
            obj = data.decode(errors="replace")
        return check_marker(obj, Path(f"{self.where}/{MARKER}"))

    def only_leftovers(self) -> bool:
        return not any(listing(self.store.client, self.where, 1))

    def entries(self) -> tuple[list[str], np.ndarray]:
        data = get_small(self.store.client, self.where, MANIFEST)
        if data is None:
            raise FileNotFoundError(f"{self.where}/{MANIFEST}")
        blocks, offsets, sizes = parse_tsv(data, Path(f"{self.where}/{MANIFEST}"))
        table = PathTable(b"", b"".join(blocks), offsets)
        return [table.rel(i) for i in range(len(table))], sizes

    def entry_line(self, index: int) -> int:
        return entry_line(get_small(self.store.client, self.where, MANIFEST) or b"", index)

    def sizes(self, keys: list[str], threads: int, stop: threading.Event) -> np.ndarray:
        """Each key's size from the listing (-1: not there): 1,000 keys a request, not a HEAD per key."""
        there = dict(listing(self.store.client, self.where))
        return np.fromiter((there.get(k, -1) for k in keys), dtype=np.int64, count=len(keys))

    def writing(self) -> AbstractContextManager[object]:
        return lock.hold(self.where / ".writer")  # a lock of its own: a run's lock is the dataset's

    def put_marker(self, marker: dict) -> None:
        put_small(self.store.client, self.where, MARKER, json.dumps(marker, indent=1).encode())

    def put_manifest(self, keys: list[str], sizes: np.ndarray) -> None:
        put_small(self.store.client, self.where, MANIFEST, b"".join(tsv_bytes(keys, sizes)))

    def put_samples(self, keys: list[str], ids: list[int], lengths: list[int], content: Content, threads: int,
                    progress: Progress | None, stop: threading.Event) -> tuple[int, int]:
        """`threads` PUTs in flight (one boto3 client, thread-safe), progress every CHUNK objects, stopping within
        an object when `stop` is set. Each PUT is one attempt bounded by the store's time-out (gen --io-timeout): a
        server that stops answering ends gen in that time, not in three; Ctrl-C waits STOP_S at most for the PUTs in
        flight (their threads, left, end with their time-out or the process)."""
        client = boto3_client(self.store.loc, connections=threads, timeout_s=self.store.timeout_s, attempts=1)
        bucket = self.where.bucket
        lock_ = threading.Lock()
        done = [0, 0]
        failed: list[BaseException] = []

        def write(item: tuple[int, int]) -> None:
            lo, hi = item
            n = nbytes = 0
            for k in range(lo, hi):
                if stop.is_set() or failed:
                    break
                body = b"".join(content(k))
                try:
                    client.put_object(Bucket=bucket, Key=self.where.key(keys[ids[k]]), Body=body)
                except Exception as exc:
                    failed.append(exc)
                    stop.set()
                    break
                n += 1
                nbytes += len(body)
            with lock_:
                done[0] += n
                done[1] += nbytes
                if progress:
                    progress(done[0], done[1])

        # Ctrl-C or SIGTERM sets `stop`: each writer ends after its PUT in flight; the marker still says incomplete
        run_bounded(write, ((lo, min(lo + CHUNK, len(ids))) for lo in range(0, len(ids), CHUNK)), threads, stop,
                    patience_s=STOP_S)
        if failed:
            raise explain(failed[0], self.where, f"gen stopped after {done[0]:,} of {len(ids):,} objects (kept, marked "
                          "incomplete: the next gen completes them, `iobench clean` removes them): writing to")
        return done[0], done[1]

    def sync(self) -> None:
        """Nothing: a PUT that returned is stored."""

    def manifest(self, expect: tuple[Sequence[str], np.ndarray] | None = None) -> Manifest:
        """The samples' keys (prefix + relative key, as a PathTable) and sizes, from the manifest object, or from
        `expect` where it was just checked."""
        rel, sizes = expect if expect is not None else self.entries()
        return Manifest(self.where, PathTable.relative(self.where.prefix, list(rel)), np.asarray(sizes))

    def close(self) -> None:
        """Nothing is held open."""

    def _packs(self, keys: list[str], ours: set[str]) -> set[str]:
        """The markers of the tar packs `pack --url` wrote here (packed/NAME/iobench-pack.json); what each lists
        and the marker itself are added to `ours`."""
        markers = set()
        for key in keys:
            parts = key.split("/")
            if len(parts) != 3 or parts[0] != PACKED or parts[2] != PACK_MARKER:
                continue
            with suppress(UserError):  # not a pack marker (pack_s3.py reads them): its pack is left, named
                marker = S3Pack(self.where / f"{PACKED}/{parts[1]}", self.store.client).marker()
                if marker is not None and "made" in marker:
                    ours.update(f"{PACKED}/{parts[1]}/{n}" for n in marker["made"]
                                if isinstance(n, str) and n and "/" not in n)
                    ours.add(key)
                    markers.add(key)
        return markers

    def clean(self, dry_run: bool) -> Cleaned:
        """Delete what gen wrote here (see S3Store.clean); what else is under the prefix is named, left."""
        ours: set[str] = {MANIFEST}
        with suppress(FileNotFoundError):
            ours.update(self.entries()[0])
        found = list(listing(self.store.client, self.where))
        pack_markers = self._packs([k for k, _ in found], ours)
        gone = [(k, s) for k, s in found if k in ours]
        left = [k for k, _ in found if k not in ours and k != MARKER]
        if not dry_run:
            # a pack's marker after its keys, the dataset's marker last: an interrupted clean leaves them findable
            delete(self.store.client, self.where, sorted((k for k, _ in gone), key=lambda k: k in pack_markers),
                   "cleaning")
            if not left:
                try:
                    self.store.client.delete_object(Bucket=self.where.bucket, Key=self.where.key(MARKER))
                except Exception as exc:
                    raise explain(exc, self.where, "cleaning") from None
        return Cleaned(self.where, "dataset", True, files=len(gone), bytes=sum(s for _, s in gone),
                       left=left[:3] + ([f"{len(left) - 3:,} more"] if len(left) > 3 else []),
                       left_why="objects iobench did not write: the marker is kept with them", unit="objects")
