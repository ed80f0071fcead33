"""A plain PyTorch ImageNet input loop, as pytorch/examples' imagenet/main.py builds it (no iobench): ImageFolder,
RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize, the default collate, a shuffled DataLoader.
Usage: plain_torchvision.py ROOT WORKERS BATCH EPOCHS; prints the last epoch's figures (timing.py)."""

import sys

import torch
from timing import report, timed
from torchvision import datasets, transforms

root, workers, batch, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
train = datasets.ImageFolder(root, transforms.Compose([
    transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor(), normalize]))
loader = torch.utils.data.DataLoader(train, batch_size=batch, shuffle=True, num_workers=workers)
for _ in range(epochs):
    figures = timed(loader, lambda b: len(b[0]))
report(figures)
