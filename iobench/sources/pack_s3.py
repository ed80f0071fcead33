"""Tar shards of a dataset in a bucket (`iobench pack --url`): the same shards and offset index as a folder's pack,
uploaded as objects under the dataset's prefix with the marker's rules for a dataset (docs/s3.md, "Where things
are"); each shard is built in memory, one at a time (--shard-size bounds the memory), and written with one PUT."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from iobench import __version__
from iobench.dataset import Manifest
from iobench.errors import UserError
from iobench.s3.clients import boto3_client, explain, get_small, put_small
from iobench.s3.url import S3Location
from iobench.sources.pack_folder import (
    DEFAULT_SHARD_SIZE,
    PACK_MARKER,
    PACKED,
    PackReport,
    Progress,
    all_there,
    pack_name,
    pack_report,
    read_samples,
)
from iobench.sources.pack_tar import TAR_INDEX, plan_tar, shard_name, tar_params, write_shards

READERS = 32  # GETs in flight while packing: a GET mostly waits for its round trip
MARKER_LIMIT = 2**24  # a pack marker lists every shard: bigger than a dataset's
PAGE = 1000  # keys per listing page, and per DeleteObjects request (S3's most of each)


def listing(client: Any, loc: S3Location, limit: int | None = None) -> Iterator[tuple[str, int]]:
    """(key relative to `loc`, size) of the objects under it (a dataset's, a pack's), page by page; `limit`: at most
    so many."""
    top = loc.key("")
    n = 0
    try:
        for page in client.get_paginator("list_objects_v2").paginate(
                Bucket=loc.bucket, Prefix=top, PaginationConfig={"PageSize": PAGE}):
            for obj in page.get("Contents", []):
                yield obj["Key"][len(top):], int(obj["Size"])
                n += 1
                if limit is not None and n >= limit:
                    return
    except Exception as exc:
        raise explain(exc, loc, "listing") from None


def below(client: Any, loc: S3Location) -> list[str]:
    """The names of the prefixes directly under `loc` (the datasets under a --url, the packs of a dataset)."""
    top = loc.key("")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=loc.bucket, Prefix=top, Delimiter="/")
    return sorted(c["Prefix"][len(top):].rstrip("/") for page in pages for c in page.get("CommonPrefixes", []))


def delete(client: Any, loc: S3Location, rels: list[str], doing: str) -> None:
    """DeleteObjects of `rels` (relative to `loc`), in their order, PAGE keys a request; a failure is one line."""
    keys = [{"Key": loc.key(r)} for r in rels]
    try:
        for i in range(0, len(keys), PAGE):
            client.delete_objects(Bucket=loc.bucket, Delete={"Objects": keys[i:i + PAGE], "Quiet": True})
    except Exception as exc:
        raise explain(exc, loc, doing) from None


@dataclass
class S3Pack:
    """A tar pack under a dataset's prefix: its location, its marker and its keys (relative to the pack)."""

    loc: S3Location  # s3://BUCKET/<dataset>/packed/tar-SIZE
    client: Any = field(repr=False)

    def get(self, rel: str, limit: int | None = None) -> bytes | None:
        return get_small(self.client, self.loc, rel, limit, "an iobench pack marker")

    def put(self, rel: str, body: bytes) -> None:
        put_small(self.client, self.loc, rel, body)

    def marker(self) -> dict | None:
        data = self.get(PACK_MARKER, MARKER_LIMIT)
        if data is None:
            return None
        try:
            marker = json.loads(data)
        except ValueError:
            marker = None
        if not isinstance(marker, dict) or "iobench" not in marker or not isinstance(marker.get("made", []), list):
            raise UserError(f"{self.loc}/{PACK_MARKER}: not a valid iobench pack marker: delete it, or move the "
                            "pack away")
        return marker

    def complete(self, params: dict) -> dict | None:
        """The marker of a complete pack made with `params` whose objects are all there with their sizes."""
        marker = self.marker()
        if not marker or marker.get("status") != "complete" or marker.get("params") != params:
            return None
        there = dict(listing(self.client, self.loc))
        return marker if all_there(marker, there.get) else None


def open_pack(dataset: S3Location, shard_size: int = DEFAULT_SHARD_SIZE) -> S3Pack:
    return S3Pack(dataset / f"{PACKED}/{pack_name('tar', shard_size)}", boto3_client(dataset, connections=READERS))


