"""A user's own input pipeline, as `iobench run --pipeline tests/loops/user_factory.py:loader` calls it (the
contract of docs/pipelines.md): an ImageFolder decoded and cut to 128 px, in a DataLoader. `failing` is the same
loader raising in its second epoch's third batch. Run as a script, it is the plain loop (no iobench):
user_factory.py ROOT WORKERS BATCH EPOCHS prints the last epoch's figures (timing.py)."""

import sys

import torch
from torchvision import datasets, transforms


def loader(root, batch_size, workers, seed):
    thumbs = transforms.Compose([transforms.Resize(128), transforms.CenterCrop(128), transforms.PILToTensor()])
    return torch.utils.data.DataLoader(datasets.ImageFolder(root, thumbs), batch_size=batch_size, shuffle=True,
                                       num_workers=workers, generator=torch.Generator().manual_seed(seed))


class Failing:
    def __init__(self, inner):
        self.inner, self.epochs = inner, 0

    def __iter__(self):
        self.epochs += 1
        for i, batch in enumerate(self.inner):
            if self.epochs == 2 and i == 2:
                raise ValueError("sample 77 is corrupt")
            yield batch


def failing(root, batch_size, workers, seed):
    return Failing(loader(root, batch_size, workers, seed))


if __name__ == "__main__":
    from timing import report, timed

    made = loader(sys.argv[1], int(sys.argv[3]), int(sys.argv[2]), 0)
    for _ in range(int(sys.argv[4])):
        figures = timed(made, lambda b: len(b[0]))
    report(figures)
