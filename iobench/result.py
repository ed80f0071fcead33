"""The result file: the contract between `run` and everything that reads its output.

Versioned JSON, written atomically after every run, so an interrupted `iobench run` keeps what it
measured. Every field carries its description; `docs/results.md` is generated from them
(`python -m iobench.result > docs/results.md`), and a test keeps the two in step.
Its ~500 lines are the field descriptions: the contract is one file, as its documentation is.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    computed_field,
    model_validator,
)

SCHEMA = "iobench.result/1"
READS = (SCHEMA,)  # the schema versions this iobench reads back


# ---- what a result read back must hold -----------------------------------------------------------------------
# `Result.load` (report, compare, plan) validates in the context LOADING: every number finite, every figure in its
# range, a schema version of READS. A run's own figures are not checked as it builds them (a psutil share rounded
# to -0.1 must not stop a measurement); the tests load back what runs write.

LOADING = "iobench.result: read back"
MOST = 2**63 - 1  # no counter a result holds (bytes, files, GPUs) goes past a signed 64-bit integer
LARGEST = 1e15  # no figure iobench measures reaches 10^15 of its unit (samples/s, MB/s, s, ms, B, x)
PCT_SLACK = 0.5  # psutil rounds each CPU share to 0.1 and a busy share is 100 minus two of them: -0.1 happens


def _shown(v: float) -> str:
    if isinstance(v, int) and abs(v) >= 10**15:
        return f"a {len(str(abs(v)))}-digit number"
    return repr(v)


def _rule(what: str, ok: Callable[[Any], bool], schema: dict[str, Any]) -> Any:
    """An annotation's check (with its JSON Schema bounds): `what` is the rule as the error says it."""
    def check(v: Any, info: ValidationInfo) -> Any:
        if info.context == LOADING and not ok(v):
            raise ValueError(f"is {_shown(v)}: {what}")
        return v
    return (AfterValidator(check), Field(json_schema_extra=schema))


def _at_least(least: int) -> Any:
    return _rule(f"a count, {least} to 2^63 - 1", lambda v: least <= v <= MOST, {"minimum": least, "maximum": MOST})


def _floats(kind: str, least: float, most: float = LARGEST, *, above: bool = False, why: str = "") -> Any:
    """A figure read back finite, over (or from, `above` False) `least`, at most `most`."""
    low = (lambda v: v > least) if above else (lambda v: v >= least)
    bound = {"exclusiveMinimum" if above else "minimum": least, "maximum": most}
    what = f"{kind} is within {'(' if above else '['}{least:g}, {most:g}]{why}"
    return _rule(what, lambda v: math.isfinite(v) and low(v) and v <= most, bound)


Count = Annotated[int, *_at_least(0)]  # samples, bytes, files, readers, epochs, GPUs fed
Positive = Annotated[int, *_at_least(1)]  # what others divide by or count from one: nodes, ranks, batch size
Rate = Annotated[float, *_floats("a rate", 0.0)]  # samples/s, MB/s, files/s, stat()s/s
Seconds = Annotated[float, *_floats("a time", 0.0)]  # seconds, and latencies in ms
Ratio = Annotated[float, *_floats("a ratio or size", 0.0)]  # speedup, efficiency, spread, mean bytes
PerGpu = Annotated[float, *_floats("a GPU's rate", 0.0, above=True)]  # samples/s one GPU consumes
Usable = Annotated[float, *_floats("a usable core count", 0.0, above=True)]  # affinity and cgroup quota
Used = Annotated[float, *_floats("a core count used", 0.0)]
Fraction = Annotated[float, *_floats("a fraction", 0.0, 1.0)]  # AU (the consumer caps it at 1), resident share
Target = Annotated[float, *_floats("an AU target", 0.0, 1.0, above=True)]
Percent = Annotated[float, *_floats("a percentage", -PCT_SLACK, 100.0 + PCT_SLACK,
                                    why=f" (0 to 100, +-{PCT_SLACK} of rounding)")]


def _not_finite(data: object, at: str = "") -> str | None:
    """The path of the first NaN or infinity anywhere in `data` (JSON has neither, Python's json and pydantic take
    them), None when there is none."""
    if isinstance(data, float):
        return None if math.isfinite(data) else at
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list | tuple) else ()
    for k, v in items:
        if (found := _not_finite(v, f"{at}.{k}" if at else str(k))) is not None:
            return found
    return None


def unusable(exc: ValidationError) -> str:
    """Why a file is not a usable result, in one line: the first problem's field path and what is wrong there."""
    first = exc.errors()[0]
    where = ".".join(str(k) for k in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    text = f"{where} {msg}" if first["type"] == "value_error" and where else f"{where}: {msg}" if where else msg
    more = exc.error_count() - 1
    return text + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")


class _Model(BaseModel):
    # a non-finite figure is written as null (JSON has no NaN): never a literal other JSON readers refuse
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="null")

    @model_validator(mode="before")
    @classmethod
    def _derived_again(cls, data: object) -> object:
        """A result file carries the computed fields (they are serialised); loading derives them again rather than
        refusing them as extra (a stored copy could go stale: model_copy(update=...) skips validators)."""
        if isinstance(data, dict) and cls.model_computed_fields:
            data = {k: v for k, v in data.items() if k not in cls.model_computed_fields}
        return data


