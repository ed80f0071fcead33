"""Reading a dataset where it is (`run --dataset PATH`, `scan`): one iobench made, once every file is checked against
its manifest, or an image tree iobench did not make (an ImageFolder such as ImageNet's train/), scanned in
ImageFolder's order (README.md, "At scale"). On a network file system every listing and stat is a round trip, so
once listing proves slow a pool of threads lists folders (8-16 in flight: a many-fold speed-up on NFS or sshfs);
on a local disk one thread is fastest. Every file listed has its first bytes read in place of a stat (`image_size`,
its cost in README.md; without POSIX_FADV_RANDOM the kernel reads ahead the rest of each file: cold 2.4 s, not 2.0).

The cached listing (CACHE_PARTS under $XDG_CACHE_HOME, a folder per tree) holds `manifest.tsv` (paths relative to
the tree) and `scan.json` (the tree's path, its folders and their mtime_ns). An entry added, removed or renamed
changes its folder's mtime; a file rewritten in place does not, so each cached size is checked too (one stat per
file: the listing, not the stats, is what the cache saves).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import queue
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from iobench import __version__
from iobench.dataset.folder import (
    DATA_ROOT,
    IMAGE_EXTENSIONS,
    MARKER,
    Manifest,
    _inside,
    _local,
    describe_damage,
    inspect_files,
    parse_manifest,
    read_marker,
)
from iobench.dataset.paths import MANIFEST, PathTable, tsv_bytes
from iobench.errors import UserError, explain_oserror
from iobench.safefs import open_tree, read_regular, refuse, write_atomic, write_json_atomic

SCAN_THREADS = 16  # listings in flight where listing is slow: on NFS/sshfs each listing and stat is a round trip
CACHE_PARTS = ("iobench", "scans")  # under $XDG_CACHE_HOME
INFO = "scan.json"
CACHE_FORMAT = 2  # 2: links out of the tree skipped unless followed, and counted
STAT_CHUNK = 256  # image files one thread stats at a time: a folder bigger than this is stat-ed by the whole pool
CHECK_CHUNK = 64  # folders one thread stats at a time when checking a cached listing
SETTLE_NS = 2_000_000_000  # a folder changed this recently may change again within its mtime's tick: not cached
INFO_LIMIT = 1 << 28  # scan.json holds a line per folder: even a tree of millions of folders stays under this
PROGRESS_EVERY_S = 0.1
PROBE_S = 0.05  # the parallel walk lists alone this long before it judges whether threads would help
FAST_ENTRY_S = 20e-6  # under this per entry (a local disk: ~3 us warm, ~8 us cold) one thread is fastest

MAGIC = (b"\xff\xd8\xff", b"\x89PNG", b"P6", b"P5", b"BM", b"II*\0", b"MM\0*", b"RIFF")  # JPEG, PNG, PPM, ...
HEAD = 8  # bytes read of each file: the longest magic above
NAMED = 3  # non-images a refusal names
ScanProgress = Callable[[int, int], None]  # (image files found so far, folders listed so far)
Key = tuple[int, int]  # (st_dev, st_ino) of a folder


@dataclass
class Links:
    """The links a scan of the tree at `root` (resolved) met whose target is outside it: skipped, or with `follow`
    followed; each counted. A link that stays inside the tree is followed, as ImageFolder follows it."""

    root: str
    follow: bool = False
    skipped: int = 0
    followed: int = 0
    # the parallel walk counts on several threads
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def allow(self, e: os.DirEntry) -> bool:
        """Whether the scan may go where `e` leads (a file to read, a folder to list)."""
        if not e.is_symlink():
            return True
        real = os.path.realpath(e.path)
        if real == self.root or real.startswith(os.path.join(self.root, "")):
            return True
        with self._lock:
            if self.follow:
                self.followed += 1
            else:
                self.skipped += 1
        return self.follow


def image_size(path: str, bad: list[tuple[str, bytes]]) -> int:
    """The size of the file at `path` (links followed), its first bytes checked: a file that is not an image is
    put in `bad` (path, first bytes), for the scan to name once all are seen. Not a regular file: one line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                refuse(path, st.st_mode, "an image file")
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            head = os.pread(fd, HEAD, 0)
        finally:
            os.close(fd)
    except OSError as exc:
        raise explain_oserror(exc, "cannot read the dataset") from exc
    if not head.startswith(MAGIC):
        bad.append((path, head))
    return st.st_size


