"""The DALI pipelines (NVIDIA DALI, the `dali` extra; docs/pipelines.md): `fn.readers.file` on the class folders,
`--workers` its num_threads; `dali-raw` the reader alone, `dali` with decode, crop and normalize, handed to PyTorch
by DALI's own DALIGenericIterator. It decodes on the CPU, or on a real GPU with --consumer cuda ("mixed")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from iobench.pipelines import Shape

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
READER = "Reader"


def _build(shape: Shape, decode: bool) -> Any:
    from nvidia.dali import fn, pipeline_def
    from nvidia.dali import types as dali_types

    types: Any = dali_types  # its enums are made at import: no stub names them

    device = "cpu" if shape.gpu is None else "mixed"

    @pipeline_def
    def pipe() -> Any:
        jpegs, labels = fn.readers.file(file_root=str(shape.root), random_shuffle=True, seed=shape.seed,
                                        shard_id=shape.rank, num_shards=shape.world, name=READER)
        if not decode:
            return jpegs, labels
        images = fn.decoders.image(jpegs, device=device, output_type=types.RGB)
        images = fn.random_resized_crop(images, size=224)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", crop=(224, 224), mean=MEAN,
                                          std=STD, mirror=fn.random.coin_flip())
        return images, labels

    p = pipe(batch_size=shape.batch_size, num_threads=max(shape.workers, 1), device_id=shape.gpu, seed=shape.seed)
    p.build()
    return p


class DaliFeed:
    """One GPU's DALI pipeline, built once for the training run and read one reader epoch at a time."""

    def __init__(self, shape: Shape, decode: bool):
        self.pipe = _build(shape, decode)
        self.iterator: Any = None
        if decode:
            from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

            self.iterator = DALIGenericIterator(self.pipe, ["data", "label"], reader_name=READER,
                                                last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)
        meta = self.pipe.reader_meta(READER)
        n, shards, rank = meta["epoch_size"], meta["number_of_shards"], meta["shard_id"]
        self.size = n * (rank + 1) // shards - n * rank // shards  # DALI's shard: [n*i/S, n*(i+1)/S)

    def batches(self, epoch: int) -> Any:
        return self.iterator if self.iterator is not None else self._raw()

    def _raw(self) -> Iterator[Any]:
        """The reader's batches over one epoch of its shard: the last one counts what is left of the epoch (the
        reader runs on across epochs, as it does under a training loop)."""
        left = self.size
        while left > 0:
            jpegs, labels = self.pipe.run()
            take = min(len(jpegs), left)
            left -= take
            yield (jpegs if take == len(jpegs) else [jpegs.at(i) for i in range(take)]), labels

    def close(self) -> None:
        self.iterator = None
        self.pipe = None