class Latency(_Model):
    p50: Seconds = Field(description="median, ms")
    p90: Seconds = Field(description="90th percentile, ms")
    p99: Seconds = Field(description="99th percentile, ms")
    p999: Seconds = Field(description="99.9th percentile, ms")
    max: Seconds = Field(description="slowest sample, ms")
    mean: Seconds = Field(description="mean, ms")


class Cpu(_Model):
    system_busy_pct: Percent | None = Field(description="all cores, % busy (not idle, not iowait) during the run")
    iowait_pct: Percent | None = Field(description="all cores, % of time idle waiting for IO")
    iobench_cores: Used | None = Field(
        description="CPU seconds iobench used per wall second (its DataLoader workers included); near the core "
                    "count means the client CPU, not the storage, set the pace")


class Disk(_Model):
    device: str = Field(description="block device behind the mount, as in /proc/diskstats")
    read_bytes: Count = Field(description="bytes the device read during the run (includes readahead)")
    read_ios: Count = Field(description="read requests the device completed during the run")


class Run(_Model):
    source: str = Field(description='where samples came from: "files" (one file per sample), "lmdb" (an LMDB '
                                    'of the files), "tar" (WebDataset-style tar shards)')
    order: Literal["sequential", "shuffled", "shard-stream"] = Field(
        description='"sequential": manifest order; "shuffled": a fresh seeded permutation each epoch; '
                    '"shard-stream": tar shards in a fresh shuffle, each read start to end (WebDataset\'s IO; its '
                    "shuffle buffer reorders in memory and is weaker than a full permutation)")
    mitigation: str | None = Field(None, description='the mitigation this run measures ("baseline", "lmdb", '
                                                     '"lmdb-noreadahead", "tar", "tar-stream", "fadvise-random", '
                                                     '"fadvise-willneed", "read_ahead_kb=1024", "readers=16"); '
                                                     "null outside the mitigation phase")
    engine: Literal["threads", "dataloader"] = Field(
        description='"threads": a thread pool that prefetches ahead; "dataloader": a torch DataLoader whose worker '
                    "processes read whole batches and hand each over as one shared-memory tensor")
    concurrency: Count = Field(description="readers at once: threads, or DataLoader workers (1 for workers=0)")
    workers: Count | None = Field(None, description="DataLoader worker processes (0: the main process reads); "
                                                    "null for the thread engine")
    batch_size: Positive | None = Field(None, description="DataLoader batch size; null for the thread engine")
    decode: bool = Field(False, description="per sample, Pillow decode + RandomResizedCrop(224) + flip after the "
                                            "read, timed apart (decode_ms); samples/s then includes that CPU work")
    cache: Literal["cold", "warm"] = Field(
        description='"cold": page cache evicted before the epoch; "warm": read again without eviction')
    epoch: Count = Field(description="epoch number within this result (seeds the shuffle with `settings.seed`)")
    repeat: Count = Field(0, description="which repeat of the measured phases this run belongs to (--repeat N: 0 to "
                                         "N-1); the figures are the mean over repeats, see `stats`")
    complete: bool = Field(description="false when the epoch was interrupted: figures cover the samples read")
    eviction: str | None = Field(
        description='how the cache was emptied for a cold run: "drop_caches" (root) or "fadvise_dontneed"')
    resident_before: Fraction | None = Field(
        description="fraction of the dataset's pages in the page cache when the epoch started (mincore on "
                    "a sample of files); null where it cannot be told")
    measures: Literal["storage", "page-cache", "mixed", "unknown", "decode"] = Field(
        description='what the figures stand for: "decode" (with `decode`: decode and augmentation took over half '
                    "of each reader's time per sample, so the client's CPU, not the storage or the cache, set the "
                    'pace; a cold one still gives the storage a lower bound), else from `resident_before`: '
                    '"storage" (< 5% cached), "page-cache" (> 90% cached: RAM, not storage), "mixed", or "unknown"')
    samples: Count = Field(description="samples read")
    bytes: Count = Field(description="bytes actually returned by read() calls, counted, not assumed")
    seconds: Seconds = Field(description="wall time of the epoch, first open to last close")
    first_batch_s: Seconds | None = Field(
        None, description="DataLoader: seconds from the epoch's start to its first batch in the main process (the "
                          "workers' start-up and first reads: the part of an epoch that does not grow with its size); "
                          "null for the thread engine, whose readers start at once")
    samples_per_s: Rate = Field(description="samples / seconds (files/s for the files source); a training run's one "
                                            "throughput is what its GPUs consumed over AU's window instead (first "
                                            "step excluded, summed over the GPUs: `delivered_per_s`)")
    mb_per_s: Rate = Field(description="bytes / seconds / 10^6 (1 MB = 1,000,000 B); a training run: its samples/s "
                                       "at its mean sample size")
    latency_ms: Latency = Field(
        description="per sample, open + read to EOF + close. Includes waiting for the Python interpreter "
                    "lock on a busy client: compare p50 with fio's when the tail matters")
    open_ms: Latency = Field(description="per sample, the open() alone (path lookup, permission, metadata)")
    decode_ms: Latency | None = Field(None, description="per sample, decode and augmentation; null without decode")
    cpu: Cpu = Field(description="CPU use during the epoch (psutil)")
    disk: Disk | None = Field(description="block-device counters during the epoch; null for network/FUSE mounts")
    gpus: Positive | None = Field(None, description="emulated GPUs in a training run (each its own DataLoader over its "
                                                    "shard of the epoch); null for a read-only replay run")
    consumer_rate: PerGpu | None = Field(None, description="samples/s each emulated GPU consumes (its compute time "
                                                           "per batch is batch / this rate)")
    au: Fraction | None = Field(None, description="accelerator utilisation: compute time / wall time, first step "
                                                  "excluded (MLPerf Storage), mean over the GPUs")
    au_min: Fraction | None = Field(None, description="the lowest GPU's AU in this run")
    epochs: Positive = Field(1, description="training runs: the epochs this run made (--epochs N); with several, "
                                            "samples/s, MB/s and AU are the means over epochs 2..N (the steady "
                                            "state), au_min the lowest there, the rest from its last epoch; 1 "
                                            "for every other run (each replay epoch is its own run)")
    delivered_per_s: Rate | None = Field(
        None, description="training runs: samples/s the input pipelines delivered to the GPUs over AU's window "
                          "(first step excluded), summed over the GPUs; the same figure as `samples_per_s` (the "
                          "run's one throughput), kept under this name for readers of earlier results")
    ranks: Positive | None = Field(
        None, description="ranks (GPUs) of a distributed run that read this epoch together, one per process on one or "
                          "more nodes (see `distributed` and `ranks`); null for a run on this client alone")
    slowest_rank: Count | None = Field(
        None, description="distributed: the rank whose own pace (samples / (seconds - its allreduce wait)) was the "
                          "lowest: the one the others waited for at the per-step allreduce")
    straggler_spread: Fraction | None = Field(
        None, description="distributed: (fastest - slowest own pace) / fastest, over the ranks; 0 when all kept "
                          "the same pace")
    read_once: bool | None = Field(
        None, description="distributed: every sample of the dataset was read exactly once across the ranks this "
                          "epoch (checked from each rank's count, index sum and index hash sum); null elsewhere")
    efficiency: Ratio | None = Field(
        None, description="samples_per_s over fio's files/s at the same concurrency and cache state "
                          "(`baseline.fio`); null without fio. Above 1 means fio's per-file overhead, not "
                          "iobench, set the pace (see docs/performance.md)")
    timeline: list[tuple[Seconds, Count]] = Field(
        description="[seconds since start, samples done] every ~0.2 s, and at the end: samples/s over time. A long "
                    "run keeps under 1,000 points (every 0.4, 0.8, ... s)")
    valid: bool = Field(True, description="the run can mean something and may enter the verdict (the rules are in "
                                          "iobench/answer/rules.py: enough batches per reader, long enough, a cold run "
                                          "whose eviction took); invalid runs are shown, marked, and left out")
    invalid_reason: str | None = Field(None, description="why the run is not valid, with its figures; null when valid")

    # prop-decorator: mypy does not follow a decorator over @property; pydantic documents this ignore
    @computed_field(description='what the run measures: "mitigation" (the mitigation phase: `mitigation` is set), '  # type: ignore[prop-decorator]
                                '"training" (emulated GPUs: `gpus` is set), or "replay" (the loader alone)')
    @property
    def kind(self) -> Literal["replay", "training", "mitigation"]:
        # Derived, not stored: model_copy(update=...) would leave a stored kind stale.
        if self.mitigation is not None:
            return "mitigation"
        return "training" if self.gpus is not None else "replay"

    @computed_field(description='what `concurrency` counts: "threads" (the thread engine\'s readers) or "workers" '  # type: ignore[prop-decorator]
                                "(DataLoader worker processes: `workers`; 0 is the main process reading)")
    @property
    def reader(self) -> Literal["threads", "workers"]:
        return "threads" if self.engine == "threads" else "workers"


