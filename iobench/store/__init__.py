"""A dataset's home behind one interface: the `Store` protocol (base.py) and its implementations, one per kind of
storage; `open` gives the one for a place. Today a folder under a mount (folder.py), with its lock (lock.py) and
its clean (clean.py); a bucket's prefix in object storage (s3.py)."""

import os
from pathlib import Path

from iobench.host.stall import DEFAULT_IO_TIMEOUT_S
from iobench.s3 import S3Location
from iobench.safefs import _DIR_FLAGS
from iobench.store.base import Cleaned, Content, Home, Location, Progress, Store
from iobench.store.folder import Folder, FolderHome
from iobench.store.s3 import S3Home, S3Store


def open(where: Path | S3Location, *, timeout_s: float = DEFAULT_IO_TIMEOUT_S) -> Store:
    """The store at `where`: a mount (iobench's datasets under MOUNT/iobench-data), the folder of a dataset read
    where it is, or a bucket's prefix (its datasets under it; requests bounded by `timeout_s`). Touches nothing:
    `Store.check` says whether it can be read or written."""
    if isinstance(where, S3Location):
        return S3Store(where, timeout_s=timeout_s)
    return Folder(where)


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


__all__ = ["Cleaned", "Content", "Folder", "FolderHome", "Home", "Location", "Progress", "S3Home", "S3Store",
           "Store", "dataset_location", "home_of", "open"]