def refuse_non_images(bad: list[tuple[str, bytes]], files: int, shown: object) -> None:
    """One line naming the files of the tree that are not images (the first few by path), if any."""
    if not bad:
        return
    named = "; ".join(f"{p} (first bytes {h[:4]!r})" for p, h in sorted(bad)[:NAMED])
    more = f" and {len(bad) - NAMED:,} more" if len(bad) > NAMED else ""
    are = "is not an image" if len(bad) == 1 else "are not images"
    raise UserError(f"{len(bad):,} of the {files:,} files under {shown} {are} (their first bytes "
                    f"checked): {named}{more}; --dataset reads an image tree (an ImageFolder)")


def links_words(skipped: int, followed: int) -> str:
    """What a scan did with links that leave the tree, for its line: "; 2 links out of the tree skipped (...)"."""
    said = [f"{n:,} link{'s' if n != 1 else ''} out of the tree {how}" for n, how in (
        (skipped, "skipped (--follow-links reads them)"), (followed, "followed")) if n]
    return f"; {'; '.join(said)}" if said else ""


@dataclass
class Walk:
    """What a walk found: image files in ImageFolder's order, and every folder listed with its mtime."""

    links: Links  # the links out of the tree it met
    paths: list[str] = field(default_factory=list)  # absolute
    sizes: list[int] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)  # absolute, in the order the walk entered them (root first)
    mtimes: list[int] = field(default_factory=list)  # st_mtime_ns of each folder, stat-ed before it was listed
    parallel: bool = False  # whether a pool of threads listed (part of) it
    bad: list[tuple[str, bytes]] = field(default_factory=list)  # files that are not images: (path, first bytes)


def _sorted_entries(d: str) -> list[os.DirEntry]:
    try:
        with os.scandir(d) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError as exc:
        raise explain_oserror(exc, "cannot list the dataset") from exc


def _is_image(e: os.DirEntry) -> bool:
    return e.name.lower().endswith(IMAGE_EXTENSIONS) and e.is_file()


@dataclass(eq=False)
class _Node:
    """A folder of the parallel walk: filled in by the thread that lists it."""

    path: str
    mtime_ns: int
    ancestors: frozenset[Key]  # its own key and those of the folders above it
    paths: list[str] = field(default_factory=list)  # its image files, sorted
    sizes: list[int] = field(default_factory=list)
    subs: list[tuple[int, _Node]] = field(default_factory=list)  # (how many of its files sort before it, sub-folder)
    unsized: list[os.DirEntry] | None = None  # image files left for the pool to stat (a big folder)


_Done = tuple[_Node | None, int]  # what a task of the walk did: the folder it listed (if it listed one), entries seen


def _list_node(node: _Node, stop: threading.Event, walk: Walk) -> _Done:
    """List one folder: its image files (sized here unless there are many) and the sub-folders to walk."""
    files: list[os.DirEntry] = []
    entries = _sorted_entries(node.path)
    for e in entries:
        if stop.is_set():
            return node, 0
        try:
            if e.is_dir(follow_symlinks=True):
                if not walk.links.allow(e):
                    continue
                st = e.stat(follow_symlinks=True)
                key = (st.st_dev, st.st_ino)
                if key not in node.ancestors:  # else a link back up the tree: ImageFolder would loop
                    node.subs.append((len(files), _Node(e.path, st.st_mtime_ns, node.ancestors | {key})))
            elif _is_image(e) and walk.links.allow(e):
                files.append(e)
        except OSError as exc:
            raise explain_oserror(exc, "cannot list the dataset") from exc
    node.paths = [e.path for e in files]
    if len(files) > STAT_CHUNK:
        node.sizes = [0] * len(files)
        node.unsized = files
    else:
        node.sizes = _sizes(files, stop, walk.bad)
    return node, len(entries)


def _sizes(files: list[os.DirEntry], stop: threading.Event, bad: list[tuple[str, bytes]]) -> list[int]:
    sizes = []
    for e in files:
        if stop.is_set():
            break
        sizes.append(image_size(e.path, bad))
    return sizes


def _stat_chunk(node: _Node, start: int, stop: threading.Event, walk: Walk) -> _Done:
    assert node.unsized is not None
    sizes = _sizes(node.unsized[start:start + STAT_CHUNK], stop, walk.bad)
    node.sizes[start:start + len(sizes)] = sizes
    return None, len(sizes)