class Metadata(_Model):
    cache: Literal["cold", "warm"] = Field(description='"cold": caches (with root: dentries and inodes too) dropped '
                                                        "before each part; \"warm\": right after")
    eviction: str | None = Field(description="how caches were dropped for a cold pass (fadvise cannot drop metadata)")
    dirs: Count = Field(description="folders listed")
    files: Count = Field(description="regular files seen by the listing: every file is counted")
    list_s: Seconds = Field(description="seconds to list the tree as torchvision's ImageFolder does (scandir per "
                                        "folder)")
    stat_files: Count = Field(description="files stat()ed (a random sample of at most 20,000)")
    stat_per_s: Rate = Field(description="stat() calls per second, one thread")
    stat_ms: Latency = Field(description="per stat() call")
    open_close_files: Count = Field(description="files opened and closed without reading (same sample)")
    open_close_per_s: Rate = Field(description="open()+close() pairs per second, one thread")
    open_close_ms: Latency = Field(description="per open()+close() pair")
    scale_files: Count = Field(description="dataset size the projection is for (--scale-files; ImageNet: 1,281,167)")
    projected_list_s: Seconds = Field(
        description="prediction, not a measurement: list_s scaled linearly to scale_files, the start-up cost "
                    "before the first batch")


class FioBaseline(_Model):
    concurrency: Count = Field(description="fio jobs (numjobs), each reading its share of the files")
    cache: Literal["cold", "warm"] = Field(description="cache state, prepared as for the loader runs")
    files: Count = Field(description="files fio read, loops included (a random sample of the dataset of at most "
                                     "20,000, read once per loop)")
    bytes: Count = Field(description="bytes fio read (its io_bytes)")
    seconds: Seconds = Field(description="fio's runtime for the reads (includes open and close, 1 ms resolution)")
    files_per_s: Rate = Field(description="files / seconds")
    mb_per_s: Rate = Field(description="bytes / seconds / 10^6")
    latency_ms: Latency = Field(description="fio's completion latency of each whole-file pread() (not open/close)")
    setup_s: Seconds = Field(description="fio's time outside the timed reads (parsing its logs, stat of every file)")
    job: str = Field(description="the fio job file (each job replays an iolog: open, one read of the file, close)")
    cpu: Cpu | None = Field(None, description="CPU use while fio ran, its set-up and every repeat included "
                                              "(iobench_cores counts fio's processes): near the usable cores, fio's "
                                              "figure is a lower bound of the storage's")
    repeats: Count = Field(1, description="fio runs at this point (cold: each from an evicted cache); the fastest kept")
    runs_files_per_s: list[Rate] = Field(default_factory=list, description="files/s of every repeat")
    at_best: bool = Field(True, description="false when `caveats` says the kept run may be below fio's best")
    caveats: list[str] = Field(default_factory=list,
                               description="why the figure may be below fio's best (another process dropped the "
                                           "caches while it ran; timed reads too short)")
    valid: bool = Field(True, description="the point counts: it read files for at least 0.5 s (verdict.MIN_SECONDS); "
                                          "false points are shown marked and never give the storage figure")
    invalid_reason: str | None = Field(None, description="why the point does not count")
    json_file: str | None = Field(None, description="fio's own JSON output (--output-format=json, as fio printed "
                                                    "it) of the run kept, for fio-plot and other fio tooling: its "
                                                    "path relative to the result's folder (fio/fio-<jobs>jobs-"
                                                    "<cache>.json). Beside it: the job file (.fio) and, only when "
                                                    "they total <= 1 MiB, the iologs it replays (.<j>.iolog: the "
                                                    "file paths and read order), else not kept (they grow with "
                                                    "files and loops). Null: not kept")


