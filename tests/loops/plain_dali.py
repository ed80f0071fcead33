"""A plain DALI ImageNet input loop (no iobench), as DALI's ResNet-50 example builds it, CPU only: readers.file on
the class folders, decoders.image + random_resized_crop(224) + crop_mirror_normalize, DALIGenericIterator.
Usage: plain_dali.py ROOT THREADS BATCH EPOCHS; prints the last epoch's figures (timing.py)."""

import sys

from nvidia.dali import fn, pipeline_def, types
from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
from timing import report, timed

root, threads, batch, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


@pipeline_def
def imagenet():
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
    images = fn.random_resized_crop(fn.decoders.image(jpegs, device="cpu", output_type=types.RGB), size=224)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", crop=(224, 224),
                                      mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255], mirror=fn.random.coin_flip())
    return images, labels


pipe = imagenet(batch_size=batch, num_threads=threads, device_id=None, seed=0)
pipe.build()
loader = DALIGenericIterator(pipe, ["data", "label"], reader_name="Reader", auto_reset=True,
                             last_batch_policy=LastBatchPolicy.PARTIAL)
for _ in range(epochs):
    figures = timed(loader, lambda b: len(b[0]["data"]))
report(figures)
