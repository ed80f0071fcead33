"""Tar shards in a bucket (uploaded by `iobench pack --url`: sources/pack_s3.py), read as training reads them:
`RangeSource`, one ranged GET per sample at the offset index's place; `StreamSource`, one GET per shard, the samples
taken from it in order, as WebDataset streams shards over HTTP. Their order, timing and per-request figures:
docs/s3.md, "Mitigations on objects"."""

from __future__ import annotations

import io
import os
import threading
from array import array
from collections.abc import Callable
from functools import partial
from queue import SimpleQueue
from time import perf_counter_ns as _clock
from typing import Any
from urllib.parse import quote

import numpy as np
from awscrt.http import HttpHeaders, HttpRequest
from awscrt.s3 import S3RequestType

from iobench.dataset import Manifest
from iobench.errors import UserError
from iobench.record.recorder import EpochRecorder, latency_summary
from iobench.s3.clients import CrtClient, explain
from iobench.s3.url import S3Location
from iobench.sources.buffers import page_aligned
from iobench.sources.pack_s3 import S3Pack
from iobench.sources.pack_tar import TAR_BLOCK, TAR_INDEX
from iobench.sources.s3 import ObjectReader, _client, open_reader, preload
from iobench.sources.tar import TarIndex, shard_read_order

STALE_S = 10.0  # a stream that has not moved on for this long is given up by a sample waiting on it: it opens its own


class _Shards(TarIndex):
    """The pack's index, keys and client choice, as both sources read them."""

    def __init__(self, manifest: Manifest, pack: S3Pack, connections: int = 512):
        assert isinstance(manifest.root, S3Location)
        self.loc = pack.loc
        marker = pack.marker() or {}
        data = pack.get(TAR_INDEX)
        if data is None:
            raise UserError(f"{pack.loc} holds no tar pack ({TAR_INDEX} is missing): run iobench pack --url first")
        index = np.load(io.BytesIO(data)).astype(np.int64, copy=False)
        if index.ndim != 2 or index.shape[1] != 3 or len(index) != len(manifest):
            raise UserError(f"{pack.loc}/{TAR_INDEX}: not the index of this dataset's {len(manifest):,} samples")
        self.shard_keys = [self.loc.key(n) for n in marker.get("shards", [])]
        self._raw_keys = [key.encode() for key in self.shard_keys]  # as the objects readers take keys
        super().__init__(index, marker, len(self.shard_keys), pack.loc)
        self.connections = connections
        starts = np.searchsorted(index[:, 0], np.arange(self.shards))  # members of a shard are consecutive (plan_tar)
        self._first = array("q", starts.astype(np.int64).tobytes())
        self._last = array("q", (np.append(starts[1:], len(index)) - 1).astype(np.int64).tobytes())
        preload(self.loc.client)  # imported once here, not inside a forked epoch

    def sample_name(self, index: int) -> str:
        return f"s3://{self.loc.bucket}/{self.shard_keys[self._shard[index]]} (tar sample {index})"

    def files(self) -> list[str]:
        return self.shard_keys

    def close(self) -> None:
        """Clients are the process's, kept for its next epoch."""

    def requests(self, order: np.ndarray, rec: EpochRecorder) -> tuple[int, dict, dict]:
        """(GETs, their time to first byte, their whole time) in an epoch: here one per sample."""
        read = rec.read_mask()
        return int(read.sum()), latency_summary(rec.open_ns[read]), latency_summary(rec.total_ns[read])


class _Chunks:
    """A GET's body as a stream with readinto, over the chunks `next_chunk()` gives in order (None: the end), each
    copied once into the reader's buffer. As is, s3torchconnector's stream taken on the reader's thread (it has no
    cancel: a stream let go before its end is dropped with its request)."""

    __slots__ = ("_next", "_chunk", "_at", "t1")

    def __init__(self, next_chunk: Callable[[], bytes | None]) -> None:
        self._next = next_chunk
        self._chunk = memoryview(b"")
        self._at = 0
        self.t1 = 0  # when the first chunk came, where it is taken on another thread (0: when `first` has it)

    def first(self) -> int:
        """Wait for the first chunk; when it came."""
        self._chunk, self._at = memoryview(self._next() or b""), 0
        return self.t1 or _clock()

    def readinto(self, view: memoryview) -> int:
        if self._at >= len(self._chunk):
            chunk = self._next()
            if chunk is None:
                return 0
            self._chunk, self._at = memoryview(chunk), 0
        k = min(len(view), len(self._chunk) - self._at)
        view[:k] = self._chunk[self._at:self._at + k]
        self._at += k
        return k

    def close(self) -> None:
        """A GET not read to its end is let go."""


