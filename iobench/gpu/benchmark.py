"""Measure a model's training consumption rate on the local GPU: real training steps of a torchvision model
on synthetic data already on the device (a compute ceiling: no data loading), bf16 autocast, channels_last,
as the H200 figures in `iobench gpus` were measured. Needs torch with CUDA and torchvision."""

from __future__ import annotations

import importlib.util
import time

from iobench.errors import UserError


class TrainStep:
    """One real training step of a torchvision model on a GPU: forward, loss, backward, optimizer step
    (bf16 autocast, channels_last). Inputs are synthetic unless a batch of images is given."""

    def __init__(self, model: str, batch: int, size: int = 224, device: str = "cuda"):
        for pkg in ("torch", "torchvision"):
            if importlib.util.find_spec(pkg) is None:
                raise UserError(f"a GPU step needs {pkg}: pip install {pkg} (a CUDA build, on a host with a GPU)")
        import torch
        import torchvision

        if device.startswith("cuda") and not torch.cuda.is_available():
            raise UserError("no CUDA GPU here: use the sleep consumer (the default) or `iobench gpus` for rates")
        try:
            net = getattr(torchvision.models, model)(weights=None, num_classes=1000)
        except (AttributeError, TypeError) as exc:
            raise UserError(f"unknown torchvision model {model!r}") from exc
        self.torch = torch
        self.device = device
        self.net = net.to(device, memory_format=torch.channels_last).train()
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)
        self.x = torch.randn(batch, 3, size, size, device=device).to(memory_format=torch.channels_last)
        self.y = torch.randint(0, 1000, (batch,), device=device)

    def __call__(self, images=None) -> None:
        """A step on `images` (uint8 N x 3 x H x W, e.g. a decoded batch) or on the synthetic batch."""
        torch = self.torch
        x = self.x
        if images is not None:
            x = images.to(self.device, non_blocking=True).float().div_(255).contiguous(
                memory_format=torch.channels_last)
        y = self.y[: len(x)]
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=self.device.split(":")[0], dtype=torch.bfloat16):
            out = self.net(x)
            logits = out.logits if hasattr(out, "logits") else out  # inception_v3's training output
            loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        self.opt.step()

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()


def measure(model: str, batch: int = 256, steps: int = 30, warmup: int = 10, size: int = 224,
            device: str = "cuda") -> float:
    """Training samples/s of `model` (a torchvision.models name) over `steps` steps after `warmup`."""
    step = TrainStep(model, batch, size, device)
    for _ in range(warmup):
        step()
    step.sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    step.sync()
    return batch * steps / (time.perf_counter() - t0)