class Mitigation(_Model):
    name: str = Field(description="what changed against the baseline (see runs[].mitigation)")
    source: str = Field(description="files, lmdb or tar")
    samples_per_s: Rate = Field(description="cold samples/s with the mitigation, same pattern and readers")
    speedup: Ratio = Field(description="samples_per_s over the baseline's (same run, same cache state)")
    extra_bytes: Count = Field(description="extra space it takes on the storage (a pack beside the dataset), bytes")
    pack_s: Seconds | None = Field(description="time making the pack took (once), seconds")
    gpus_fed: Count | None = Field(description="predicted GPUs fed at this rate (rate / (AU target x per-GPU rate))")
    note: str | None = Field(None, description="what a reader should know (e.g. a weaker shuffle)")
    valid: bool = Field(True, description="its run (runs[] with this mitigation) counts: false rows are shown marked "
                                          "and never named as the best mitigation")
    invalid_reason: str | None = Field(None, description="why its run does not count (runs[].invalid_reason)")


class Baseline(_Model):
    fio_version: str | None = Field(description="fio's version; null when fio is not installed")
    fio: list[FioBaseline] = Field(default_factory=list, description="raw fio baseline, per concurrency and cache")
    note: str | None = Field(None, description="why the baseline is missing or partial")


class Mount(_Model):
    path: str = Field(description="mount point that holds the dataset (longest match in /proc/mounts)")
    source: str = Field(description="what is mounted: device, server:/export, or FUSE source")
    fstype: str = Field(description="file system type as in /proc/mounts (ext4, xfs, nfs4, fuse.sshfs, ...)")
    options: str = Field(description="mount options as in /proc/mounts")
    family: Literal["local", "nfs", "lustre", "fuse", "network"] = Field(
        description="kind of file system: local block device, NFS (nfs, nfs4), Lustre, FUSE (sshfs, GlusterFS, "
                    "...), or another network file system")
    device: str | None = Field(description="block device (vda, loop0, nvme0n1, dm-0); null for network/FUSE")
    read_ahead_kb: Count | None = Field(description="readahead of the backing device info (/sys/class/bdi)")
    bdi: str = Field(description="major:minor of the file system's backing device info")
    details: dict[str, str | int | None] = Field(
        description="settings that matter for small-file reads, by family. NFS: server, vers, proto, rsize, "
                    "wsize, nconnect, timeo, retrans, hard/soft, actimeo/ac/noac and acregmin..acdirmax, "
                    "lookupcache; Lustre: stripe_count, stripe_size (lfs getstripe), max_read_ahead_mb, "
                    "max_read_ahead_per_file_mb, statahead_max (lctl get_param); FUSE: subtype, max_read")
    unread: list[str] = Field(description="settings that could not be read, each with why (never guessed)")


class Dataset(_Model):
    path: str = Field(description="dataset root folder")
    files: Count = Field(description="number of samples")
    bytes: Count = Field(description="sum of file sizes")
    mean_bytes: Ratio = Field(description="mean file size")
    median_bytes: Ratio = Field(description="median file size")
    made_by_iobench: bool = Field(description="true when `iobench gen` made it; false for a scanned --dataset")
    params: dict | None = Field(description="gen parameters (files, size_dist, classes, seed) when made by iobench")
    fits_in_ram: bool = Field(
        description="dataset bytes < host RAM: the page cache can hold it, warm runs then measure RAM")


