"""Datasets: what files a run reads (the manifest), making one (`gen`), or reading one in place. folder.py: the
folder as a run reads it (marker, `Manifest`, every file checked against it); paths.py: manifest.tsv, manifest.index
and the path table; gen.py: making one (the writer threads, reuse and resume); imagefolder.py: `--dataset` (in
place, or an existing tree's scan). Every module writes by iobench/safefs.py's rules (import them from there)."""

from iobench.dataset.folder import (
    DATA_ROOT,
    MARKER,
    Manifest,
    check_mount,
    describe_damage,
    read_marker,
)
from iobench.dataset.gen import (
    GenSpec,
    default_classes,
    default_threads,
    generate,
    plan,
    spec_of,
)
from iobench.dataset.imagefolder import scan

__all__ = [
    "DATA_ROOT", "MARKER", "GenSpec", "Manifest", "check_mount", "default_classes", "default_threads",
    "describe_damage", "generate", "plan", "read_marker", "scan", "spec_of",
]
