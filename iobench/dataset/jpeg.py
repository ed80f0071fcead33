"""Real, decodable JPEGs of an exact byte size, made at storage speed. Pillow encodes ~50 files/s on a small VM, so
a pool of photo-like JPEGs is encoded once (sizes on a ~10% ladder) and each file is the largest that fits, padded to
its size with JPEG comment (COM) segments after the start-of-image marker, which decoders skip: a ~110 kB file
decodes as a ~500x375 photo. The padding holds a per-file id and random bytes: no two files are equal, and storage
compression or deduplication cannot shrink the dataset."""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

SOI = b"\xff\xd8"
COM = b"\xff\xfe"
MAX_SEGMENT_PAYLOAD = 65533  # a segment length field counts itself (2 B) and is at most 65535
ID_BYTES = 16  # b"iobench" tag + 8-byte file id + 1 spare
MIN_PADDING = 4 + ID_BYTES  # one COM header + the id: every file carries at least this much
RANDOM_BLOCK = 4 * 1024 * 1024
_HEAD = struct.Struct(">2s2sH7sQx")  # SOI, COM, segment length, b"iobench", file id, spare: one pack per file


def _photo_like(width: int, height: int, rng: np.random.Generator) -> Image.Image:
    """Smooth colour field + texture noise: compresses like a photo (~3-4 bits/pixel at q90)."""
    coarse = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), dtype=np.float32)
    base += rng.standard_normal((height, width, 3), dtype=np.float32) * 18
    return Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))


@dataclass
class JpegPool:
    """Encoded JPEGs sorted by size; `for_size` picks the one to pad for a target size."""

    images: list[bytes]
    sizes: np.ndarray  # len(images), ascending
    random_block: bytes

    def __post_init__(self) -> None:
        # views made once, not per file: `parts` runs for every file gen writes (a million at ImageNet scale)
        self._tails = [memoryview(d)[2:] for d in self.images]
        self._lengths = [len(d) for d in self.images]
        self._block = memoryview(self.random_block)

    @classmethod
    def build(cls, max_target: int, seed: int) -> JpegPool:
        rng = np.random.default_rng([seed, 0x1BE])
        images: list[bytes] = []
        photo = _photo_like(1024, 768, rng)  # pool images are crops of one photo: one RNG pass, not one each
        width = 16.0
        while True:
            w = int(width)
            h = max(8, w * 3 // 4)
            if w > photo.width:
                photo = _photo_like(photo.width * 2, photo.height * 2, rng)
            buf = io.BytesIO()
            photo.crop((0, 0, w, h)).save(buf, format="JPEG", quality=90)
            data = buf.getvalue()
            if data[:2] != SOI:  # pragma: no cover - Pillow always writes SOI first
                raise RuntimeError("encoder did not start with SOI")
            if images and len(data) + MIN_PADDING > max_target:
                break
            images.append(data)
            width *= 1.05  # ~10% more bytes per step: padding stays under ~10% of a file
        sizes = np.array([len(d) for d in images], dtype=np.int64)
        order = np.argsort(sizes, kind="stable")
        return cls([images[i] for i in order], sizes[order], rng.bytes(RANDOM_BLOCK))

    def pick(self, targets: np.ndarray) -> np.ndarray:
        """Index of the largest pool image that leaves room for the padding, per target size."""
        idx = np.searchsorted(self.sizes, targets - MIN_PADDING, side="right") - 1
        if (idx < 0).any():
            raise ValueError(f"smallest pool JPEG ({self.sizes[0]} B) does not fit {targets.min()} B")
        return idx

    def parts(self, file_id: int, size: int, image: int) -> Sequence[bytes | memoryview]:
        """Buffers whose concatenation is a JPEG of exactly `size` bytes (written with writev)."""
        pad = size - self._lengths[image]  # bytes of COM segments, headers included
        if pad <= MAX_SEGMENT_PAYLOAD + 4:  # one COM segment: every file under ~65 kB of padding (all ImageNet's)
            payload = pad - 4
            at = (file_id * 7919) % (RANDOM_BLOCK - payload)
            n = payload - ID_BYTES
            return (_HEAD.pack(SOI, COM, payload + 2, b"iobench", file_id), self._block[at:at + n],
                    self._tails[image])
        jpeg = self.images[image]
        nseg = -(-pad // (MAX_SEGMENT_PAYLOAD + 4))
        payload = pad - 4 * nseg  # spread evenly: each segment <= 65533 B, the first >= ID_BYTES
        block = self._block
        at = (file_id * 7919) % (RANDOM_BLOCK - payload)
        out: list[bytes | memoryview] = [SOI]
        for seg in range(nseg):
            n = payload // nseg + (1 if seg < payload % nseg else 0)
            out.append(COM + struct.pack(">H", n + 2))
            if seg == 0:
                out.append(b"iobench" + struct.pack(">Q", file_id) + b"\0")
                n -= ID_BYTES
            out.append(block[at : at + n])
            at += n
        out.append(memoryview(jpeg)[2:])
        return out


def write_all(fd: int, parts: Sequence[bytes | memoryview], total: int | None = None) -> int:
    """os.writev that finishes short writes (network file systems may take less than asked); `total`, the bytes
    in `parts` when the caller knows it, saves adding them up."""
    if total is None:
        total = sum(len(p) for p in parts)
    done = os.writev(fd, parts)
    if done < total:
        rest = memoryview(b"".join(parts))[done:]
        while rest:
            rest = rest[os.write(fd, rest) :]
    return total