class Host(_Model):
    hostname: str = Field(description="client host name")
    kernel: str = Field(description="kernel release")
    cpus: Positive | None = Field(description="logical CPUs of the host")
    cpus_usable: Usable | None = Field(
        None, description="cores iobench may use: its CPU affinity (taskset, cpuset) capped by its cgroup's CPU "
                          "quota, as in a container; the verdict's client-CPU test compares with this, not `cpus`")
    ram_bytes: Count = Field(description="total RAM")
    ram_available_bytes: Count = Field(description="RAM available when the run started")
    python: str = Field(description="Python version")
    iobench: str = Field(description="iobench version")
    root: bool = Field(description="ran as root (can drop caches)")


class Settings(_Model):
    sources: list[Literal["files", "lmdb", "tar"]] = Field(
        ["files"], description="sources the sweep ran on (--source): the same pattern on each, packed beside "
                               "the dataset when needed")
    orders: list[str] = Field(description="orders replayed")
    concurrency: list[Count] = Field(description="reader counts swept: threads (thread engine) or DataLoader workers "
                                                 "(0: the main process reads), as `reader` says")
    engine: Literal["threads", "dataloader"] = Field("threads", description="replay engine")
    batch_size: Positive = Field(256, description="DataLoader batch size")
    prefetch_factor: Positive = Field(2, description="DataLoader batches each worker keeps ready")
    decode: bool = Field(False, description="decode and augment each sample after reading it (CPU work)")
    cache: list[str] = Field(description='cache states measured ("cold", "warm")')
    epochs: Count = Field(description="epochs per (order, concurrency, cache state)")
    seed: Count = Field(description="seed of the shuffles")
    replay: bool = Field(True, description="loader epochs replayed (false for `iobench fio` alone)")
    metadata: bool = Field(True, description="metadata phase run")
    fio: bool = Field(True, description="fio baseline asked for (it runs when fio is installed)")
    scale_files: Count = Field(1_281_167, description="dataset size for projections (ImageNet-1k train: 1,281,167)")
    mitigations: bool = Field(False, description="mitigation phase run (--mitigations)")
    workload: str | None = Field(None, description="named workload (or file) the settings came from")
    model: str | None = Field(None, description="model the emulated GPUs train")
    gpu: str | None = Field(None, description="kind of GPU emulated")
    rate_per_gpu: PerGpu | None = Field(None, description="training samples/s one GPU consumes")
    rate_source: str | None = Field(None, description="where rate_per_gpu comes from (table row or --rate)")
    rate_kind: str | None = Field(None, description='kind of rate_per_gpu: "measured", "published", '
                                                    '"mlperf-storage", or "given" (--rate)')
    au_target: Target = Field(0.90, description="AU a GPU must reach to count as fed (MLPerf Storage: 0.90 for "
                                                "ResNet-50 and UNet3D, 0.85 for RetinaNet, 0.70 for CosmoFlow)")
    gpus: Positive | None = Field(None, description="GPUs the user asked about (--gpus); null: find how many are fed")
    repeat: Positive = Field(1, description="times the replay sweep was measured (--repeat); each figure is the mean "
                                            "over them, with its spread in `stats`")
    consumer: Literal["sleep", "cuda"] = Field(
        "sleep", description='"sleep": each step sleeps batch / rate_per_gpu (MLPerf Storage\'s emulation); "cuda": '
                             "a real training step of the model on a local GPU per batch (one GPU per emulated GPU)")
    io_timeout_s: Seconds = Field(60.0, description="seconds without a finished read after which the storage counts as "
                                                    "stalled (--io-timeout): the run ends there, its epoch kept with "
                                                    "complete false, exit code 3")

    @computed_field(description='what `concurrency` counts: "threads" or "workers" (DataLoader worker processes)')  # type: ignore[prop-decorator]
    @property
    def reader(self) -> Literal["threads", "workers"]:
        return "threads" if self.engine == "threads" else "workers"

    def fio_jobs(self, most: int) -> list[int]:
        """fio's job counts for the sweep's reader counts up to `most`: workers=0 (the main process reads) reads
        like one job."""
        return sorted({max(c, 1) for c in self.concurrency if c <= most})


class RunStats(_Model):
    source: str = Field(description="source of the runs summarised (as runs[].source)")
    order: str = Field(description="order (as runs[].order)")
    engine: str = Field(description="engine (as runs[].engine)")
    readers: Count = Field(description="threads or DataLoader workers (as runs[].concurrency)")
    cache: str = Field(description="cold or warm")
    repeats: Count = Field(description="repeats with a valid figure for this configuration")
    epochs: Count = Field(description="valid epochs in all (with several per repeat, the first of each is left out "
                                      "of the steady-state figure)")
    mean_samples_per_s: Rate = Field(description="steady-state samples/s: per repeat the mean of the epochs after "
                                                 "the first (or the only one), then the mean over repeats")
    std_samples_per_s: Rate | None = Field(description="standard deviation over repeats (n-1); null for one")
    spread: Ratio | None = Field(description="(max - min) / mean over repeats; null for one")
    unstable: bool = Field(description="spread over 5% (MLPerf Storage's rule): the figure does not repeat")