class _CrtBody(_Chunks):
    """A GET through the CRT (awscrt): the chunks its event-loop threads deliver, in order, queued as they come;
    `close` cancels a GET not read to its end."""

    __slots__ = ("_job", "_queue", "_ended", "status")

    def __init__(self, c: CrtClient, key: str, start: int):
        super().__init__(self._take)
        self._queue: SimpleQueue[bytes | BaseException | None] = SimpleQueue()  # the chunks, then how it ended
        self._ended = False
        self.status = 0  # the answer's HTTP status, for the words of a failed GET
        request = HttpRequest("GET", c.path + quote(key), HttpHeaders([("Host", c.host), ("Range", f"bytes={start}-")]))
        self._job = c.client.make_request(type=S3RequestType.GET_OBJECT, request=request, on_headers=self._headers,
                                          on_body=self._body, on_done=self._done)

    # the CRT's callbacks, on its threads
    def _headers(self, status_code: int, **_: Any) -> None:
        self.status = status_code

    def _body(self, chunk: bytes, **_: Any) -> None:
        if not self.t1:
            self.t1 = _clock()
        self._queue.put(chunk)

    def _done(self, error: BaseException | None = None, status_code: int | None = None, **_: Any) -> None:
        if status_code:
            self.status = status_code
        self._ended = True
        self._queue.put(error)

    def _take(self) -> bytes | None:
        """The next chunk (None: the GET has ended); waits for it. A server that stops answering: the engine's
        watchdog (--io-timeout) ends the epoch."""
        got = self._queue.get()
        if got is None or isinstance(got, BaseException):
            self._queue.put(got)  # the end, said again to a later call
        if isinstance(got, BaseException):
            raise got
        return got

    def close(self) -> None:
        if not self._ended:
            self._job.cancel()


class RangeSource(_Shards):
    """Samples read by ranged GETs from the tar shards (one GET per sample); a Source. Its readers are the objects
    source's (sources/s3.py), each GET of a sample's bytes in its shard."""

    def reader(self, depth: int = 1, io_timeout_s: float | None = None) -> ObjectReader:
        """A reader keeping up to `depth` ranged GETs in flight (start/finish: --in-flight, the CRT's)."""
        return open_reader(self.loc, self.connections, self._shard_key, self.max_size, depth, io_timeout_s,
                           self._span)

    def _shard_key(self, index: int) -> bytes:
        return self._raw_keys[self._shard[index]]

    def _span(self, index: int) -> tuple[int, int]:
        off = self._offset[index]
        return off, off + self._size[index]


class _Stream:
    """One shard's GET in one process: where it stands, and which sample it gives next."""

    __slots__ = ("cond", "next", "pos", "body")

    def __init__(self, first: int):
        self.cond = threading.Condition()
        self.next = first  # the sample the stream gives next
        self.pos = 0  # the shard's offset the stream stands at
        self.body: Any = None  # the open GET (None: none)


class StreamSource(_Shards):
    """Samples taken in order from one GET per shard, as WebDataset streams shards; a Source."""

    def __init__(self, manifest: Manifest, pack: S3Pack, connections: int = 512):
        super().__init__(manifest, pack, connections)
        self._streams: dict[int, list[_Stream]] = {}  # pid -> a stream per shard (a forked child makes its own)
        self.readers: dict[int, int] = {}  # pid -> readers made there (1: a DataLoader worker, nobody to wait for)

    def __getstate__(self) -> dict:  # picklable for spawn-started workers: no streams, no locks
        return {**self.__dict__, "_streams": {}, "readers": {}}

    def streams(self) -> list[_Stream]:
        pid = os.getpid()
        got = self._streams.get(pid)
        if got is None:  # setdefault: two threads making them at once keep one list
            got = self._streams.setdefault(pid, [_Stream(first) for first in self._first])
        return got

    def reader(self) -> StreamReader:
        pid = os.getpid()
        self.readers[pid] = self.readers.get(pid, 0) + 1
        return StreamReader(self)

    def stream_order(self, seed: int, epoch: int, *, readers: int = 1, batch: int = 1) -> np.ndarray:
        """WebDataset's read order for `readers` threads or workers (see the module)."""
        return shard_read_order(self.index, seed, epoch, workers=readers, batch=batch)

    def requests(self, order: np.ndarray, rec: EpochRecorder) -> tuple[int, dict, dict]:
        """One GET per stream opened: its time to first byte (the opening sample's open_ns) and its whole (the
        opening sample and those taken after it from the same stream)."""
        read = rec.read_mask()
        idx = np.asarray(order)[read]
        by = np.argsort(idx, kind="stable")  # a shard's samples in stream order
        opens, totals = rec.open_ns[read][by], rec.total_ns[read][by]
        starts = opens > 0
        if not starts.any():
            return 0, latency_summary(opens[:0]), latency_summary(totals[:0])
        group = np.cumsum(starts) - 1
        keep = group >= 0
        whole = np.bincount(group[keep], weights=totals[keep]).astype(np.int64)
        return int(starts.sum()), latency_summary(opens[starts]), latency_summary(whole)


