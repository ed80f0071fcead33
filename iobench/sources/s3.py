"""The objects source: one object per sample, read whole with a GET (as s3torchconnector's S3MapDataset reads it),
`depth` GETs in flight per reader (`--in-flight`) as an asynchronous loader keeps them. What is timed, and how a
throttled answer is counted and retried: docs/s3.md, "What is measured, and how".

A reader keeps a ring of `depth` slots, each a request and its own buffer: `start(index)` sends a sample's GET,
`finish()` waits for the oldest and makes its bytes the reader's `buffer`; `read(index)` is the two at once. The CRT's
clock is read in its callbacks, as the bytes arrive; boto3's calls block (a pool thread per GET in flight past one);
s3torchconnector blocks until each response's headers, so its reader makes its one GET in `finish`."""

from __future__ import annotations

import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from time import perf_counter_ns as _clock
from typing import Any
from urllib.parse import quote

from awscrt.http import HttpHeaders, HttpRequest
from awscrt.s3 import S3RequestType

from iobench.dataset import Manifest
from iobench.dataset.paths import PathTable
from iobench.host.stall import DEFAULT_IO_TIMEOUT_S
from iobench.s3.clients import (
    READ_CONNECTIONS,
    THROTTLED,
    CrtClient,
    boto3_client,
    crt_client,
    explain,
    pause,
    retry_after,
    s3torchconnector_client,
    throttled_error,
)
from iobench.s3.url import S3Location
from iobench.sources.buffers import grown, page_aligned

_clients: dict[tuple[int, S3Location], Any] = {}  # (pid, location): the process's client
_made = threading.Lock()


def _reset_after_fork() -> None:
    global _made
    _made = threading.Lock()  # a lock another thread held at fork (making a client) would stay locked in the child


os.register_at_fork(after_in_child=_reset_after_fork)

GIVE_UP = 0.75  # a sample throttled this share of --io-timeout ends the epoch (before the watchdog calls it a stall)


def _client(loc: S3Location, connections: int) -> Any:
    """This process's client for `loc` (made on first use: after fork, a child makes its own)."""
    key = (os.getpid(), loc)
    with _made:
        if key not in _clients:
            _clients[key] = (crt_client(loc, connections=connections) if loc.client == "crt" else
                             s3torchconnector_client(loc) if loc.client == "s3torchconnector" else
                             boto3_client(loc, connections=connections, attempts=1))
        return _clients[key]


def preload(client: str) -> None:
    """Import the client's library in this process (no client is made: one made before fork is not the child's);
    awscrt is imported with this module; s3torchconnector imports torch, seconds of CPU a forked epoch would pay."""
    if client == "boto3":
        import boto3  # noqa: F401
    elif client == "s3torchconnector":
        import s3torchconnector._s3client  # noqa: F401


class ObjectSource:
    """The samples of a dataset in a bucket (the manifest's keys); a Source."""

    name = "objects"

    def __init__(self, manifest: Manifest, connections: int = READ_CONNECTIONS):
        assert isinstance(manifest.root, S3Location)
        self.loc = manifest.root
        self.keys = manifest.paths  # prefix + relative key: the object's key
        self.max_size = int(manifest.sizes.max()) if len(manifest) else 0
        self.connections = connections  # connections a client opens at most (512: the deepest default sweep)
        # the client's library imported here, once: a forked epoch or DataLoader worker that imports it itself
        # pays its import's CPU inside its measured epoch
        preload(self.loc.client)

    def __len__(self) -> int:
        return len(self.keys)

    def reader(self, depth: int = 1, io_timeout_s: float | None = None) -> ObjectReader:
        """A reader keeping up to `depth` GETs in flight (start/finish); `io_timeout_s` the run's --io-timeout."""
        return open_reader(self.loc, self.connections, self.keys.raw, self.max_size, depth, io_timeout_s)

    def sample_name(self, index: int) -> str:
        return f"s3://{self.loc.bucket}/{self.keys[index]}"

    def files(self) -> PathTable:
        return self.keys

    def costs(self) -> tuple[None, None]:
        return None, None

    def close(self) -> None:
        """Clients are the process's, kept for its next epoch."""


