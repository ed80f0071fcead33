"""Reading a dataset where it is (`run --dataset PATH`): one iobench made, once every file is checked against its
manifest, or an existing image tree (an ImageFolder), scanned by iobench/dataset/imagefolder.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from iobench.dataset.folder import (
    DATA_ROOT,
    MARKER,
    Manifest,
    describe_damage,
    inspect_files,
    parse_manifest,
    read_marker,
)
from iobench.dataset.imagefolder import scan_tree
from iobench.dataset.paths import MANIFEST
from iobench.errors import UserError


def scan(path: Path, *, threads: int = 8, progress: Callable[[int, int], None] | None = None, cache: bool = False,
         say: Callable[[str], None] | None = None, follow_links: bool = False) -> Manifest:
    """Manifest of an existing image tree iobench did not make (e.g. an ImageFolder), sorted like one; or, for a
    dataset iobench made, its manifest once every file is checked against it. A tree is scanned by
    `iobench.dataset.imagefolder.scan_tree` (`threads` listings in flight, `progress(files, folders)`, its listing
    cached outside the tree when `cache`, one line to `say` on what happened; links out of the tree skipped unless
    `follow_links`). A dataset iobench made has no link: one where a file should be is refused."""
    if not path.exists():
        raise UserError(f"dataset {path} does not exist")
    if not path.is_dir():
        raise UserError(f"dataset {path} is not a directory")
    root = path.resolve()
    if os.path.lexists(root / MARKER) and os.path.lexists(root / MANIFEST):
        return _verified(root, threads)
    return scan_tree(root, threads=threads, progress=progress, cache=cache, say=say, shown=path,
                     follow_links=follow_links)


def _verified(root: Path, threads: int) -> Manifest:
    """An iobench dataset read in place (`--dataset`): its manifest must match its marker and every file its
    manifest; what differs is a one-line error (repairing is `iobench gen`'s job)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        marker = read_marker(root, dir_fd=fd)
        assert marker is not None
        rel, sizes = parse_manifest(root / MANIFEST, dir_fd=fd)
        if len(rel) != marker["files"]:
            raise UserError(f"{root / MANIFEST} lists {len(rel):,} files, its marker {marker['files']:,}: the "
                            "manifest was changed since iobench wrote it")
        found = inspect_files(fd, root, rel, threads)
    finally:
        os.close(fd)
    bad = np.flatnonzero(found != sizes)
    if len(bad):
        p = marker["params"]
        how = ""
        if root.parent.name == DATA_ROOT:
            how = (f"; `iobench gen --mount {root.parent.parent} --files {p['files']} --size-dist {p['size_dist']} "
                   f"--classes {p['classes']} --seed {p['seed']}` repairs it")
        raise UserError(f"the dataset {root} differs from its manifest: {describe_damage(root, rel, sizes, found, bad)}"
                        + how)
    return Manifest.of(root, rel, sizes)
