"""Mitigations, measured: the same read pattern on the same storage with one thing changed (a layout, a page
cache hint, the device's readahead, more readers), so each one's speed-up and cost is a like-for-like ratio.

A device setting is journaled before it is changed (`journal_path()`) and the entry removed once the old value is
back: after a run killed meanwhile, the next run (and the next change of a setting) puts the old value back."""

from __future__ import annotations

import fcntl
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from iobench import store
from iobench.answer.rules import gpus_for, supply_run
from iobench.dataset import Manifest
from iobench.errors import UserError
from iobench.host.stall import proc_stat
from iobench.record.recorder import EpochRecorder
from iobench.result import Mitigation, Result, Run, Settings
from iobench.safefs import write_file
from iobench.sources import Source
from iobench.store.lock import state_dir

if TYPE_CHECKING:
    from iobench.ui import UI

WILLNEED_DEPTH = 64  # files hinted ahead of the readers
BIG_READAHEAD_KB = 1024


@dataclass(frozen=True)
class Variant:
    """One mitigation: what changes against the baseline."""

    name: str  # runs[].mitigation and mitigations[].name
    source: str = "files"  # files | lmdb | tar
    readahead: bool = True  # lmdb: the env's readahead
    stream: bool = False  # tar: read shards in order (WebDataset), not at random
    advice: str | None = None  # files: posix_fadvise per file
    willneed: bool = False  # files: WILLNEED prefetch of the next files
    read_ahead_kb: int | None = None  # device readahead while this variant runs
    readers: int | None = None  # threads or workers, instead of the baseline's
    depth: int = 1  # objects: GETs in flight per reader (--in-flight), the baseline's being 1
    note: str | None = None  # mitigations[].note

    def open(self, manifest: Manifest, ui: UI | None = None) -> Source:
        """The variant's source (its pack made first when missing); its costs() are the pack's."""
        return store.source(self.source, manifest, ui, advice=self.advice, readahead=self.readahead,
                            stream=self.stream)


def baseline_readers(result: Result) -> int:
    """The readers of the mitigations' baseline: the supply run's (threads or workers), else the sweep's first."""
    supply = supply_run(result)
    if supply is None:
        return result.settings.concurrency[0]
    return (supply.workers or 0) if supply.reader == "workers" else supply.concurrency


def entry(run: Run, name: str, base_rate: float, settings: Settings, pack: tuple[int | None, float | None], *,
          note: str | None = None, requests: tuple[int, dict, dict] | None = None) -> Mitigation:
    """A mitigation's row: its epoch's rate against the baseline's, its costs (a pack's extra space and time), and on
    object storage its GETs (count, first byte and whole, medians)."""
    return Mitigation(
        name=name, source=run.source, samples_per_s=run.samples_per_s,
        speedup=round(run.samples_per_s / base_rate, 3) if base_rate else 0.0,
        extra_bytes=int(pack[0] or 0), pack_s=pack[1],
        gpus_fed=gpus_for(run.samples_per_s, settings.rate_per_gpu, settings.au_target)
        if settings.rate_per_gpu else None, note=note,
        requests=None if requests is None else requests[0],
        first_byte_ms=None if requests is None else round(requests[1]["p50"], 3),
        request_ms=None if requests is None else round(requests[2]["p50"], 3),
        valid=run.valid, invalid_reason=run.invalid_reason)


STREAM_NOTE = ("WebDataset order: shards shuffled, files in order within a shard; with its shuffle buffer the sample "
               "order is weaker than a full permutation")


def variants(baseline_readers: int, can_set_readahead: bool) -> list[Variant]:
    """The mitigations `run --mitigations` measures, after the baseline."""
    out = [
        Variant("fadvise-random", advice="random"),
        Variant("fadvise-willneed", willneed=True),
        Variant("lmdb", source="lmdb"),
        Variant("lmdb-noreadahead", source="lmdb", readahead=False),
        Variant("tar", source="tar"),
        Variant("tar-stream", source="tar", stream=True, note=STREAM_NOTE),
        Variant(f"readers={baseline_readers * 4}", readers=baseline_readers * 4),
    ]
    if can_set_readahead:
        out.insert(2, Variant(f"read_ahead_kb={BIG_READAHEAD_KB}", read_ahead_kb=BIG_READAHEAD_KB))
    return out


