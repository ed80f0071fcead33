"""Sample sources: where a sample's bytes come from. Every pattern runs on every source.

Each source is one module here (files.py, ...) behind the two small protocols below.

A source hands each worker thread or process its own `Reader`; `Reader.read(index)` reads sample
`index` whole into the reader's reusable buffer and returns its length. One reader per worker keeps
the hot path free of locks and allocations; sources that need per-process state (an LMDB env after
fork) open it in `reader()`.
"""

from __future__ import annotations

from typing import Protocol


class Reader(Protocol):
    buffer: bytearray  # the last sample's bytes are buffer[:n]
    open_ns: int  # time the last read spent opening (0 where a source has no open)

    def read(self, index: int) -> int: ...


class Source(Protocol):
    name: str  # "files", "lmdb", "tar": the value of runs[].source
    max_size: int  # bytes of the biggest sample (readers size their buffers by it)

    def __len__(self) -> int: ...

    def reader(self) -> Reader: ...

    def sample_name(self, index: int) -> str:
        """What sample `index` is called in an error (a file's path; "lmdb sample 12")."""
        ...

    def close(self) -> None:
        """Let go of what the source holds open (envs, shard descriptors); nothing for files."""
        ...