class Distributed(_Model):
    world_size: Positive = Field(description="ranks in the job: one process per GPU, on all nodes")
    nodes: Positive = Field(description="hosts the ranks ran on (by host name)")
    ranks_per_node: dict[str, Positive] = Field(description="host name -> ranks on it")
    backend: str = Field(description='torch.distributed backend of the per-step collective ("gloo")')
    rendezvous: str = Field(description="MASTER_ADDR:MASTER_PORT: the store and address every rank met at")
    launcher: str = Field(description='"torchrun" or "iobench --ranks" (P local ranks through torchrun\'s launcher)')
    timeout_s: Seconds = Field(description="--timeout: a rank that stops answering ends the run after this long")
    workers: Count = Field(description="DataLoader workers per rank")
    mounts: dict[str, str] = Field(description="host name -> its mount of the dataset: fstype, source and options "
                                               "as in /proc/mounts; a warning names any host whose mount differs "
                                               "from rank 0's")
    shared_page_cache: bool = Field(description="some ranks share a host and so its page cache: one reading a "
                                                "sample may serve another from RAM within an epoch")


class RankEpoch(_Model):
    epoch: Count = Field(description="epoch number (as runs[].epoch)")
    cache: Literal["cold", "warm"] = Field(description="cache state of the epoch")
    complete: bool = Field(description="the rank read its whole share")
    samples: Count = Field(description="samples this rank read")
    bytes: Count = Field(description="bytes read() returned to this rank")
    seconds: Seconds = Field(description="wall time of this rank's epoch")
    samples_per_s: Rate = Field(description="samples / seconds")
    au: Fraction | None = Field(description="this rank's GPU's AU (compute / wall, first step excluded)")
    data_wait_s: Seconds = Field(description="seconds the training loop waited for its next batch")
    allreduce_s: Seconds = Field(description="seconds in the per-step allreduce: waiting for the slower ranks")
    steps: Count = Field(description="batches this rank consumed")
    latency_ms: Latency = Field(description="per sample open + read + close, from this rank's histogram")
    cpu: Cpu = Field(description="CPU during this rank's epoch (this process and its workers; the host's busy %)")
    resident_before: Fraction | None = Field(description="fraction of sampled pages cached on this host at the start")
    shard_digest: str = Field(description="CRC32 of the sorted indices this rank read: changes every epoch as the "
                                          "global reshuffle deals a new share")


class RankRecord(_Model):
    rank: Count = Field(description="global rank")
    local_rank: Count = Field(description="rank on its host")
    host: str = Field(description="host name")
    pid: Count = Field(description="process id on that host")
    cpus_usable: Usable = Field(description="cores this rank's process may use (affinity, cgroup quota)")
    epochs: list[RankEpoch] = Field(default_factory=list, description="this rank's figures per epoch")


