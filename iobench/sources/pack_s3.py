"""Tar shards of a dataset in a bucket (`iobench pack --url`): the same shards and offset index as a folder's pack,
uploaded as objects under the dataset's prefix with the marker's rules for a dataset (docs/s3.md, "Where things
are"); each shard is built in memory, one at a time (--shard-size bounds the memory), and written with one PUT."""

from __future__ import annotations

import io
import json
import time
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
    pack_name,
    pack_report,
    read_samples,
)
from iobench.sources.pack_tar import TAR_INDEX, plan_tar, shard_name, tar_params, write_shards

READERS = 32  # GETs in flight while packing: a GET mostly waits for its round trip
MARKER_LIMIT = 2**24  # a pack marker lists every shard: bigger than a dataset's


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

    def listed(self) -> dict[str, int]:
        """The keys under the pack's prefix (relative) and their sizes."""
        top = self.loc.key("")
        found: dict[str, int] = {}
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.loc.bucket, Prefix=top):
                found.update({o["Key"][len(top):]: int(o["Size"]) for o in page.get("Contents", [])})
        except Exception as exc:
            raise explain(exc, self.loc, "listing") from None
        return found

    def complete(self, params: dict) -> dict | None:
        """The marker of a complete pack made with `params` whose objects are all there with their sizes."""
        marker = self.marker()
        if not marker or marker.get("status") != "complete" or marker.get("params") != params:
            return None
        files = marker.get("files")
        if not isinstance(files, dict) or not files:
            return None
        there = self.listed()
        return marker if all(there.get(name) == size for name, size in files.items()) else None

    def delete(self, rels: list[str]) -> None:
        keys = [{"Key": self.loc.key(r)} for r in rels]
        try:
            for i in range(0, len(keys), 1000):
                self.client.delete_objects(Bucket=self.loc.bucket, Delete={"Objects": keys[i:i + 1000],
                                                                           "Quiet": True})
        except Exception as exc:
            raise explain(exc, self.loc, "deleting an old pack in") from None


def open_pack(dataset: S3Location, shard_size: int = DEFAULT_SHARD_SIZE) -> S3Pack:
    return S3Pack(dataset / f"{PACKED}/{pack_name('tar', shard_size)}", boto3_client(dataset, connections=READERS))


def find_pack(manifest: Manifest, shard_size: int | None = None) -> S3Pack | None:
    """The dataset's tar pack of `shard_size` (None: the default size's, else any `pack --url --shard-size` made)
    when it is complete and made from this manifest, else None."""
    root = manifest.root
    assert isinstance(root, S3Location)
    sizes = np.asarray(manifest.sizes, dtype=np.int64)
    pack = open_pack(root, shard_size or DEFAULT_SHARD_SIZE)
    if pack.complete(tar_params(manifest, sizes, shard_size or DEFAULT_SHARD_SIZE)):
        return pack
    if shard_size is not None:
        return None
    top = root.key(f"{PACKED}/")
    try:
        pages = pack.client.get_paginator("list_objects_v2").paginate(Bucket=root.bucket, Prefix=top, Delimiter="/")
        names = sorted(c["Prefix"][len(top):].rstrip("/") for page in pages for c in page.get("CommonPrefixes", []))
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
    if old is None and pack.listed():
        raise UserError(f"{pack.loc} holds objects but no {PACK_MARKER}: iobench did not write them; move them away")
    old_made = [n for n in (old or {}).get("made", []) if isinstance(n, str) and n and n != PACK_MARKER]
    base = {"iobench": __version__, "format": "tar", "params": params, "made": sorted(set(made) | set(old_made)),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    # the marker lists old and new keys before any is touched: an interrupted pack leaves nothing clean cannot find
    pack.put(PACK_MARKER, json.dumps({**base, "status": "incomplete"}, indent=1).encode())
    if old_made:
        pack.delete(old_made)
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
