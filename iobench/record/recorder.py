"""Measurement of one epoch: per-sample timings and bytes (numpy, indexed by position in the epoch),
progress over time, and the host's CPU and disk counters around it."""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable

import numpy as np
import psutil
from hdrh.histogram import HdrHistogram

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
TIMELINE_POINTS = 1000  # at this many points a timeline keeps every other one and ticks half as often: a run of
#                         10 M samples keeps ~1,000 points (~30 KB of JSON), not one per 0.2 s
TICK_S = 0.2  # batches delivered tick the progress at most this often (or per batch, when batches come slower)


class EpochRecorder:
    """Preallocated arrays the engine's workers write into: slot p = the p-th sample of the order."""

    def __init__(self, n: int, workers: int):
        self.total_ns = np.zeros(n, dtype=np.int64)  # open + read to EOF + close
        self.open_ns = np.zeros(n, dtype=np.int64)
        self.nbytes = np.full(n, -1, dtype=np.int64)  # -1: not read (interrupted epoch)
        self.throttled = np.zeros(n, dtype=np.int64)  # answers throttled (and retried) before the sample's (objects)
        self.done = [0] * workers  # one counter per worker: no lock on the hot path
        self.decode_ns: np.ndarray | None = None  # per sample, when the engine decodes (DataLoader --decode)
        self.decode_cpu_ns: np.ndarray | None = None  # the decode's CPU time (its thread's clock), with decode_ns
        self.timeline: list[tuple[float, int]] = []  # (seconds since start, samples done)
        self._ticks = 0
        self._every = 1  # a point every this many ticks (doubles each time the timeline is thinned)
        self._last = 0.0  # the last tick of `delivered`
        self.t_start = 0.0
        self.t_end = 0.0
        self.t_first = 0.0  # when the first batch reached the consumer (0: not recorded): start-up ends there

    def share(self, width: int) -> tuple[np.ndarray, np.ndarray]:
        """For an epoch read in a forked child: the per-sample arrays and `width` per-worker counts moved into
        anonymous shared memory (the child writes them, this process reads them live, `done` included; the arrays
        stay there after). Returns the counts the child's workers write and `width` more slots: their finished
        flags. `unshare` once the child is gone."""
        n = len(self.nbytes)
        mem = mmap.mmap(-1, max(8 * (4 * n + 2 * width), 8))  # anonymous, shared with a child across fork
        shared = np.frombuffer(mem, dtype=np.int64, count=4 * n + 2 * width)
        total, opened, nbytes, throttled = shared[:n], shared[n:2 * n], shared[2 * n:3 * n], shared[3 * n:4 * n]
        done, finished = shared[4 * n:4 * n + width], shared[4 * n + width:]
        total[:], opened[:], nbytes[:], throttled[:] = self.total_ns, self.open_ns, self.nbytes, self.throttled
        done[:len(self.done)] = list(self.done)
        self.total_ns, self.open_ns, self.nbytes, self.throttled = total, opened, nbytes, throttled
        self.done = done  # type: ignore[assignment]  # the workers' live counts, until `unshare`
        return done, finished

    def unshare(self) -> None:
        """The per-worker counts back as plain ints, after a shared epoch (`share`)."""
        self.done = [int(x) for x in self.done]

    def completed(self) -> int:
        """Samples read so far, from the workers' live counts (progress, the timeline, the watchdog): a Python int."""
        return int(sum(self.done))

    def read_mask(self) -> np.ndarray:
        """The positions read (nbytes stays -1 at one not read: an epoch cut short): after the epoch, the one count
        of its samples, that every figure of it (bytes, latencies, a rank's coverage) is taken over."""
        return self.nbytes >= 0

    def samples(self) -> int:
        """Samples the epoch read (`read_mask`)."""
        return int(self.read_mask().sum())

    def seconds(self) -> float:
        """The epoch's wall time, start to stop (never 0: rates divide by it)."""
        return max(self.t_end - self.t_start, 1e-9)

    def first_batch_s(self) -> float | None:
        """From the start to the first batch the consumer got; None where the engine does not record it."""
        return max(self.t_first - self.t_start, 0.0) if self.t_first else None

    def start(self) -> None:
        self.t_start = time.perf_counter()
        self.t_first = 0.0
        self.timeline = [(0.0, 0)]
        self._ticks, self._every, self._last = 0, 1, self.t_start

    def tick(self, on_tick: Callable[[int], None] | None = None) -> int:
        """Progress: the samples done, on the timeline and to `on_tick`."""
        done = self.completed()
        self._ticks += 1
        if self._ticks % self._every == 0:
            self.timeline.append((time.perf_counter() - self.t_start, done))
            if len(self.timeline) >= TIMELINE_POINTS:
                self.timeline = self.timeline[::2]  # evenly spaced still: the first point and every other one
                self._every *= 2
        if on_tick:
            on_tick(done)
        return done

    def delivered(self, on_tick: Callable[[int], None] | None) -> None:
        """A batch reached the consumer: the first ends the start-up (`t_first`); a `tick` at most every TICK_S."""
        now = time.perf_counter()
        if not self.t_first:
            self.t_first = now
        if now - self._last >= TICK_S:
            self._last = now
            self.tick(on_tick)

    def stop(self) -> None:
        self.t_end = time.perf_counter()
        self.timeline.append((self.t_end - self.t_start, self.completed()))


