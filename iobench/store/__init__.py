"""A dataset's home behind one interface (base.py) and its two backends, folder.py and s3.py: `open` (and `home_of`)
is the one place that picks the backend, by the location's type (docs/architecture.md)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from iobench.dataset import Manifest
from iobench.errors import UserError
from iobench.host.stall import DEFAULT_IO_TIMEOUT_S
from iobench.s3.clients import READ_CONNECTIONS
from iobench.s3.url import CLIENTS, S3Location, parse_url
from iobench.safefs import _DIR_FLAGS
from iobench.store.base import Home, Location, Store
from iobench.store.folder import Folder, FolderHome
from iobench.store.s3 import S3Home, S3Store

if TYPE_CHECKING:
    from iobench.sources import Source
    from iobench.ui import UI

MAX_IN_FLIGHT = READ_CONNECTIONS  # --in-flight's most per reader: the objects client's connections


def open(where: Path | S3Location, *, timeout_s: float = DEFAULT_IO_TIMEOUT_S) -> Store:
    """The store at `where`: a mount (iobench's datasets under MOUNT/iobench-data), the folder of a dataset read
    where it is, or a bucket's prefix (its datasets under it; requests bounded by `timeout_s`). Touches nothing:
    `Store.check` says whether it can be read or written."""
    if isinstance(where, S3Location):
        return S3Store(where, timeout_s=timeout_s)
    return Folder(where)


def at(mount: Path | None, url: str | None, endpoint_url: str | None = None, profile: str | None = None,
       s3_client: str | None = None) -> Location:
    """Where the datasets are: the bucket's prefix for --url, else the mount (the current folder by default).
    The S3 options without --url, or --url with --mount, are one line."""
    if url is None:
        given = [flag for flag, v in (("--endpoint-url", endpoint_url), ("--profile", profile),
                                      ("--s3-client", s3_client)) if v is not None]
        if given:
            raise UserError(f"{given[0]} applies to object storage: give --url s3://BUCKET/PREFIX with it")
        return Path(".") if mount is None else mount
    if mount is not None:
        raise UserError("--url and --mount each name where the datasets are: give one or the other")
    return parse_url(url, endpoint=endpoint_url, profile=profile, client=s3_client or "crt")


def source(name: str, manifest: Manifest, ui: UI | None = None, *, advice: str | None = None, readahead: bool = True,
           stream: bool = False) -> Source:
    """The source `name` over the manifest's samples, from the store that holds them (see Store.source)."""
    return open(manifest.root).source(name, manifest, ui, advice=advice, readahead=readahead, stream=stream)


def published(dataset: Location) -> str | dict:
    """Where the dataset is, as rank 0 publishes it to the others: a path, or a bucket's location (no credential:
    each rank takes its own from its host's chain)."""
    return dataclasses.asdict(dataset) if isinstance(dataset, S3Location) else str(dataset)


def location(published: str | dict) -> Location:
    """The location `published` names."""
    return S3Location(**published) if isinstance(published, dict) else Path(published)


def home_of(dataset: Location, *, timeout_s: float = DEFAULT_IO_TIMEOUT_S) -> Home:
    """The Home of the dataset at `dataset` (a folder, or a bucket's prefix), to read its manifest and check its
    samples where it is: another rank's host, for one. The caller closes it."""
    if isinstance(dataset, S3Location):
        return S3Home(S3Store(dataset, timeout_s=timeout_s), dataset)
    return FolderHome(os.open(dataset, _DIR_FLAGS), dataset)


def dataset_location(where: Store, dataset: Path | None, name: str | None) -> Location | None:
    """The dataset a command will use (and lock): --dataset, read where it is (None when it is not a folder: the
    command then says why); else iobench's dataset `name` in `where`, made or not."""
    if dataset is not None:
        return dataset.resolve() if dataset.is_dir() else None
    assert name is not None
    where.check(writable=False)
    return where.location(name)


__all__ = ["CLIENTS", "MAX_IN_FLIGHT", "Folder", "FolderHome", "Home", "Location", "S3Home", "S3Store", "Store", "at",
           "dataset_location", "home_of", "location", "open", "published", "source"]