class _Slot:
    """One request in flight: its sample, its buffer, its clock readings and how it ended (set by the client's
    callbacks or the pool's thread, read by the reader once `done`)."""

    __slots__ = ("index", "buffer", "view", "base", "first", "t0", "t1", "t2", "n", "status", "error", "pause",
                 "done", "job", "callbacks")

    def __init__(self, size: int):
        self.index = -1
        self.buffer = self.view = page_aligned(size + 1)  # on a page: sources/buffers.py
        self.base = 0  # the object's offset of the first byte asked for (the CRT's chunks come at the object's)
        self.first = self.t0 = self.t1 = self.t2 = self.n = self.status = 0
        self.error: BaseException | None = None
        self.pause: float | None = None  # the server's Retry-After, where a throttled answer gave one
        self.done = threading.Event()
        self.job: Any = None  # what keeps the request alive: the CRT's request, or the pool's future
        self.callbacks = (self._headers, self._body, self._done)  # bound once: no method object per request

    def grow(self, need: int) -> None:
        """Slow path: an object bigger than the manifest said (the epoch's size check names it)."""
        self.buffer = self.view = grown(self.buffer, need + 1)

    # the CRT's callbacks, on its event-loop threads
    def _headers(self, status_code: int, headers: Any, **_: Any) -> None:
        if not self.t1:
            self.t1 = _clock()
        self.status = status_code

    def _body(self, chunk: bytes, offset: int, **_: Any) -> None:
        if not self.t1:
            self.t1 = _clock()
        offset -= self.base
        end = offset + len(chunk)
        if end >= len(self.buffer):
            self.grow(end)
        self.view[offset:end] = chunk
        if end > self.n:
            self.n = end

    def _done(self, error: BaseException | None = None, status_code: int | None = None,
              error_headers: Any = None, **_: Any) -> None:
        self.t2 = _clock()
        self.error = error
        if status_code:
            self.status = status_code
        if error is not None:
            self.pause = retry_after(error_headers)
        self.job = None
        self.done.set()


def open_reader(loc: S3Location, connections: int, key: Callable[[int], bytes], max_size: int, depth: int,
                io_timeout_s: float | None, span: Callable[[int], tuple[int, int]] | None = None) -> ObjectReader:
    """A reader of `loc`'s client GETting sample i's object `key(i)`, whole or (tar shards, sources/s3_tar.py) its
    bytes [start, end) `span(i)`, up to `depth` GETs in flight; `io_timeout_s` the run's --io-timeout."""
    give_up = GIVE_UP * (DEFAULT_IO_TIMEOUT_S if io_timeout_s is None else io_timeout_s)
    return READERS[loc.client](_client(loc, connections), loc, key, max_size, depth, give_up, span)


def _range(span: tuple[int, int]) -> str:
    return f"bytes={span[0]}-{span[1] - 1}"


class ObjectReader(ABC):
    __slots__ = ("_client", "_loc", "_bucket", "_key", "_span", "_slots", "_depth", "_head", "_live", "_give_up_s",
                 "buffer", "open_ns", "total_ns", "throttled")

    def __init__(self, client: Any, loc: S3Location, key: Callable[[int], bytes], max_size: int, depth: int,
                 give_up_s: float, span: Callable[[int], tuple[int, int]] | None = None):
        self._client = client
        self._loc = loc
        self._bucket = loc.bucket
        self._key = key  # the i-th key as bytes: no str kept per sample
        self._span = span  # None: the whole object
        self._slots = [_Slot(max_size) for _ in range(depth)]
        self._depth = depth
        self._head = 0  # the oldest request's slot
        self._live = 0  # requests in flight
        self._give_up_s = give_up_s
        self.buffer = self._slots[0].buffer
        self.open_ns = 0
        self.total_ns = 0
        self.throttled = 0  # the last sample's throttled answers (each retried)

    def read(self, index: int) -> int:
        self.start(index)
        return self.finish()

    def start(self, index: int) -> None:
        """Send sample `index`'s GET (at most `depth` unfinished at once)."""
        s = self._slots[(self._head + self._live) % self._depth]
        self._live += 1
        s.index = index
        s.first = 0
        self._send(s)

    def finish(self) -> int:
        """Wait for the oldest GET started; its bytes are then buffer[:n]. A throttled answer is counted and the
        GET sent again after the server's pause."""
        s = self._slots[self._head]
        self._head = (self._head + 1) % self._depth
        self._live -= 1
        throttled = 0
        self._wait(s)
        while s.error is not None:  # slow path
            if not self._is_throttled(s):
                raise self._failed(s.error, s.index, s.status)
            if (waited := (_clock() - s.first) / 1e9) >= self._give_up_s:
                raise throttled_error(replace(self._loc, prefix=self._key(s.index).decode()), "reading",
                                      f"{s.status or 503} to each of {throttled + 1} GETs of one object over "
                                      f"{waited:.1f} s")
            throttled += 1
            time.sleep(pause(s.pause, throttled))
            self._send(s)
            self._wait(s)
        self.throttled = throttled
        self.buffer = s.buffer
        self.open_ns = (s.t1 or s.t2) - s.t0
        self.total_ns = s.t2 - s.first
        return s.n

    def _send(self, s: _Slot) -> None:
        """Send (here, where the client's call blocks: reset and stamp) slot `s`'s GET: its clock readings from here."""
        s.t1 = s.n = s.status = 0
        s.error = s.pause = None
        s.t0 = _clock()
        if not s.first:
            s.first = s.t0

    @abstractmethod
    def _wait(self, s: _Slot) -> None:
        """Return once slot `s`'s GET has ended (its bytes in its buffer, or its error set)."""

    @abstractmethod
    def _is_throttled(self, s: _Slot) -> bool:
        """Whether slot `s`'s failed GET was a throttled answer (503 SlowDown, 429): counted and sent again."""

    def _failed(self, exc: BaseException, index: int, status: int = 0) -> Exception:
        return explain(exc, replace(self._loc, prefix=self._key(index).decode()), "reading", status)


