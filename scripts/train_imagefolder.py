"""A real training job on an ImageFolder tree, written as a user writes one (pytorch/examples' ImageNet recipe):
torchvision ImageFolder + RandomResizedCrop(224) + flip + ToTensor + Normalize, a DataLoader with worker processes,
ResNet-50 (or any torchvision model) in bf16 autocast, channels_last, SGD, on a GPU. It is not part of iobench: it
is what iobench's verdict is checked against on a GPU host (docs/gpu-host.md).

It prints one JSON line: images/s over the steps after the first (the first pays for worker start-up and cuDNN's
autotuning, as AU excludes it), and the GPU's busy fraction over the same window: the sum of each step's GPU time
(CUDA events around forward, backward and the optimizer step, read after the run so the job is never synchronised
by the measurement) over the wall time. That is AU as MLPerf Storage defines it, measured on the real GPU.

    python3 scripts/train_imagefolder.py ROOT --workers 15 --batch-size 256 --epochs 1
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torchvision
from torchvision import datasets, transforms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", help="the folder whose subfolders are the classes")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--drop-caches", action="store_true", help="cold: drop the page cache first (root)")
    args = ap.parse_args()

    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    dataset = datasets.ImageFolder(args.root, transforms.Compose([
        transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor(), normalize]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers, pin_memory=args.device.startswith("cuda"))
    device = torch.device(args.device)
    model = getattr(torchvision.models, args.model)(weights=None).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    cuda = device.type == "cuda"
    if args.drop_caches:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")

    events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    cpu_step_s = 0.0  # on a CPU device the step's own time stands for the GPU's
    images = steps = 0
    t_first = t_end = 0.0
    for _ in range(args.epochs):
        for x, y in loader:
            x = x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
            y = y.to(device, non_blocking=True)
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            t0 = time.perf_counter()
            # bf16 on the GPU; a CPU (CI's check of what is counted) emulates it at ~9x the step's time
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=cuda):
                loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            if steps == 1:  # the first step is excluded, as AU excludes it: wait for it, then start the clock
                if cuda:
                    torch.cuda.synchronize()
                t_first = time.perf_counter()
                continue
            if cuda:
                end.record()
                events.append((start, end))
            else:
                cpu_step_s += time.perf_counter() - t0
            images += len(y)
    if cuda:
        torch.cuda.synchronize()
    t_end = time.perf_counter()
    wall = t_end - t_first
    busy_s = sum(s.elapsed_time(e) for s, e in events) / 1000 if cuda else cpu_step_s
    print(json.dumps({"model": args.model, "workers": args.workers, "batch_size": args.batch_size,
                      "images": images, "steps": steps, "wall_s": round(wall, 3),
                      # four significant digits: a slow CPU step (2.4 images/s) rounded to 0.1 would be off by 1.4%
                      "images_per_s": float(f"{images / wall:.4g}") if wall > 0 else None,
                      "gpu_busy": round(busy_s / wall, 4) if wall > 0 else None,
                      "cold": args.drop_caches, "device": str(device),
                      "torch": torch.__version__, "torchvision": torchvision.__version__}))


if __name__ == "__main__":
    main()
