"""How the plain loops here time an epoch, as iobench times a training run's: samples/s over the batches after the
first (AU's window: the first step is excluded), CPU seconds of the whole process tree (its DataLoader workers,
live and reaped) per sample of the epoch. Each loop prints its last epoch's figures as one JSON line."""

import json
import time

import psutil


def cpu_s() -> float:
    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total


def timed(batches, count) -> dict:
    """Iterate one epoch of `batches`; `count(batch)` its samples."""
    c0, total, after_first, first, end = cpu_s(), 0, 0, None, None
    for batch in batches:
        n = count(batch)
        total += n
        end = time.perf_counter()
        if first is None:
            first = end
        else:
            after_first += n
    return {"samples": total, "samples_per_s": after_first / (end - first),
            "cpu_us_per_sample": 1e6 * (cpu_s() - c0) / total}


def report(figures: dict) -> None:
    print(json.dumps(figures), flush=True)
