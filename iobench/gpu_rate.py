"""Measure a model's training consumption rate on the local GPU: real training steps of a torchvision model
on synthetic data already on the device (a compute ceiling: no data loading), bf16 autocast, channels_last,
as the H200 figures in `iobench gpus` were measured. Needs torch with CUDA and torchvision."""

from __future__ import annotations

import importlib.util
import time

from iobench.errors import UserError


def measure(model: str, batch: int = 256, steps: int = 30, warmup: int = 10, size: int = 224,
            device: str = "cuda") -> float:
    """Training samples/s of `model` (a torchvision.models name) over `steps` steps after `warmup`."""
    for pkg in ("torch", "torchvision"):
        if importlib.util.find_spec(pkg) is None:
            raise UserError(f"gpu-rate needs {pkg}: pip install {pkg} (a CUDA build, on a host with a GPU)")
    import torch
    import torchvision

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("no CUDA GPU here: gpu-rate measures a GPU; use `iobench gpus` for known rates")
    try:
        net = getattr(torchvision.models, model)(weights=None, num_classes=1000)
    except (AttributeError, TypeError) as exc:
        raise UserError(f"unknown torchvision model {model!r}") from exc
    net = net.to(device, memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, size, size, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=device)
    dtype = torch.bfloat16

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.split(":")[0], dtype=dtype):
            out = net(x)
            logits = out.logits if hasattr(out, "logits") else out  # inception_v3 returns a tuple-like
            loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return batch * steps / (time.perf_counter() - t0)