class StreamReader:
    __slots__ = ("_src", "_client", "_bucket", "_keys", "_shard", "_offset", "_size", "buffer", "_view",
                 "open_ns", "total_ns", "_streams", "_first", "_last")
    throttled = 0  # a throttled GET of a shard ends the epoch in one line (not retried here)

    def __init__(self, src: StreamSource):
        self._src = src
        self._client = _client(src.loc, src.connections)
        self._bucket = src.loc.bucket
        self._keys = src.shard_keys
        self._shard, self._offset, self._size = src._shard, src._offset, src._size
        self.buffer = self._view = page_aligned(max(src.max_size, TAR_BLOCK) + 1)  # on a page: sources/buffers.py
        self.open_ns = 0
        self.total_ns = 0
        self._streams = src.streams()
        self._first, self._last = src._first, src._last

    def read(self, index: int) -> int:
        s = self._shard[index]
        st = self._streams[s]
        with st.cond:
            if index == self._first[s] and st.next != index:  # a new epoch after one cut short: start again
                self._drop(st, index)
            if st.next < index and self._src.readers[os.getpid()] < 2:
                # nobody here reads the samples before it: a DataLoader's batches of a stream that went on in
                # another worker once this worker's own ran out (it cannot split the stream): a GET of its own
                self._drop(st, index)
            while st.next < index:  # another thread reads the sample before it: wait for it (not timed)
                before = st.next
                if not st.cond.wait(STALE_S) and st.next == before:
                    self._drop(st, index)  # an order that skips samples: this one opens its own stream
            if st.next > index:  # read again, out of the stream's order
                self._drop(st, index)
            t0 = _clock()
            off, size = self._offset[index], self._size[index]
            try:
                if st.body is None:
                    st.pos = off - TAR_BLOCK  # from its header: the stream reads the shard as a tar
                    st.body, t1 = self._get(self._keys[s], st.pos)
                    self.open_ns = t1 - t0
                else:
                    self.open_ns = 0
                while st.pos < off:  # the header, and the padding of the sample before
                    k = st.body.readinto(self._view[:min(off - st.pos, len(self.buffer))])
                    if not k:
                        raise UserError(f"{self._src.sample_name(index)}: the object ends before the sample")
                    st.pos += k
                n = 0
                while n < size:
                    if not (k := st.body.readinto(self._view[n:size])):
                        raise UserError(f"{self._src.sample_name(index)}: the object ends inside the sample (a "
                                        "truncated shard?)")
                    n += k
                st.pos += n
                if index == self._last[s]:
                    self._drop(st, self._first[s])
                else:
                    st.next = index + 1
            except Exception as exc:
                body = st.body
                self._drop(st, self._first[s])
                raise self._failed(exc, index, body) from None
            finally:
                st.cond.notify_all()
            self.total_ns = _clock() - t0
        return n

    @staticmethod
    def _drop(st: _Stream, nxt: int) -> None:
        if st.body is not None:
            st.body.close()
        st.body, st.next = None, nxt

    def _get(self, key: str, start: int) -> tuple[Any, int]:
        """A GET of key's bytes from `start` to its end: (a stream with readinto, when its first bytes were in
        hand)."""
        if self._src.loc.client == "crt":
            body: _Chunks = _CrtBody(self._client, key, start)
            return body, body.first()
        if self._src.loc.client == "s3torchconnector":  # its get_object returns at the headers
            body = _Chunks(partial(next, iter(self._client._get_object_stream(self._bucket, key, start)), None))
            return body, body.first()
        body = self._client.get_object(Bucket=self._bucket, Key=key, Range=f"bytes={start}-")["Body"]
        return body, _clock()  # get_object returns at the response's headers: the body's bytes follow them

    def _failed(self, exc: Exception, index: int, body: Any = None) -> Exception:
        if isinstance(exc, UserError):
            return exc
        status = body.status if isinstance(body, _CrtBody) else 0  # the CRT's errors do not say it (a 404: deleted)
        return explain(exc, S3Location(self._bucket, self._keys[self._shard[index]], self._src.loc.endpoint),
                       "reading", status)
