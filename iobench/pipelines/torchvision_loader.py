"""The torchvision pipeline: ImageNet training's input as pytorch/examples' imagenet/main.py makes it
(docs/pipelines.md): a map-style Dataset over iobench's file list, the example's transforms, the default collate
and a DataLoader whose workers are not persistent; pinned memory only where a real GPU takes the batches."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from iobench.pipelines import Shape

MEAN = (0.485, 0.456, 0.406)  # ImageNet's, as the example normalises
STD = (0.229, 0.224, 0.225)


class FileList:
    """An ImageFolder over a known file list: (transformed image, class index) per sample."""

    def __init__(self, paths: Any, root: str, transform: Any):
        from torchvision.datasets.folder import default_loader

        self.transform, self.load = transform, default_loader
        classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        class_to_idx = {c: i for i, c in enumerate(classes)}
        # (path, class) made once, as ImageFolder's `samples` list is: a sample's path and class are not worked out
        # again in each __getitem__ (the manifest's path table makes a str per access)
        self.samples = [(p, class_to_idx.get(os.path.basename(os.path.dirname(p)), 0))
                        for p in (str(paths[i]) for i in range(len(paths)))]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        path, label = self.samples[i]
        return self.transform(self.load(path)), label


class TorchvisionFeed:
    """One GPU's DataLoader of the torchvision pipeline, re-iterated each epoch."""

    def __init__(self, shape: Shape):
        import torch
        from torch.utils.data import DataLoader, DistributedSampler
        from torchvision import transforms

        transform = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                                        transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
        dataset = FileList(shape.paths, str(shape.root), transform)
        self.seed = shape.seed
        self.generator = torch.Generator()
        data: Any = dataset  # a map-style Dataset by protocol (__len__, __getitem__), as torch takes one
        self.sampler: Any = (DistributedSampler(data, num_replicas=shape.world, rank=shape.rank, shuffle=True,
                                                seed=shape.seed) if shape.world > 1 else None)
        self.loader: Any = DataLoader(data, batch_size=shape.batch_size, shuffle=self.sampler is None,
                                      sampler=self.sampler, num_workers=shape.workers, generator=self.generator,
                                      pin_memory=shape.gpu is not None)

    def batches(self, epoch: int) -> Any:
        if self.sampler is not None:
            self.sampler.set_epoch(epoch)
        else:
            self.generator.manual_seed(int(np.random.SeedSequence([self.seed, epoch]).generate_state(1)[0]))
        return self.loader

    def close(self) -> None:
        """Nothing outlives an epoch: its workers end with its iterator."""