def _walk_parallel(root: Path, threads: int, progress: ScanProgress | None = None, follow: bool = False) -> Walk:
    """Image files under `root` in ImageFolder's order (depth first, names sorted; links followed, never into a
    folder that is its own ancestor, nor out of the tree unless `follow`). The main thread lists alone until PROBE_S
    of listing averaged over FAST_ENTRY_S an entry (a round trip each: NFS, sshfs, Lustre); then up to `threads`
    folders are listed (and big folders stat-ed) at a time. Each listing is kept apart and the tree put together once
    all are in, so the order never depends on the timing (which error is reported, where several folders fail, does)."""
    top = os.stat(root)
    key = (top.st_dev, top.st_ino)
    first = _Node(str(root), top.st_mtime_ns, frozenset({key}))
    walk = Walk(Links(str(root), follow), folders=[first.path], mtimes=[first.mtime_ns])
    finished: queue.SimpleQueue[Future] = queue.SimpleQueue()
    todo: deque[tuple[Callable[..., _Done], tuple]] = deque()
    stop = threading.Event()
    running = files = listed = entries = 0
    alone_s = last_tick = 0.0
    ex: ThreadPoolExecutor | None = None

    def tick(force: bool = False) -> None:  # at most every PROGRESS_EVERY_S: 1,000 listings are not 1,000 redraws
        nonlocal last_tick
        if progress is not None and (force or time.monotonic() - last_tick >= PROGRESS_EVERY_S):
            last_tick = time.monotonic()
            progress(files, listed)

    def submit(fn: Callable[..., _Done], *args: object) -> None:
        nonlocal running
        if ex is None:
            todo.append((fn, args))
            return
        running += 1
        # a queue of finished tasks: waiting on a set of thousands of futures would cost O(pending) per wait
        ex.submit(fn, *args).add_done_callback(finished.put)

    def done(node: _Node | None) -> None:
        nonlocal files, listed
        if node is not None:
            listed += 1
            files += len(node.paths)
            for _, sub in node.subs:
                submit(_list_node, sub, stop, walk)
            if node.unsized:
                for start in range(0, len(node.unsized), STAT_CHUNK):
                    submit(_stat_chunk, node, start, stop, walk)
        tick()

    try:
        submit(_list_node, first, stop, walk)
        while todo:  # alone, until listing proves slow
            fn, args = todo.popleft()
            t0 = time.perf_counter()
            node, n = fn(*args)
            alone_s += time.perf_counter() - t0
            entries += n
            done(node)
            if alone_s >= PROBE_S and alone_s > entries * FAST_ENTRY_S and todo:
                ex = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="iobench-scan")
                for fn, args in todo:
                    submit(fn, *args)
                todo.clear()
        while running:
            try:
                fut = finished.get(timeout=PROGRESS_EVERY_S)
            except queue.Empty:
                tick()  # a slow listing: the line still moves (its elapsed time)
                continue
            running -= 1
            done(fut.result()[0])
    except BaseException:
        stop.set()  # the tasks running return at their next entry
        raise
    finally:
        if ex is not None:
            ex.shutdown(wait=True, cancel_futures=True)
    tick(force=True)
    _assemble(first, walk)
    walk.parallel = ex is not None
    return walk


def _assemble(top: _Node, walk: Walk) -> None:
    """The listings into `walk` in ImageFolder's order: depth first, each folder's files and sub-folders by name."""
    stack: list[tuple[_Node, int, int]] = [(top, 0, 0)]  # (folder, next file, next sub-folder)
    while stack:
        node, fi, si = stack.pop()
        if si < len(node.subs):
            cut, sub = node.subs[si]
            walk.paths += node.paths[fi:cut]
            walk.sizes += node.sizes[fi:cut]
            stack.append((node, cut, si + 1))
            stack.append((sub, 0, 0))
            walk.folders.append(sub.path)
            walk.mtimes.append(sub.mtime_ns)
        else:
            walk.paths += node.paths[fi:]
            walk.sizes += node.sizes[fi:]
            node.unsized = None


# ---- the cache of listings ---------------------------------------------------------------------------

def cache_home() -> Path:
    """$XDG_CACHE_HOME, or ~/.cache where it is unset or not absolute (as the XDG spec says)."""
    env = os.environ.get("XDG_CACHE_HOME", "")
    return Path(env) if os.path.isabs(env) else Path.home() / ".cache"


def cache_folder(root: Path) -> Path:
    """Where the cached listing of the tree at `root` (resolved) lives."""
    return cache_home().joinpath(*CACHE_PARTS, _key(root))


def _key(root: Path) -> str:
    return hashlib.sha256(os.fsencode(str(root))).hexdigest()[:32]


@dataclass
class _Cached:
    manifest: Manifest
    cached: str  # when it was written, for the user


