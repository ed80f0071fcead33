"""The DataLoader engine's batch format and the worker side that fills it (dataloader.py reads it). A worker reads
each batch into ONE uint8 tensor in shared memory: a header, `meta`, int64 (META_ROWS, k): position, offset,
nbytes, total_ns, open_ns, decode_ns, decode_cpu_ns (its thread's clock), throttled; then the data: the raw bytes
concatenated (sample i at offset[i]), or with decode=True (k, 3, 224, 224) uint8 images. Beside it only small ints
and the error that stopped the batch, if any. A pooled buffer crosses to the main process once, with its first
batch (torch passes a shared tensor as a file descriptor and maps it); later batches in it cross as small ints.
On a 16-core host per-sample tensors capped raw reads at ~2,800/s; one tensor per batch reached ~20,000/s."""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns, thread_time_ns
from typing import TYPE_CHECKING, Any

import numpy as np

from iobench.errors import UserError
from iobench.host.bounded import die_with_parent, set_name
from iobench.sources import Reader, Source

if TYPE_CHECKING:
    import torch

CROP = 224  # RandomResizedCrop output side
IMAGE_BYTES = 3 * CROP * CROP

# rows of a batch's meta tensor
POS, OFFSET, NBYTES, TOTAL_NS, OPEN_NS, DECODE_NS, DECODE_CPU_NS, THROTTLED = range(8)
META_ROWS = 8


def import_torch():
    """torch, or an ImportError that says how to install it."""
    try:
        import torch
        import torch.utils.data  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the dataloader engine needs PyTorch (e.g. pip install torch==2.14.1 "
                          "torchvision==0.29.1)") from exc
    return torch


@dataclass
class Batch:
    """One batch as the main process receives it (given to `on_batch`). Its tensors are views of a pooled
    shared-memory buffer that the worker refills once `on_batch` returns: clone what you keep."""

    data: torch.Tensor  # uint8: concatenated raw bytes, or (k, 3, 224, 224) decoded images
    meta: torch.Tensor  # int64 (META_ROWS, k)
    pid: int  # the process that read it

    @property
    def positions(self) -> np.ndarray:
        return self.meta[POS].numpy()

    def sample(self, i: int) -> memoryview:
        m = self.meta.numpy()
        start = int(m[OFFSET, i])
        return self.data.numpy().data[start:start + int(m[NBYTES, i])]