def changed_positions(nbytes: np.ndarray, order: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Positions of an epoch whose read returned other than the bytes the manifest says its sample holds: a file
    truncated, grown or replaced while the run read it. One vectorised compare after the epoch, nothing per sample."""
    return np.flatnonzero((nbytes >= 0) & (nbytes != sizes[order]))


def latency_summary(ns: np.ndarray) -> dict[str, float]:
    """Percentiles, max and mean in milliseconds."""
    if ns.size == 0:
        return _summary([0.0] * len(PERCENTILES), 0.0, 0.0)
    ms = ns / 1e6
    return _summary(np.percentile(ms, list(PERCENTILES.values())).tolist(), ms.max(), ms.mean())


def _summary(values: list[float], top: float, mean: float) -> dict[str, float]:
    """A latency summary as a result holds it: the percentiles, max and mean, each in ms to 4 decimals."""
    return {k: round(float(v), 4) for k, v in zip((*PERCENTILES, "max", "mean"), (*values, top, mean), strict=True)}


HIST_MAX_NS = 3_600_000_000_000  # an hour: a latency histogram holds any read that finishes
HIST_DIGITS = 3  # significant digits: HdrHistogram's buckets are within 0.1% of the value


def latency_histogram(ns: np.ndarray) -> HdrHistogram:
    """Latencies (ns) as a histogram that adds up across processes and hosts (HdrHistogram: encode, decode, add),
    so that a job's percentiles are those of all its samples, not an average of each rank's. Values are first
    rounded to HIST_DIGITS significant digits in numpy (the histogram's own resolution), so recording takes one
    call per distinct value (thousands), not one per sample."""
    hist = HdrHistogram(1, HIST_MAX_NS, HIST_DIGITS)
    v = np.clip(ns[ns > 0], 1, HIST_MAX_NS).astype(np.float64)
    if v.size:
        scale = 10.0 ** np.maximum(np.floor(np.log10(v)) - (HIST_DIGITS - 1), 0)
        values, counts = np.unique((np.round(v / scale) * scale).astype(np.int64), return_counts=True)
        for value, count in zip(values.tolist(), counts.tolist(), strict=True):
            hist.record_value(min(value, HIST_MAX_NS), count)
    return hist


def histogram_summary(hist: HdrHistogram) -> dict[str, float]:
    """As latency_summary (ms), from a histogram: percentiles, max and mean (an empty one's are all 0)."""
    return _summary([hist.get_value_at_percentile(p) / 1e6 for p in PERCENTILES.values()],
                    hist.get_max_value() / 1e6, hist.get_mean_value() / 1e6)


class Counters:
    """Host counters around a run: CPU (all cores, and this process) and the mount's block device."""

    def __init__(self, device: str | None):
        self.device = device
        psutil.cpu_times_percent(interval=None)  # sets psutil's baseline: the next call covers the run
        self.proc = _own_cpu()
        self.disk = _disk(device)
        self.t = time.perf_counter()

    def result(self) -> dict:
        """CPU and disk figures since this object was made."""
        wall = time.perf_counter() - self.t
        cpu = psutil.cpu_times_percent(interval=None)
        own = max(_own_cpu() - self.proc, 0.0)
        iowait = getattr(cpu, "iowait", 0.0)
        disk = _disk(self.device)
        return {
            "cpu": {
                "system_busy_pct": round(100.0 - cpu.idle - iowait, 1),
                "iowait_pct": round(iowait, 1),
                "iobench_cores": round(own / wall, 2) if wall > 0 else None,
                "iobench_cpu_s": round(own, 4),
            },
            "disk": None if disk is None or self.disk is None else {
                "device": self.device,
                "read_bytes": disk.read_bytes - self.disk.read_bytes,
                "read_ios": disk.read_count - self.disk.read_count,
            },
        }


def _own_cpu() -> float:
    """CPU seconds of iobench: this process, its live children (DataLoader workers) and the reaped ones."""
    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.Error:  # gone between the listing and the read
            pass
    return total


def _disk(device: str | None):
    if device is None:
        return None
    return (psutil.disk_io_counters(perdisk=True) or {}).get(device)
