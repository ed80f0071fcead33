import io

import numpy as np
from PIL import Image

from iobench.dataset.jpeg import JpegPool


def test_files_are_exact_size_decodable_and_unique():
    pool = JpegPool.build(400_000, seed=3)
    targets = np.array([2_000, 4_096, 65_539, 97_000, 112_640, 131_076, 399_000])
    seen = set()
    for i, (size, img) in enumerate(zip(targets.tolist(), pool.pick(targets).tolist(), strict=True)):
        data = b"".join(bytes(p) for p in pool.parts(i, size, img))
        assert len(data) == size
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            assert im.format == "JPEG"
            # the picture grows with the file: decode cost stays realistic
            assert im.width * im.height >= size / 2 or size < 10_000
        seen.add(data)
    assert len(seen) == len(targets)


def test_same_size_files_differ():
    pool = JpegPool.build(120_000, seed=0)
    img = int(pool.pick(np.array([110_000]))[0])
    a = b"".join(bytes(p) for p in pool.parts(1, 110_000, img))
    b = b"".join(bytes(p) for p in pool.parts(2, 110_000, img))
    assert a != b and len(a) == len(b) == 110_000
