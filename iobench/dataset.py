"""Datasets: what files a run reads (the manifest), making one (`gen`), or scanning an existing tree.

An iobench dataset folder holds `train/<class>/<file>.JPEG` (the ImageNet layout), `manifest.tsv`
(relative path and size of every file, in the order `sequential` reads them) and the marker
`iobench-dataset.json`. The marker says iobench made the folder (nothing without it is ever deleted or
overwritten) and whether generation finished: a half-written dataset is completed, never trusted.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iobench import __version__
from iobench.errors import UserError, explain_oserror
from iobench.jpeg import JpegPool, write_all
from iobench.sizes import SizeDist, parse_dist

MARKER = "iobench-dataset.json"
MANIFEST = "manifest.tsv"
DATA_ROOT = "iobench-data"  # folder under --mount that holds iobench's datasets
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
FILES_PER_CLASS = 1281  # ImageNet-1k: 1,281,167 training images in 1,000 class folders


@dataclass
class Manifest:
    """The samples of a dataset: absolute paths and sizes, in sequential (listing) order."""

    root: Path
    paths: list[str]  # absolute, so the hot path does no joining
    sizes: np.ndarray  # int64 bytes, from the manifest or from stat when scanned

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def total_bytes(self) -> int:
        return int(self.sizes.sum())

    @classmethod
    def load(cls, root: Path) -> Manifest:
        rel, sizes = [], []
        with open(root / MANIFEST, encoding="utf-8") as f:
            for line in f:
                if line.startswith("#"):
                    continue
                path, _, size = line.rstrip("\n").rpartition("\t")
                rel.append(path)
                sizes.append(int(size))
        base = str(root)
        return cls(root, [os.path.join(base, p) for p in rel], np.array(sizes, dtype=np.int64))


@dataclass(frozen=True)
class GenSpec:
    """What `gen` makes; equal specs name the same dataset folder."""

    files: int
    dist: SizeDist
    classes: int
    seed: int

    @property
    def name(self) -> str:
        slug = self.dist.spec.replace(":", "").replace("-", "to")
        return f"{slug}-{self.files}f-{self.classes}c-s{self.seed}"

    def as_dict(self) -> dict:
        return {"files": self.files, "size_dist": self.dist.spec, "classes": self.classes, "seed": self.seed}


def default_classes(files: int) -> int:
    """ImageNet-like folder sizes: ~1,281 files per class folder, 1..1000 folders."""
    return max(1, min(1000, round(files / FILES_PER_CLASS)))


def plan(spec: GenSpec) -> tuple[list[str], np.ndarray]:
    """Relative paths and exact sizes of every file of a spec (deterministic from its seed)."""
    sizes = spec.dist.sample(spec.files, np.random.default_rng([spec.seed, 0xDA7A]))
    per_class = -(-spec.files // spec.classes)
    rel = []
    for i in range(spec.files):
        c = f"n{i // per_class:08d}"
        rel.append(f"train/{c}/{c}_{i:08d}.JPEG")
    return rel, sizes


def read_marker(folder: Path, name: str = MARKER) -> dict | None:
    """An iobench marker (dataset or pack) in `folder`, or None where there is none."""
    try:
        return json.loads((Path(folder) / name).read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise explain_oserror(exc, "cannot read the iobench marker") from exc
    except ValueError as exc:
        raise UserError(f"{Path(folder) / name}: unreadable iobench marker ({exc})") from exc


def write_json_atomic(path: Path, obj: dict) -> None:
    """Write a marker so that a reader never sees half of it (write aside, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def check_mount(mount: Path, *, writable: bool) -> Path:
    """A one-line error for a mount that is missing, not a folder, unreadable, or (for writing) read-only or not
    writable: an EnvironmentRefused (exit code 3)."""
    from iobench.errors import EnvironmentRefused

    if not mount.exists():
        raise EnvironmentRefused(f"mount {mount} does not exist")
    if not mount.is_dir():
        raise EnvironmentRefused(f"mount {mount} is not a directory")
    if not os.access(mount, os.R_OK | os.X_OK):
        raise EnvironmentRefused(f"mount {mount} is not readable (permission denied)")
    if writable and os.statvfs(mount).f_flag & os.ST_RDONLY:
        raise EnvironmentRefused(f"mount {mount} is read-only: iobench needs to write there")
    if writable and not os.access(mount, os.W_OK):
        raise EnvironmentRefused(f"mount {mount} is not writable (permission denied)")
    return mount.resolve()


@dataclass
class GenReport:
    manifest: Manifest
    written: int  # files written in this call (0 when an existing complete dataset was reused)
    written_bytes: int
    seconds: float
    reused: bool


Progress = Callable[[int, int], None]  # (files done in this call, bytes done in this call)


def generate(mount: Path, spec: GenSpec, *, threads: int = 8, progress: Progress | None = None) -> GenReport:
    """Make (or reuse, or complete) the dataset for `spec` under `mount`/iobench-data/."""
    mount = check_mount(mount, writable=False)
    folder = mount / DATA_ROOT / spec.name
    marker = read_marker(folder)
    if folder.exists() and marker is None and any(folder.iterdir()):
        raise UserError(f"{folder} exists and was not made by iobench: move it away or pick another --mount")
    if marker and marker.get("params") != spec.as_dict():
        raise UserError(f"{folder} holds a dataset with other parameters: {marker.get('params')}")
    rel, sizes = plan(spec)
    if marker and marker.get("status") == "complete" and _cheap_check(folder, rel, sizes):
        return GenReport(Manifest.load(folder), 0, 0, 0.0, True)
    check_mount(mount, writable=True)  # reading a finished dataset works on a read-only mount too

    todo = _missing(folder, rel, sizes) if marker else np.arange(spec.files)
    need = int(sizes[todo].sum())
    free = shutil.disk_usage(mount).free
    if need > free:
        raise UserError(
            f"not enough space on {mount}: the dataset needs {need / 1e9:.2f} GB more, "
            f"{free / 1e9:.2f} GB free (use fewer --files)")
    try:
        for d in sorted({os.path.dirname(p) for p in rel}):
            os.makedirs(folder / d, exist_ok=True)
        params = {"iobench": __version__, "params": spec.as_dict(), "files": spec.files,
                  "bytes": int(sizes.sum()), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        write_json_atomic(folder / MARKER, {**params, "status": "incomplete"})
        _write_manifest(folder, rel, sizes)
    except OSError as exc:
        raise explain_oserror(exc, f"cannot create the dataset in {folder}") from exc

    t0 = time.perf_counter()
    written, written_bytes = _write_files(folder, rel, sizes, todo, spec.seed, threads, progress)
    os.sync()  # the marker says "complete" only for data that is on the storage
    write_json_atomic(folder / MARKER, {**params, "status": "complete",
                                         "completed": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return GenReport(Manifest.load(folder), written, written_bytes, time.perf_counter() - t0, False)


def _write_manifest(folder: Path, rel: list[str], sizes: np.ndarray) -> None:
    tmp = folder / (MANIFEST + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("# iobench manifest v1: relative path <TAB> size in bytes\n")
        f.writelines(f"{p}\t{s}\n" for p, s in zip(rel, sizes.tolist(), strict=True))
    os.replace(tmp, folder / MANIFEST)


def _cheap_check(folder: Path, rel: list[str], sizes: np.ndarray, sample: int = 64) -> bool:
    """A finished dataset is reused after stat-ing a random sample of its files."""
    if not (folder / MANIFEST).exists():
        return False
    idx = np.random.default_rng().choice(len(rel), size=min(sample, len(rel)), replace=False)
    return len(_missing(folder, [rel[i] for i in idx], sizes[idx])) == 0


def _missing(folder: Path, rel: list[str], sizes: np.ndarray) -> np.ndarray:
    """Indices of files that are absent or of the wrong size."""
    bad = []
    for i, (p, s) in enumerate(zip(rel, sizes.tolist(), strict=True)):
        try:
            if os.stat(folder / p).st_size != s:
                bad.append(i)
        except FileNotFoundError:
            bad.append(i)
    return np.array(bad, dtype=np.int64)


def _write_files(folder: Path, rel: list[str], sizes: np.ndarray, todo: np.ndarray, seed: int,
                 threads: int, progress: Progress | None) -> tuple[int, int]:
    if len(todo) == 0:
        return 0, 0
    pool = JpegPool.build(int(sizes[todo].max()), seed)
    pick = pool.pick(sizes)
    base = str(folder)
    lock = threading.Lock()
    done = [0, 0]
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC

    def write_chunk(chunk: np.ndarray) -> None:
        n = nbytes = 0
        for i in chunk.tolist():
            path = os.path.join(base, rel[i])
            fd = os.open(path, flags, 0o644)
            try:
                nbytes += write_all(fd, pool.parts(i, int(sizes[i]), int(pick[i])))
            finally:
                os.close(fd)
            n += 1
        with lock:
            done[0] += n
            done[1] += nbytes
            if progress:
                progress(done[0], done[1])

    chunks = np.array_split(todo, max(1, len(todo) // 64))
    try:
        with ThreadPoolExecutor(max_workers=threads) as ex:
            for fut in [ex.submit(write_chunk, c) for c in chunks]:
                fut.result()
    except OSError as exc:
        # The marker still says "incomplete": the next gen or run finds the gap and completes it.
        raise explain_oserror(exc, f"gen stopped after {done[0]} of {len(todo)} files") from exc
    return done[0], done[1]


def spec_of(marker: dict) -> GenSpec:
    """The GenSpec a dataset marker records."""
    p = marker["params"]
    return GenSpec(int(p["files"]), parse_dist(p["size_dist"]), int(p["classes"]), int(p["seed"]))


def find_datasets(mount: Path) -> list[Path]:
    """iobench dataset folders under mount/iobench-data (those with a marker)."""
    root = mount / DATA_ROOT
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / MARKER).is_file())


def scan(path: Path) -> Manifest:
    """Manifest of an existing image tree iobench did not make (e.g. an ImageFolder), sorted like one."""
    if not path.exists():
        raise UserError(f"dataset {path} does not exist")
    if not path.is_dir():
        raise UserError(f"dataset {path} is not a directory")
    if (path / MARKER).is_file() and (path / MANIFEST).is_file():
        return Manifest.load(path.resolve())
    paths: list[str] = []
    sizes: list[int] = []

    def walk(d: str) -> None:
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as exc:
            raise explain_oserror(exc, "cannot list the dataset") from exc
        for e in entries:
            if e.is_dir(follow_symlinks=True):
                walk(e.path)
            elif e.name.lower().endswith(IMAGE_EXTENSIONS) and e.is_file():
                paths.append(e.path)
                sizes.append(e.stat().st_size)

    walk(str(path.resolve()))
    if not paths:
        raise UserError(f"no images under {path} (looked for {', '.join(IMAGE_EXTENSIONS)})")
    _check_images(paths)
    return Manifest(path.resolve(), paths, np.array(sizes, dtype=np.int64))


_MAGIC = (b"\xff\xd8\xff", b"\x89PNG", b"P6", b"P5", b"BM", b"II*\0", b"MM\0*", b"RIFF")


def _check_images(paths: list[str], sample: int = 32) -> None:
    """Read the first bytes of a few files: a tree of non-images is a mistake worth one line."""
    idx = np.random.default_rng(0).choice(len(paths), size=min(sample, len(paths)), replace=False)
    for i in idx.tolist():
        with open(paths[i], "rb") as f:
            head = f.read(8)
        if not head.startswith(_MAGIC):
            raise UserError(f"{paths[i]} is not an image (its first bytes are {head[:4]!r})")
