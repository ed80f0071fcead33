"""A user's own input pipeline for `iobench run --pipeline scripts/gpu_decode_pipeline.py:loader` (the contract:
docs/pipelines.md): a DataLoader whose workers read each JPEG's bytes (torchvision.io.read_file) and a main process
that decodes the batch on the GPU with nvJPEG (torchvision.io.decode_jpeg on cuda) and crops, flips and normalizes
it there: the GPU-decode shape of a job, as DALI's `mixed` decoder runs it, with torchvision's own calls. Without a
GPU it decodes on the CPU (the same calls), so it also runs where CI runs."""

from __future__ import annotations

import torch
import torchvision
from torchvision.io import decode_jpeg, read_file
from torchvision.transforms import v2

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1) * 255


class _Bytes(torch.utils.data.Dataset):
    def __init__(self, root: str):
        self.samples = torchvision.datasets.ImageFolder(root).samples  # (path, class) in ImageFolder's order

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        path, label = self.samples[i]
        return read_file(path), label


def _collate(items):
    # one tensor of the batch's bytes and their lengths: a tensor per sample would cross processes as one
    # shared-memory segment each (slow, and it runs out of descriptors)
    return torch.cat([x for x, _ in items]), torch.tensor([len(x) for x, _ in items]), torch.tensor(
        [y for _, y in items])


def loader(root: str, batch_size: int, workers: int, seed: int):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    crop = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])
    mean, std = MEAN.to(device), STD.to(device)
    gen = torch.Generator().manual_seed(seed)
    dl = torch.utils.data.DataLoader(_Bytes(root), batch_size=batch_size, shuffle=True, generator=gen,
                                     num_workers=workers, collate_fn=_collate, persistent_workers=workers > 0)

    def epoch():
        for data, lengths, labels in dl:
            images = decode_jpeg(list(torch.split(data, lengths.tolist())), device=device)
            x = torch.stack([crop(img) for img in images]).float().sub_(mean).div_(std)
            yield x, labels.to(device, non_blocking=True)

    class _Epochs:  # iterated once per epoch: a fresh pass of the loader each time
        def __iter__(self):
            return epoch()

    return _Epochs()