def _load_cache(root: Path, threads: int, follow: bool,
                bad: list[tuple[str, bytes]]) -> tuple[_Cached | None, str | None]:
    """(the cached listing, None) when every folder of the tree still has its mtime and every file its size;
    (None, which folder or file changed) when one does not; (None, None) when there is no cached listing (or none
    that reads back whole, or one listed with other links followed). Files that are not images go in `bad`."""
    try:
        fd = open_tree(cache_home(), (*CACHE_PARTS, _key(root)), create=False)
    except (OSError, UserError, RuntimeError):  # RuntimeError: no home folder to be found
        return None, None
    if fd is None:
        return None, None
    try:
        info = json.loads(read_regular(Path(INFO), dir_fd=fd, limit=INFO_LIMIT))
        if info.get("format") != CACHE_FORMAT or info.get("tree") != str(root) or info["follow_links"] is not follow:
            return None, None  # another version's, (a hash collision) another tree's, or other links followed
        folders = info["folders"]
        mtimes = np.frombuffer(base64.b64decode(info["mtime_ns"], validate=True), dtype="<i8")
        if not (isinstance(folders, list) and len(folders) == len(mtimes) and folders and folders[0] == ""
                and all(isinstance(f, str) and _inside(f) for f in folders[1:])):
            return None, None
        # manifest.tsv and scan.json are renamed into place one after the other: a pair from two writers differs
        st = os.stat(MANIFEST, dir_fd=fd, follow_symlinks=False)
        if [st.st_ino, st.st_size] != [info["manifest"]["ino"], info["manifest"]["size"]]:
            return None, None
        base = str(root)
        changed = _changed([os.path.join(base, f) if f else base for f in folders], mtimes, threads)
        if changed is not None:
            return None, changed
        manifest = Manifest.read(fd, root, cache_folder(root))  # mapped, once indexed
        if len(manifest) != info["files"] or manifest.total_bytes != info["bytes"]:
            return None, None
        resized = _resized(manifest, 1 if _local(root) else threads, bad)
        if resized is not None:
            return None, resized
        manifest.links_skipped, manifest.links_followed = int(info["links_skipped"]), int(info["links_followed"])
        return _Cached(manifest, str(info["cached"])), None
    except (OSError, UserError, ValueError, KeyError, TypeError, AttributeError):
        return None, None  # unreadable or not ours: scanned again and written anew
    finally:
        os.close(fd)


def _changed(folders: list[str], mtimes: np.ndarray, threads: int) -> str | None:
    """The first folder whose mtime is not the one recorded (or that is gone), None when all match: one stat per
    folder, `threads` at a time (a round trip each on a network file system)."""
    def differs(i: int) -> bool:
        try:
            return os.stat(folders[i]).st_mtime_ns != mtimes[i]  # links followed, as the walk does
        except OSError:
            return True

    return _first(differs, folders, CHECK_CHUNK, threads)


def _resized(manifest: Manifest, threads: int, bad: list[tuple[str, bytes]]) -> str | None:
    """The first file whose size is not the cached one (or that is gone), None when all match: each file sized
    and its first bytes checked as the walk does (those not an image's go in `bad`). `threads`: 1 on a local disk,
    where a stat is microseconds of kernel work and threads would queue for the interpreter lock."""
    raw, sizes = manifest.paths.raw, manifest.sizes.tolist()

    def differs(i: int) -> bool:
        try:
            return image_size(os.fsdecode(raw(i)), bad) != sizes[i]
        except UserError:  # gone, or no longer a file
            return True

    return _first(differs, manifest.paths, STAT_CHUNK, threads)


def _first(differs: Callable[[int], bool], names: Sequence[str], chunk: int, threads: int) -> str | None:
    """The first of `names` whose index `differs`, checked `chunk` at a time on `threads` threads; None if none does."""
    def check(start: int) -> str | None:
        return next((names[i] for i in range(start, min(start + chunk, len(names))) if differs(i)), None)

    starts = range(0, len(names), chunk)
    if threads <= 1:
        return next((found for found in map(check, starts) if found is not None), None)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(starts))), thread_name_prefix="iobench-scan") as ex:
        return next((found for found in ex.map(check, starts) if found is not None), None)