class Verdict(_Model):
    text: str = Field(description="the answer in lines: `answer` first, then `evidence`, then notes, one line each")
    answer: str = Field("", description="the first line of `text`, under ~200 characters: the storage's answer (GPUs "
                                        "its capacity feeds from one client like this one), then this client's (GPUs "
                                        'its pipeline fed, and its limit); with --gpus N it starts "Yes:", "No:" or '
                                        '"Borderline:" for those N')
    limit: Literal["storage", "client-cpu", "input-pipeline", "gpu", "slowest-rank"] | None = Field(
        None, description='what stops more GPUs from being fed: "storage" (the loaders reach the storage figure and '
                          'more readers give no more), "client-cpu" (iobench used nearly all the cores it may use), '
                          '"input-pipeline" (the storage gave more than the pipeline delivered, CPU not saturated, '
                          'or the rate was still rising with more readers), "gpu" (the GPUs asked about are fed), '
                          '"slowest-rank" (distributed: one rank\'s own pace was 25% or more under the fastest\'s, and '
                          'every step waited for it); null without a valid run')
    evidence: list[str] = Field(default_factory=list,
                                description="sentences, each with the measured figures it rests on: storage, "
                                            "pipeline, demand, CPU, and why the limit is what it is")
    storage_samples_per_s: Rate | None = Field(
        None, description="storage capacity: the most the storage gave this client cold, the best of fio and every "
                          "valid loader run at its best concurrency; null without a valid cold measurement")
    storage_is_lower_bound: bool = Field(
        False, description="the client's CPU was saturated while that figure was measured: the storage may give more")
    storage_spread: Ratio | None = Field(
        None, description="how far the storage figure moves between identical runs, as a fraction of it: over "
                          "--repeat runs, the epochs of its configuration or fio's runs (storage_spread_measured), "
                          "else 0.05 assumed (what MLPerf Storage allows)")
    storage_spread_measured: bool = Field(False, description="storage_spread was measured, not assumed")
    storage_gpus_fed: Count | None = Field(
        None, description="the storage's answer: GPUs of this kind its capacity feeds at au_target from one client "
                          "like this one, floor(storage_samples_per_s / (au_target x rate_per_gpu)) (the low end when "
                          "borderline); at least this many when storage_is_lower_bound; null without a storage "
                          "figure")
    storage_gpus_range: list[Count] | None = Field(
        None, description="[low, high] when the storage figure is within storage_spread of a GPU boundary "
                          "(borderline); null otherwise")
    client_gpus_fed: Count | None = Field(
        None, description="this client's answer: GPUs its input pipeline fed at au_target, from training runs where "
                          "they measured it (gpus_fed_confirmed), else floor(min(storage, pipeline) / (au_target x "
                          "rate_per_gpu)) (the low end when borderline); null without a valid run")
    client_gpus_range: list[Count] | None = Field(
        None, description="[low, high] when an AU or the pipeline's rate is within its run-to-run spread of the "
                          "line (borderline); null otherwise")
    borderline: bool = Field(False, description="a count or the answer for gpus_asked is within a figure's "
                                                "run-to-run spread of its line: the ranges say how far it could go")
    limit_or: Literal["storage", "client-cpu", "input-pipeline"] | None = Field(
        None, description="another limit the evidence does not separate from `limit` beyond the run-to-run spread; "
                          "null when `limit` stands alone")
    storage_from: str | None = Field(None, description='what measured the storage figure ("fio, 4 jobs", '
                                                       '"dataloader, 4 workers", ...)')
    pipeline_samples_per_s: Rate | None = Field(
        None, description="pipeline capacity: samples/s the training-shaped input pipeline (the workload's engine, "
                          "batch and decode) delivered on this client, from valid training runs where one starved, "
                          "else the best valid replay run of that shape")
    pipeline_from: str | None = Field(None, description="which run(s) the pipeline figure comes from")
    cpu_saturated: bool = Field(
        False, description="during the run that set the pipeline figure iobench used >= 85% of `host.cpus_usable`")
    demand_samples_per_s: Rate | None = Field(
        None, description="demand of the GPUs asked about: gpus_asked x rate_per_gpu x au_target; null without "
                          "--gpus")
    model: str | None = Field(None, description="model of the emulated GPUs")
    gpu: str | None = Field(None, description="kind of GPU")
    rate_per_gpu: PerGpu | None = Field(None, description="samples/s one GPU consumes")
    rate_kind: str | None = Field(None, description='kind of that rate: "measured", "published", "mlperf-storage" '
                                                    'or "given"')
    au_target: Target | None = Field(None, description="AU a GPU must reach to count as fed")
    gpus_fed: Count | None = Field(
        None, description="the same as client_gpus_fed (kept for scripts written before it)")
    gpus_fed_confirmed: bool = Field(
        False, description="true when a valid training run with client_gpus_fed GPUs reached the AU target and one "
                           "with one more did not; false when client_gpus_fed is predicted from the measured rates")
    gpus_asked: Positive | None = Field(None, description="GPUs the user asked about (--gpus); null when not asked")
    asked_fed: bool | None = Field(
        None, description="are the GPUs asked about fed? The storage's answer where a cold run measured the storage "
                          "(its figure, within its spread, covers their demand; a training run at exactly gpus_asked "
                          "that fed them cold shows it too), else this client's (asked_by); null when borderline or "
                          "not shown (a saturated client measured less than they need). What `run --check` exits on")
    asked_by: Literal["storage", "client"] | None = Field(
        None, description="whose answer asked_fed is: the storage's figure, or (no cold run) this client's")
    asked_client_fed: bool | None = Field(
        None, description="did this client feed the GPUs asked about? From a valid training run at exactly "
                          "gpus_asked (asked_confirmed), else predicted; null when borderline")
    asked_confirmed: bool = Field(False, description="asked_client_fed comes from a training run at exactly "
                                                     "gpus_asked")
    best_samples_per_s: Rate | None = Field(None, description="best valid cold loader run, samples/s")
    best_mb_per_s: Rate | None = Field(None, description="MB/s of that run")
    best_concurrency: Count | None = Field(None, description="readers (threads or workers) of that run")
    saturates_at: Count | None = Field(
        None, description="smallest reader count whose mean reached 90% of the best mean, when more readers gave no "
                          "more; null when only one was measured or the rate was still rising")
    unstable: bool = Field(False, description="the storage figure's configuration spread over 5% across "
                                              "--repeat runs: it does not repeat (see `stats`)")
    still_rising: bool = Field(
        False, description="the most readers measured gave > 10% more than the count before: more may give more")
    order: str | None = Field(None, description="order of the best run")

    @model_validator(mode="before")
    @classmethod
    def _client_from_gpus_fed(cls, data: object) -> object:
        """A verdict written before client_gpus_fed said it as gpus_fed."""
        if isinstance(data, dict) and "client_gpus_fed" not in data and data.get("gpus_fed") is not None:
            data = {**data, "client_gpus_fed": data["gpus_fed"]}
        return data


