"""Datasets: what files a run reads (the manifest), making one (`gen`), or scanning an existing tree.

An iobench dataset folder holds `train/<class>/<file>.JPEG` (the ImageNet layout), `manifest.tsv`
(relative path and size of every file, in the order `sequential` reads them) and the marker
`iobench-dataset.json`. The marker says iobench made the folder (nothing without it is ever deleted or
overwritten) and whether generation finished: a half-written dataset is completed, never trusted.

Two modules, every public name imported here (`from iobench.dataset import Manifest, generate`), with the
safety rules they write by (iobench/safefs.py: no link followed, files created exclusively, markers renamed into
place, one writer at a time):

- folder.py: the folder as a run reads it: marker, `Manifest`, every file checked against it;
- imagefolder.py: reading a dataset where it is, or scanning an existing tree (`scan`);
- gen.py: making one (`GenSpec`, `plan`, `generate`): the writer threads, reuse and resume.

The path table is in iobench/dataset/paths.py, an existing tree's listing in iobench/dataset/imagefolder.py.
"""

from iobench.dataset.folder import (
    CHUNK,
    DATA_ROOT,
    IMAGE_EXTENSIONS,
    LOCAL_STAT_THREADS,
    MANIFEST,
    MARKER,
    MARKER_LIMIT,
    STAT_CHUNK,
    Manifest,
    check_marker,
    check_mount,
    describe_damage,
    inspect_files,
    parse_manifest,
    read_marker,
    run_bounded,
)
from iobench.dataset.gen import (
    FILES_PER_CLASS,
    LOCAL_THREADS,
    NETWORK_THREADS,
    GenReport,
    GenSpec,
    Progress,
    default_classes,
    default_threads,
    generate,
    plan,
    spec_of,
)
from iobench.dataset.imagefolder import scan
from iobench.safefs import (
    WRITER_LOCK,
    fmt_bytes,
    kind_of,
    only_leftovers,
    open_dir,
    open_tree,
    read_regular,
    refuse,
    write_atomic,
    write_json_atomic,
    writer_lock,
)

__all__ = [
    "CHUNK", "DATA_ROOT", "FILES_PER_CLASS", "IMAGE_EXTENSIONS", "LOCAL_STAT_THREADS", "LOCAL_THREADS", "MANIFEST",
    "MARKER", "MARKER_LIMIT", "NETWORK_THREADS", "STAT_CHUNK", "WRITER_LOCK", "GenReport", "GenSpec", "Manifest",
    "Progress", "check_marker", "check_mount", "default_classes", "default_threads", "describe_damage",
    "fmt_bytes", "generate", "inspect_files", "kind_of", "only_leftovers", "open_dir", "open_tree",
    "parse_manifest", "plan", "read_marker", "read_regular", "refuse", "run_bounded", "scan", "spec_of",
    "write_atomic", "write_json_atomic", "writer_lock",
]