def _save_cache(root: Path, walk: Walk) -> bool:
    """Write the tree's listing to its cache folder: each file to a temporary name and renamed into place, no link
    followed below the cache home. False (and nothing said) where it cannot be written: a read-only home, a full
    disk, or file names a manifest cannot hold (a new line, a leading #, not UTF-8)."""
    base = str(root)
    cut = len(base.rstrip("/")) + 1  # the tree "/" included
    rel = [p[cut:] for p in walk.paths]
    if any("\n" in p or p.startswith("#") for p in rel):
        return False
    folders = [f[cut:] if f != base else "" for f in walk.folders]
    sizes = np.array(walk.sizes, dtype=np.int64)
    try:
        home = cache_home()
        home.mkdir(parents=True, exist_ok=True)
        fd = open_tree(home, (*CACHE_PARTS, _key(root)), create=True)
        assert fd is not None
        try:
            where = cache_folder(root)
            write_atomic(fd, MANIFEST, tsv_bytes(rel, sizes), where / MANIFEST)
            st = os.stat(MANIFEST, dir_fd=fd, follow_symlinks=False)
            info = {"format": CACHE_FORMAT, "iobench": __version__, "tree": base, "files": len(rel),
                    "bytes": int(sizes.sum()), "cached": time.strftime("%Y-%m-%d %H:%M"),
                    "manifest": {"ino": st.st_ino, "size": st.st_size},
                    "folders": folders,  # relative to the tree ("": the tree itself), in the walk's order
                    "mtime_ns": base64.b64encode(np.array(walk.mtimes, dtype="<i8").tobytes()).decode(),
                    "follow_links": walk.links.follow, "links_skipped": walk.links.skipped,
                    "links_followed": walk.links.followed}
            write_json_atomic(fd, INFO, info, where / INFO)
        finally:
            os.close(fd)
    except (OSError, UserError, UnicodeError, RuntimeError):
        return False
    return True


def scan_tree(root: Path, *, threads: int = SCAN_THREADS, progress: ScanProgress | None = None, cache: bool = True,
              say: Callable[[str], None] | None = None, shown: Path | None = None,
              follow_links: bool = False) -> Manifest:
    """Manifest of the image tree at `root` (resolved): its cached listing where no folder changed (`cache`), else a
    walk with `threads` listings in flight (`progress(files, folders)` at most every 0.1 s), cached afterwards. Links
    out of the tree are skipped unless `follow_links`, counted either way; files that are not images are one line.
    `say` gets a line on what happened, `shown` is the tree as the user named it."""
    shown = shown or root
    why = None
    if cache:
        bad: list[tuple[str, bytes]] = []
        hit, why = _load_cache(root, threads, follow_links, bad)
        if hit is not None:
            manifest = hit.manifest
            refuse_non_images(bad, len(manifest), shown)
            if say:
                links = links_words(manifest.links_skipped, manifest.links_followed)
                say(f"using the cached listing of {shown} ({len(manifest):,} files, cached {hit.cached}; each "
                    f"file's size and first bytes checked){links}")
            return manifest
    t0 = time.perf_counter()
    started_ns = time.time_ns()
    walk = _walk_parallel(root, threads, progress, follow_links)
    if not walk.paths:
        raise UserError(f"no images under {shown} (looked for {', '.join(IMAGE_EXTENSIONS)})"
                        + (f"; {walk.links.skipped:,} links out of the tree skipped (--follow-links reads them)"
                           if walk.links.skipped else ""))
    refuse_non_images(walk.bad, len(walk.paths), shown)
    seconds = time.perf_counter() - t0
    note = f" (the cached listing was out of date: {why} changed)" if why else ""
    if cache:
        # A folder changed in the same tick of its clock as our listing of it could change again without its mtime
        # moving: such a tree is not cached (nor one whose server's clock runs ahead) and the next run scans again.
        if max(walk.mtimes) > started_ns - SETTLE_NS:
            note += "; not cached: the tree changed in the last seconds"
        else:
            _save_cache(root, walk)
    manifest = Manifest(root, PathTable.of(root, walk.paths), np.array(walk.sizes, dtype=np.int64),
                        links_skipped=walk.links.skipped, links_followed=walk.links.followed)
    if say:
        files = f"{len(walk.paths):,} file{'s' if len(walk.paths) != 1 else ''}"
        say(f"scanned {files} in {seconds:.1f} s (each file's first bytes checked){note}"
            f"{links_words(manifest.links_skipped, manifest.links_followed)}")
    return manifest


def scan(path: Path, *, threads: int = 8, progress: Callable[[int, int], None] | None = None, cache: bool = False,
         say: Callable[[str], None] | None = None, follow_links: bool = False) -> Manifest:
    """Manifest of a dataset iobench made, once every file is checked against it (a link in a file's place is
    refused), or of an image tree it did not make (`scan_tree`, which the other arguments are for)."""
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
    return Manifest(root, PathTable.relative(root, rel), sizes)