class Result(_Model):
    schema_: str = Field(SCHEMA, alias="schema", description="format version of this file")
    complete: bool = Field(False, description="false while running or when interrupted: `runs` holds what was measured")
    created: str = Field(description="when the run started, ISO 8601 with UTC offset")
    finished: str | None = Field(None, description="when the run ended")
    command: list[str] = Field(description="command line as typed, to repeat the run")
    host: Host = Field(description="the client host")
    mount: Mount = Field(description="the file system measured")
    dataset: Dataset = Field(description="what was read")
    settings: Settings = Field(description="replay settings")
    remote: bool = Field(
        description="the mount is a network/FUSE file system: client-side eviction leaves the server's cache "
                    "warm, so cold figures may include server-cache hits")
    metadata: list[Metadata] = Field(default_factory=list, description="metadata phase, per cache state")
    runs: list[Run] = Field(default_factory=list, description="one entry per measured epoch")
    baseline: Baseline | None = Field(None, description="raw storage baseline (fio) on the same files")
    mitigations: list[Mitigation] = Field(default_factory=list, description="each mitigation against the "
                                                                           "baseline, measured in the same run")
    distributed: Distributed | None = Field(
        None, description="set when the run spanned several ranks (torchrun, or --ranks): the job's shape; `runs` "
                          "then holds one aggregate per epoch and `ranks` each rank's figures")
    ranks: list[RankRecord] = Field(default_factory=list, description="distributed: per rank, its host and epochs")
    stats: list[RunStats] = Field(default_factory=list,
                                  description="per replay configuration: the steady-state figure, over repeats "
                                              "with its spread (set with the verdict)")
    warnings: list[str] = Field(default_factory=list, description="caveats a reader must see")
    verdict: Verdict | None = Field(None, description="summary, set when the run completes")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _readable(cls, data: object, info: ValidationInfo) -> object:
        """Read back: a schema version this iobench knows (before any field: another version has other ones), then
        no NaN or infinity anywhere (in a free-form field too). The ranges are the fields' own types."""
        if info.context != LOADING or not isinstance(data, dict):
            return data
        schema = data.get("schema", SCHEMA)
        if schema not in READS:
            raise ValueError(f"schema is {schema!r}: this iobench reads {', '.join(READS)} (a result of another "
                             "version needs the iobench that wrote it)")
        if (at := _not_finite(data)) is not None:
            raise ValueError(f"{at} is not a finite number (NaN or infinity: iobench never writes one)")
        return data

    def save(self, path: Path) -> None:
        """Atomic write: a reader never sees a half-written file. One that fails is a one-line error naming the
        file (a write() that fails names none)."""
        from iobench.errors import explain_oserror
        from iobench.safefs import write_file

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file(path, self.model_dump_json(indent=1, by_alias=True))
        except OSError as exc:
            raise explain_oserror(exc, f"cannot write the result {path}") from exc

    @classmethod
    def load(cls, path: Path) -> Result:
        """The result in the file at `path`, validated as read back (see LOADING): a ValidationError says why it is
        not usable (`unusable`)."""
        return cls.model_validate_json(path.read_text(), context=LOADING)


def docs_markdown() -> str:
    """docs/results.md: every field of the result file with its description, computed ones (derived from the
    others when written) included."""
    lines = [
        "# Result file fields",
        "",
        f"`iobench run` writes `result.json` (schema `{SCHEMA}`), atomically after every measured epoch.",
        "Generated from `iobench/result.py` by `python -m iobench.result > docs/results.md`.",
        "Units: bytes are bytes; MB = 10^6 B; latencies in ms; rates per second of wall time.",
        "",
        f"Read back (`iobench report`, `compare`, `plan --result`) a result must be of a schema this iobench reads "
        f"({', '.join(f'`{v}`' for v in READS)}), hold no NaN or infinity anywhere (a figure that came out non-finite "
        "is written as null) and each figure within the range its row gives (`iobench schema` has the same bounds); "
        "else it is refused in one line naming the field.",
        "",
    ]

    def walk(model: type[BaseModel], prefix: str) -> None:
        fields = [(f.alias or name, f.annotation, f.description, _range(f)) for name, f in model.model_fields.items()]
        fields += [(c.alias or name, c.return_type, c.description, "")
                   for name, c in model.model_computed_fields.items()]
        for key, ann, description, bounds in fields:
            sub = _model_in(ann)
            many = "list" in str(ann) and sub is not None
            lines.append(f"| `{prefix}{key}{'[]' if many else ''}` | {description} | {bounds} |")
            if sub is not None:
                walk(sub, f"{prefix}{key}{'[]' if many else ''}.")

    lines += ["| field | meaning | range read back |", "|---|---|---|"]
    walk(Result, "")
    return "\n".join(lines) + "\n"


def _range(field: Any) -> str:
    """A field's range as its rule sets it (`_rule`'s JSON Schema bounds), for the docs: "[0, 1e+15]", "(0, 1]",
    "1 to 2^63 - 1"; "" for a field without one."""
    found = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else _extra_in(field.annotation)
    if not found:
        return ""
    least, above, most = found.get("minimum", found.get("exclusiveMinimum")), "exclusiveMinimum" in found, \
        found.get("maximum")
    if most == MOST:
        return f"{least} to 2^63 - 1"
    return f"{'(' if above else '['}{least:g}, {most:g}]"


def _extra_in(ann: object) -> dict | None:
    """The bounds of a rule inside an annotation (`Rate | None`, `list[Rate]`, `list[tuple[Seconds, Count]]`: the
    first found)."""
    for meta in getattr(ann, "__metadata__", ()):
        if isinstance(getattr(meta, "json_schema_extra", None), dict):
            return meta.json_schema_extra
    for arg in getattr(ann, "__args__", ()) or ():
        if (found := _extra_in(arg)) is not None:
            return found
    return None


def _model_in(ann: object) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()) or ():
        found = _model_in(arg)
        if found:
            return found
    return None


if __name__ == "__main__":
    sys.stdout.write(docs_markdown())