def find_pack(manifest: Manifest) -> S3Pack | None:
    """The dataset's tar pack of the default shard size, else any `pack --url --shard-size` made, when it is
    complete and made from this manifest, else None."""
    root = manifest.root
    assert isinstance(root, S3Location)
    sizes = np.asarray(manifest.sizes, dtype=np.int64)
    pack = open_pack(root)
    if pack.complete(tar_params(manifest, sizes, DEFAULT_SHARD_SIZE)):
        return pack
    try:
        names = below(pack.client, root / PACKED)
    except Exception as exc:
        raise explain(exc, root, "listing the packs of") from None
    for name in names:
        other = S3Pack(root / f"{PACKED}/{name}", pack.client)
        marker = other.marker() if name.startswith("tar-") else None
        size = (marker or {}).get("params", {}).get("shard_size")
        if isinstance(size, int) and other.complete(tar_params(manifest, sizes, size)):
            return other
    return None


def pack_tar_s3(manifest: Manifest, shard_size: int = DEFAULT_SHARD_SIZE,
                progress: Progress | None = None) -> PackReport:
    """Upload (or reuse) WebDataset-style tar shards of the dataset in a bucket and their offset index."""
    assert isinstance(manifest.root, S3Location)
    sizes = np.asarray(manifest.sizes, dtype=np.int64)
    params = tar_params(manifest, sizes, shard_size)
    pack = open_pack(manifest.root, shard_size)
    marker = pack.complete(params)
    if marker is not None:
        return pack_report(pack.loc, marker, reused=True)
    plan = plan_tar(sizes, shard_size)
    shards = [shard_name(s) for s in range(len(plan.shard_bytes))]
    made = [*shards, TAR_INDEX]
    old = pack.marker()
    if old is None and any(listing(pack.client, pack.loc, 1)):
        raise UserError(f"{pack.loc} holds objects but no {PACK_MARKER}: iobench did not write them; move them away")
    old_made = [n for n in (old or {}).get("made", []) if isinstance(n, str) and n and n != PACK_MARKER]
    base = {"iobench": __version__, "format": "tar", "params": params, "made": sorted(set(made) | set(old_made)),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    # the marker lists old and new keys before any is touched: an interrupted pack leaves nothing clean cannot find
    pack.put(PACK_MARKER, json.dumps({**base, "status": "incomplete"}, indent=1).encode())
    if old_made:
        delete(pack.client, pack.loc, old_made, "deleting an old pack in")
    root, client, keys = manifest.root, pack.client, manifest.paths

    def load(i: int) -> bytes:  # sample i's bytes, a GET whole, checked against its size in the manifest
        try:
            data = bytes(client.get_object(Bucket=root.bucket, Key=keys[i])["Body"].read())
        except Exception as exc:
            raise explain(exc, root, f"pack reading {keys[i]} of") from None
        if len(data) != sizes[i]:
            raise UserError(f"s3://{root.bucket}/{keys[i]} has {len(data)} bytes, its manifest says {sizes[i]}: "
                            "the dataset changed since its manifest was written")
        return data

    t0 = time.perf_counter()
    # each shard built in memory from the samples' GETs, in manifest order, and PUT once whole
    write_shards(manifest, plan, read_samples(manifest, READERS, progress, load=load), pack.loc,
                 lambda s: io.BytesIO(), lambda s, f: pack.put(shards[s], f.getvalue()))
    index = io.BytesIO()
    np.save(index, np.stack([plan.shard, plan.offset, sizes], axis=1))
    pack.put(TAR_INDEX, index.getvalue())
    files = {name: size for name, size in zip(shards, plan.shard_bytes, strict=True)}
    files[TAR_INDEX] = len(index.getvalue())
    marker = {**base, "made": made, "status": "complete", "files": files, "bytes": sum(files.values()),
              "seconds": round(time.perf_counter() - t0, 3), "shards": shards, "shard_size": int(shard_size),
              "completed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    pack.put(PACK_MARKER, json.dumps(marker, indent=1).encode())
    if progress:  # every sample read had its manifest size: all of them, all their bytes
        progress(len(manifest), params["data_bytes"])
    return pack_report(pack.loc, marker, reused=False)