class CrtReader(ObjectReader):
    """GETs through the AWS CRT (awscrt): `start` returns once the request is queued; the body arrives as chunks on
    the CRT's threads, each copied once into the slot's buffer."""

    __slots__ = ()

    def _send(self, s: _Slot) -> None:
        c: CrtClient = self._client
        s.t1 = s.t2 = s.n = s.status = 0
        s.error = s.pause = None
        s.done.clear()
        headers = [("Host", c.host)]
        if self._span is not None:
            span = self._span(s.index)
            s.base = span[0]
            headers.append(("Range", _range(span)))
        request = HttpRequest("GET", c.path + quote(self._key(s.index)), HttpHeaders(headers))
        on_headers, on_body, on_done = s.callbacks
        s.t0 = _clock()
        if not s.first:
            s.first = s.t0
        s.job = c.client.make_request(type=S3RequestType.GET_OBJECT, request=request, on_headers=on_headers,
                                      on_body=on_body, on_done=on_done)

    def _wait(self, s: _Slot) -> None:
        s.done.wait()  # a server that stops answering: the engine's watchdog (--io-timeout) ends the epoch

    def _is_throttled(self, s: _Slot) -> bool:
        return s.status in (503, 429) or "SLOW_DOWN" in getattr(s.error, "name", "")


class Boto3Reader(ObjectReader):
    """GETs through boto3: get_object returns at the response's headers; the body is read into the slot's buffer.
    Its calls block: at depth 1 the reader's own thread makes them, deeper a pool of `depth` threads."""

    __slots__ = ("_pool",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._pool = ThreadPoolExecutor(self._depth, thread_name_prefix="iobench-get") if self._depth > 1 else None

    def _send(self, s: _Slot) -> None:
        ObjectReader._send(self, s)  # (not super(): no object made per GET)
        if self._pool is not None:
            s.job = self._pool.submit(self._get, s)

    def _wait(self, s: _Slot) -> None:
        if self._pool is None:
            self._get(s)
        else:
            job: Future = s.job
            job.result()
            s.job = None

    def _get(self, s: _Slot) -> None:
        try:
            key = self._key(s.index).decode()
            got = (self._client.get_object(Bucket=self._bucket, Key=key) if self._span is None else
                   self._client.get_object(Bucket=self._bucket, Key=key, Range=_range(self._span(s.index))))
            s.t1 = _clock()
            length = got["ContentLength"]
            if length >= len(s.buffer):
                s.grow(length)
            body, view = got["Body"], s.view
            n = 0
            while n < length and (k := body.readinto(view[n:])):
                n += k
            body.close()
            s.n = n
        except Exception as exc:
            s.error = exc
            meta = getattr(exc, "response", {}).get("ResponseMetadata", {})
            s.status = meta.get("HTTPStatusCode") or 0
            s.pause = retry_after((meta.get("HTTPHeaders") or {}).items())
        s.t2 = _clock()

    def _is_throttled(self, s: _Slot) -> bool:
        code = str(getattr(s.error, "response", {}).get("Error", {}).get("Code", ""))
        return s.status in (503, 429) or code in THROTTLED


class ConnectorReader(ObjectReader):
    """GETs through s3torchconnector's client as its S3MapDataset makes them (`_get_object_stream`, without its
    S3Reader's own copy), each chunk copied once into the slot's buffer; one GET at a time, made in `finish`."""

    __slots__ = ()

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        assert self._depth == 1, "s3torchconnector keeps one GET in flight per reader"

    def _wait(self, s: _Slot) -> None:
        on_body = s.callbacks[1]  # as the CRT's chunks: the first one's time, each copied once at its offset
        try:
            span = () if self._span is None else self._span(s.index)  # its end is exclusive
            for chunk in self._client._get_object_stream(self._bucket, self._key(s.index).decode(), *span):
                on_body(chunk, s.n)
        except Exception as exc:  # its errors (S3Exception) carry no status: their words say it
            s.error = exc
        s.t2 = _clock()

    def _is_throttled(self, s: _Slot) -> bool:
        text = str(s.error).lower()
        return any(w in text for w in ("slowdown", "slow down", "throttl", "503", "429", "toomanyrequests"))


READERS: dict[str, type[ObjectReader]] = {"crt": CrtReader, "boto3": Boto3Reader, "s3torchconnector": ConnectorReader}
