"""The objects source: one object per sample, read whole with a GET, as s3torchconnector's S3MapDataset reads it.

Per request the reader times the first byte (`open_ns`: request sent to the first bytes of the body in hand, the
object store's counterpart of a file's open) and the whole (`total_ns`: to the last byte), and copies the body into
its reusable buffer. The client is the process's own (`_client`): readers threads of one process share it, a
DataLoader worker or a forked epoch makes its own after fork. boto3 does not retry a GET; the CRT retries it once
(the fewest it allows); a GET that fails (or is throttled) past that ends the epoch in one line instead of hiding
in the figures."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from time import perf_counter_ns as _clock
from typing import Any

from iobench.dataset import Manifest
from iobench.dataset.paths import PathTable
from iobench.s3 import S3Location
from iobench.s3.clients import READ_RETRIES, boto3_client, crt_client, explain

_clients: dict[tuple[int, S3Location], Any] = {}  # (pid, location): the process's client
_made = threading.Lock()


def _client(loc: S3Location, connections: int) -> Any:
    """This process's client for `loc` (made on first use: after fork, a child makes its own)."""
    key = (os.getpid(), loc)
    with _made:
        if key not in _clients:
            _clients[key] = (crt_client(loc) if loc.client == "crt" else
                             boto3_client(loc, connections=connections, attempts=1))
        return _clients[key]


def preload(client: str) -> None:
    """Import the client's library in this process (no client is made: one made before fork is not the child's)."""
    if client == "crt":
        import s3torchconnector._s3client  # noqa: F401
    else:
        import boto3  # noqa: F401


class ObjectSource:
    """The samples of a dataset in a bucket (the manifest's keys); a Source."""

    name = "objects"

    def __init__(self, manifest: Manifest, connections: int = 512):
        assert isinstance(manifest.root, S3Location)
        self.loc = manifest.root
        self.keys = manifest.paths  # prefix + relative key: the object's key
        self.max_size = int(manifest.sizes.max()) if len(manifest) else 0
        self.connections = connections  # boto3: connections its pool keeps (512: the deepest sweep of issue 22)
        # the client's library imported here, once: a forked epoch or DataLoader worker that imports it itself
        # pays seconds of CPU (s3torchconnector imports torch) inside its measured epoch
        preload(self.loc.client)

    def __len__(self) -> int:
        return len(self.keys)

    def reader(self) -> CrtReader | Boto3Reader:
        client = _client(self.loc, self.connections)
        kind = CrtReader if self.loc.client == "crt" else Boto3Reader
        return kind(client, self.loc, self.keys, self.max_size)

    def sample_name(self, index: int) -> str:
        return f"s3://{self.loc.bucket}/{self.keys[index]}"

    def files(self) -> PathTable:
        return self.keys

    def describe(self) -> dict:
        return {"source": self.name, "samples": len(self), "client": self.loc.client,
                "retries": READ_RETRIES[self.loc.client]}

    def close(self) -> None:
        """Clients are the process's, kept for its next epoch."""


class _Reader:
    __slots__ = ("_client", "_loc", "_bucket", "_key", "buffer", "_view", "open_ns", "total_ns")

    def __init__(self, client: Any, loc: S3Location, keys: PathTable, max_size: int):
        self._client = client
        self._loc = loc
        self._bucket = loc.bucket
        self._key = keys.raw  # the i-th key as bytes: no str kept per sample
        self.buffer = bytearray(max_size + 1)
        self._view = memoryview(self.buffer)
        self.open_ns = 0
        self.total_ns = 0

    def _grow(self, need: int) -> None:
        """Slow path: an object bigger than the manifest said (the epoch's size check names it)."""
        self._view.release()
        self.buffer.extend(bytearray(need - len(self.buffer) + 1))
        self._view = memoryview(self.buffer)

    def _failed(self, exc: Exception, index: int) -> Exception:
        return explain(exc, replace(self._loc, prefix=self._key(index).decode()), "reading")


class CrtReader(_Reader):
    """GETs through the AWS CRT (s3torchconnector): the body arrives as chunks, each copied once into the buffer."""

    __slots__ = ()

    def read(self, index: int) -> int:
        t0 = _clock()
        try:
            stream = self._client._get_object_stream(self._bucket, self._key(index).decode())
            n = 0
            t1 = 0
            for chunk in stream:
                if not t1:
                    t1 = _clock()
                k = len(chunk)
                if n + k >= len(self.buffer):
                    self._grow(n + k)
                self._view[n:n + k] = chunk
                n += k
        except Exception as exc:
            raise self._failed(exc, index) from None
        t2 = _clock()
        self.open_ns = (t1 or t2) - t0
        self.total_ns = t2 - t0
        return n


class Boto3Reader(_Reader):
    """GETs through boto3: get_object returns at the response's headers; the body is read into the buffer."""

    __slots__ = ()

    def read(self, index: int) -> int:
        t0 = _clock()
        try:
            got = self._client.get_object(Bucket=self._bucket, Key=self._key(index).decode())
            t1 = _clock()
            length = got["ContentLength"]
            if length >= len(self.buffer):
                self._grow(length)
            body = got["Body"]
            n = 0
            while n < length and (k := body.readinto(self._view[n:])):
                n += k
            body.close()
        except Exception as exc:
            raise self._failed(exc, index) from None
        self.open_ns = t1 - t0
        self.total_ns = _clock() - t0
        return n