@contextmanager
def willneed_prefetch(paths: Sequence[str], order: np.ndarray, rec: EpochRecorder,
                      depth: int = WILLNEED_DEPTH) -> Iterator[None]:
    """A thread that keeps POSIX_FADV_WILLNEED hints `depth` files ahead of the readers in `order`, so the
    kernel starts reading the next files while the current ones are consumed."""
    stop = threading.Event()

    def run() -> None:
        q, n = 0, len(order)
        while q < n and not stop.is_set():
            if q >= rec.completed() + depth:
                time.sleep(0.0002)
                continue
            try:
                fd = os.open(paths[order[q]], os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                os.close(fd)
            except OSError:
                pass  # the reader will meet the same error and report it
            q += 1

    t = threading.Thread(target=run, name="iobench-willneed", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def readahead_file(bdi: str) -> Path:
    return Path("/sys/class/bdi") / bdi / "read_ahead_kb"


def journal_path() -> Path:
    """The journal of device settings iobench has changed and not yet put back."""
    return state_dir() / "journal.json"


def _start_time(pid: int) -> int | None:
    """A process's start time (clock ticks after boot; /proc/PID/stat field 22), None when it is gone or a zombie:
    with the pid it tells a process from a later one given the same pid."""
    fields = proc_stat(pid)
    return int(fields[19]) if len(fields) > 19 and fields[0] not in ("Z", "X") else None


def _alive(entry: dict) -> bool:
    start = _start_time(int(entry.get("pid", 0)))
    return start is not None and entry.get("pid_start") in (None, start)


@contextmanager
def _journal() -> Iterator[list[dict]]:
    """The journal's entries, to read and change; written back (atomically, synced) on leaving. One process at
    a time (flock on journal.lock)."""
    path = journal_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name("journal.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            entries = json.loads(path.read_text())
            entries = entries if isinstance(entries, list) else []
        except FileNotFoundError:
            entries = []
        except ValueError:
            os.replace(path, path.with_name("journal.json.bad"))  # kept for a person to read; not guessed at
            entries = []
        before = list(entries)
        yield entries
        if entries != before:
            write_file(path, json.dumps(entries, indent=1))
    finally:
        os.close(fd)


def restore_left_settings() -> list[str]:
    """Put back every setting a killed iobench left changed (its journal entry's pid is dead); one line per
    setting, saying what was done, for the caller to show as a warning."""
    try:
        if not journal_path().is_file():
            return []
    except OSError:
        return []
    lines: list[str] = []
    try:
        with _journal() as entries:
            keep = []
            for e in entries:
                if _alive(e):
                    keep.append(e)
                    continue
                if any(k["path"] == e["path"] and _alive(k) for k in entries):
                    continue  # a live run changed it since, and knows the old value: it puts it back
                what = f"{e.get('setting', 'read_ahead_kb')} of {e.get('bdi', e['path'])}"
                by = f"a killed run (pid {e.get('pid')})"
                f = Path(e["path"])
                try:
                    now = int(f.read_text())
                    if now != e["old"]:
                        f.write_text(str(e["old"]))
                        lines.append(f"restored {what} to {e['old']}, left at {now} by {by}")
                except FileNotFoundError:
                    lines.append(f"{what} was left at {e.get('new')} by {by}; the device is gone")
                except (OSError, ValueError) as exc:
                    keep.append(e)
                    lines.append(f"{what} was left at {e.get('new')} by {by}; could not put back {e['old']}: "
                                 f"{getattr(exc, 'strerror', None) or exc} (run iobench as root)")
            entries[:] = keep
    except OSError as exc:
        lines.append(f"cannot read the journal of changed settings {journal_path()}: {exc.strerror}")
    return lines


@contextmanager
def read_ahead_kb(bdi: str, kb: int) -> Iterator[int]:
    """Set the backing device's readahead for the duration, and put the old value back afterwards, also
    when the run is interrupted (Ctrl-C, SIGTERM: iobench turns both into KeyboardInterrupt). The change is
    journaled first: after a SIGKILL the next run puts it back. Yields the device's own value."""
    for line in restore_left_settings():  # a killed run's 1024 is not this device's value
        sys.stderr.write(f"warning: {line}\n")
    f = readahead_file(bdi)
    token = uuid.uuid4().hex
    try:
        old = int(f.read_text())
        with _journal() as entries:
            # another live run changed it already: the device's own value is the one it journaled
            live = [e for e in entries if e["path"] == str(f) and _alive(e)]
            old = int(live[0]["old"]) if live else old
            entries.append({"setting": "read_ahead_kb", "bdi": bdi, "path": str(f), "old": old, "new": kb,
                            "pid": os.getpid(), "pid_start": _start_time(os.getpid()), "token": token,
                            "command": sys.argv, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    except OSError as exc:
        raise UserError(f"cannot set read_ahead_kb on {f}: {exc.filename or f}: {exc.strerror} (needs root); nothing "
                        "was changed") from exc
    try:
        f.write_text(str(kb))
    except OSError as exc:
        with suppress(OSError), _journal() as entries:  # nothing was changed: its entry goes
            entries[:] = [e for e in entries if e.get("token") != token]
        raise UserError(f"cannot set read_ahead_kb on {f}: {exc.strerror} (needs root)") from exc
    try:
        yield old
    finally:
        with _journal() as entries:  # the entry goes once the old value is back (a failed write keeps it)
            if not any(e["path"] == str(f) and e.get("token") != token and _alive(e) for e in entries):
                with suppress(FileNotFoundError):  # gone: the device, and its setting with it
                    f.write_text(str(old))  # else another live run changed it too: the last one puts it back
            entries[:] = [e for e in entries if e.get("token") != token]