class SourceDataset:
    """Map-style dataset backed by a Source; each worker opens its own reader after fork. Batch buffers are pooled:
    a worker reuses one of its slots once the main process marked it free in `busy`, else takes a fresh one. Fresh
    shared memory costs a page fault per 4 KiB: on a 2-core VM it held the raw path to ~3,000 samples/s against
    ~22,000/s with reuse."""

    def __init__(self, source: Source, decode: bool, busy: torch.Tensor, depth: int = 1,
                 io_timeout_s: float | None = None, finished: torch.Tensor | None = None):
        self.source = source
        self.decode = decode
        self.depth = depth  # requests in flight per worker (objects): the batch's next GETs started ahead
        self.io_timeout_s = io_timeout_s
        self.busy = busy  # int32 (workers, SLOTS), shared: 1 while the main process holds the slot's batch
        self.finished = finished  # int64 (workers,), shared: samples each worker finished (the stall watchdog's)
        self._count: Any = [0]  # this worker's place in `finished` (a memoryview of one item), once opened
        self._reader: Reader | None = None
        self._into: Callable[[int, memoryview], int] | None = None  # the reader's read_into, where it has one
        self._shared = False
        self._worker = 0
        self._pid = 0
        self._pool: list[torch.Tensor | None] = [None] * busy.shape[1]
        self._sent = [False] * busy.shape[1]  # the main process holds this slot's buffer: it is not sent again
        self._avg = max(source.max_size // 2, 4096)  # bytes per sample, learnt
        self._augment: Callable | None = None  # torchvision's RandomResizedCrop + flip, made in the worker

    def __len__(self) -> int:
        return len(self.source)

    def _open(self):
        torch = import_torch()
        info = torch.utils.data.get_worker_info()
        self._shared = info is not None  # in a worker: allocate batches in shared memory up front
        self._worker = info.id if info is not None else 0
        self._pid = os.getpid()
        self._busy = self.busy.numpy()[self._worker]
        if self.finished is not None:
            self._count = self.finished.numpy()[self._worker:self._worker + 1].data
        self._reader = (self.source.reader(self.depth, self.io_timeout_s)  # type: ignore[call-arg]  # objects
                        if self.depth > 1 else self.source.reader())
        # read_into is optional (sources/__init__.py's Reader): looked up once per worker, not per sample
        self._into = getattr(self._reader, "read_into", None)
        return self._reader

    def _alloc(self, n: int) -> torch.Tensor:
        """A uint8 tensor of n bytes; in a worker, made directly in shared memory so that sending it to the
        main process costs no copy (as default_collate does)."""
        torch = import_torch()
        if not self._shared:
            return torch.empty(n, dtype=torch.uint8)
        storage = torch.UntypedStorage._new_shared(n)
        return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (n,), (1,))

    def _take(self, n: int) -> tuple[int, torch.Tensor]:
        """A free pooled buffer of at least n bytes, as (slot, tensor); (-1, fresh tensor) if none is free. A new
        buffer has a quarter more room than asked: the estimate moves from batch to batch, and each new buffer
        costs a page fault per 4 KiB of it (and its first trip to the main process)."""
        busy = self._busy
        for slot, buf in enumerate(self._pool):
            if busy[slot] == 0:
                if buf is None or buf.numel() < n:
                    buf = self._pool[slot] = self._alloc(n + n // 4)
                    self._sent[slot] = False
                busy[slot] = 1
                return slot, buf
        return -1, self._alloc(n)

    def __getitems__(self, item: tuple[int, np.ndarray]):
        """Read one batch: (buf, k, done, used, worker, pid, slot, error), buf[:used] the batch's tensor; `done` < k
        when an error (returned, not raised) stopped it. buf is None where the main process holds the slot's buffer
        already (its shared memory is mapped there once, not per batch)."""
        reader = self._reader or self._open()
        p0, indices = item
        k = len(indices)
        hdr = META_ROWS * k * 8
        slot, buf = self._take(hdr + (k * IMAGE_BYTES if self.decode else int(k * self._avg * 1.25) + (1 << 16)))
        meta = buf[:hdr].numpy().view(np.int64).reshape(META_ROWS, k)
        meta[POS] = np.arange(p0, p0 + k, dtype=np.int64)
        meta[[DECODE_NS, DECODE_CPU_NS, THROTTLED]] = 0
        if self.decode:
            out = buf[hdr:hdr + k * IMAGE_BYTES].numpy().reshape(k, 3, CROP, CROP)
            done, error = self._read_decode(reader, indices.tolist(), meta, out)
            used = done * IMAGE_BYTES
        else:
            buf, done, used, error = self._read_raw(reader, indices.tolist(), meta, buf, hdr, slot)
        if done < k and self.depth > 1:  # GETs left in flight: the next batch takes a fresh reader
            self._reader = None
        # the batch as small ints; its buffer only on the slot's first trip (the main process keeps it)
        sent = slot >= 0 and self._sent[slot]
        if slot >= 0:
            self._sent[slot] = True
        return None if sent else buf, k, done, hdr + used, self._worker, self._pid, slot, error

    def _read_raw(self, reader, indices: list[int], meta: np.ndarray, buf, hdr: int, slot: int):
        """The raw batch: each sample read into `buf` after the header. A reader with `read_into` (files) reads
        straight there, one copy (the kernel's); another (objects, LMDB, tar) into its own buffer, copied here."""
        into = self._into
        cap = buf.numel()
        out = buf.numpy().data
        # the meta rows as memoryviews: a store into one costs a third of a numpy item store
        pos_off, pos_n, pos_t, pos_o = (meta[r].data for r in (OFFSET, NBYTES, TOTAL_NS, OPEN_NS))
        off = hdr
        i = 0
        error = None
        ahead, finish, start = self._ahead(reader, indices)
        counts = hasattr(reader, "throttled")  # a Reader made elsewhere (tests, a new source) may not count
        count = self._count
        try:
            for index in indices:
                if ahead:  # objects at depth > 1: the oldest GET in flight, in its slot's buffer
                    n = finish()
                    fits = False
                elif into is not None:
                    n = into(index, out[off:])  # the reader times it (sources/__init__.py): here it is only stored
                    fits = off + n <= cap
                else:
                    n = reader.read(index)
                    fits = False
                if counts and reader.throttled:  # answers throttled before it (objects): rare
                    meta[THROTTLED, i] = reader.throttled
                if off + n > cap:  # rare: the size estimate was short; grow and keep what is there
                    cap = max(2 * cap, off + n + (1 << 16))
                    bigger = self._alloc(cap)
                    bigger.numpy().data[:off] = out[:off]
                    buf, out = bigger, bigger.numpy().data
                    meta = buf[:hdr].numpy().view(np.int64).reshape(META_ROWS, -1)
                    pos_off, pos_n, pos_t, pos_o = (meta[r].data for r in (OFFSET, NBYTES, TOTAL_NS, OPEN_NS))
                    if slot >= 0:
                        self._pool[slot] = bigger
                        self._sent[slot] = False
                if not fits:  # in the reader's buffer: read(), or a sample longer than the room left
                    out[off:off + n] = memoryview(reader.buffer)[:n]
                pos_t[i] = reader.total_ns
                pos_o[i] = reader.open_ns
                count[0] += 1  # one more sample finished: what the main process's watchdog judges
                if ahead and ahead < len(indices):  # the buffer copied: its slot takes the next GET
                    start(indices[ahead])
                    ahead += 1
                pos_off[i] = off - hdr
                pos_n[i] = n
                off += n
                i += 1
        except (OSError, UserError) as exc:  # a read error; a GET's one line (throttled past patience) as well
            error = self._where(exc, indices[i], int(meta[POS, i]))
        if i:
            self._avg = max((off - hdr) // i, 4096)
        return buf, i, off - hdr, error

    def _where(self, exc: Exception, index: int, position: int) -> Exception:
        if hasattr(exc, "add_note"):  # Python >= 3.11; the note travels with the pickled exception
            exc.add_note(f"in DataLoader worker {self._worker} (pid {self._pid}) reading sample {index} "
                         f"at position {position}")
        return exc

    def _read_decode(self, reader, indices: list[int], meta: np.ndarray, out: np.ndarray):
        from PIL import Image

        read, clock, cpu = reader.read, perf_counter_ns, thread_time_ns
        augment = self._augment or self._augmenter()
        pos_n, pos_t, pos_o, pos_d = meta[NBYTES], meta[TOTAL_NS], meta[OPEN_NS], meta[DECODE_NS]
        pos_c = meta[DECODE_CPU_NS]
        meta[OFFSET] = 0
        i = 0
        ahead, finish, start = self._ahead(reader, indices)
        counts = hasattr(reader, "throttled")  # a Reader made elsewhere (tests, a new source) may not count
        count = self._count
        try:
            for index in indices:
                n = finish() if ahead else read(index)
                count[0] += 1  # read: the watchdog's count (decode is the client's, not the storage's)
                t1 = clock()  # decode's own time starts here
                c1 = cpu()  # and its CPU time: two clock reads against milliseconds of decode
                pos_t[i] = reader.total_ns
                pos_o[i] = reader.open_ns
                pos_n[i] = n
                if counts and reader.throttled:  # answers throttled before it (objects): rare
                    meta[THROTTLED, i] = reader.throttled
                data = io.BytesIO(memoryview(reader.buffer)[:n])  # a copy: the slot takes the next GET
                if ahead and ahead < len(indices):
                    start(indices[ahead])
                    ahead += 1
                try:
                    with Image.open(data) as src:
                        rgb = src.convert("RGB")
                except Exception as exc:  # Pillow's own error: OSError, ValueError, SyntaxError, DecompressionBomb...
                    raise self._undecodable(exc, index, data) from None
                img = augment(rgb)
                out[i] = np.asarray(img).transpose(2, 0, 1)  # HWC -> CHW, uint8
                pos_d[i] = clock() - t1
                pos_c[i] = cpu() - c1
                i += 1
        except (OSError, UserError) as exc:  # a read error, a file Pillow cannot decode (_undecodable), a GET's line
            return i, self._where(exc, indices[i], int(meta[POS, i]))
        return i, None

    def _augmenter(self) -> Callable:
        """torchvision's own RandomResizedCrop(224) + RandomHorizontalFlip, as pytorch/examples' ImageNet training
        applies them to the decoded image (torch's RNG: each worker seeded apart by torch); imported on first use."""
        from torchvision import transforms

        self._augment = transforms.Compose([transforms.RandomResizedCrop(CROP), transforms.RandomHorizontalFlip()])
        return self._augment

    def _ahead(self, reader, indices: list[int]):
        """With depth > 1: the batch's first GETs started, and (how many, finish, start); else (0, None, None)."""
        if self.depth <= 1 or not indices:
            return 0, None, None
        ahead = min(self.depth, len(indices))
        for index in indices[:ahead]:
            reader.start(index)
        return ahead, reader.finish, reader.start

    def _undecodable(self, exc: Exception, index: int, data: io.BytesIO) -> OSError:
        """A decode failure as an OSError that names the sample (its file) and keeps the decoder's own words:
        no errno (Pillow gives none), so the message is not ":: Success"."""
        name = self.source.sample_name(index)
        words = str(exc).replace(f" {data!r}", "") or "no message"  # Pillow names our in-memory copy, not the file
        return OSError(None, f"cannot decode the image ({type(exc).__name__}: {words})", name)


def worker_start(worker_id: int) -> None:  # pragma: no cover - runs in a worker
    """A worker's first step: named in ps, dies with its process (PR_SET_PDEATHSIG), and its signal handlers (the
    fork happens while the main process holds Ctrl-C and SIGTERM): Ctrl-C ends the worker loop quietly; SIGTERM is
    the main process's to handle. A SIGTERM to the whole process group (torchrun stopping a rank, a service
    manager) reaches the workers too: were they to die of it, torch's SIGCHLD handler would raise in the main
    process wherever it stood (a collective, a save), before it could stop in order. The main process ends them
    (iobench stops workers with SIGKILL), and they die with it."""
    die_with_parent()
    set_name(b"iobench-worker")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal signals the group: the main process's too

