"""What the result's runs measured: an epoch's figures (Run, with its latency, CPU and disk), the metadata phase,
the raw baseline's points (fio's, or the S3 client's), the mitigations and the steady-state figure per replay
configuration."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, computed_field

from iobench.result_fields import Count, Fraction, Model, Percent, PerGpu, Positive, Rate, Ratio, Seconds, Used


class Latency(Model):
    p50: Seconds = Field(description="median, ms")
    p90: Seconds = Field(description="90th percentile, ms")
    p99: Seconds = Field(description="99th percentile, ms")
    p999: Seconds = Field(description="99.9th percentile, ms")
    max: Seconds = Field(description="slowest sample, ms")
    mean: Seconds = Field(description="mean, ms")


class Cpu(Model):
    system_busy_pct: Percent | None = Field(description="all cores, % busy (not idle, not iowait) during the run")
    iowait_pct: Percent | None = Field(description="all cores, % of time idle waiting for IO")
    iobench_cores: Used | None = Field(
        description="CPU seconds iobench used per wall second (its DataLoader workers included); near the core "
                    "count means the client CPU, not the storage, set the pace")
    iobench_cpu_s: Seconds | None = Field(
        None, description="user + system CPU seconds of iobench's processes over the same time as iobench_cores "
                          "(this process, its DataLoader workers, a forked reader process; psutil, the kernel's "
                          "clock ticks: 10 ms per process); null in results written before it")
    decode_cpu_s: Seconds | None = Field(
        None, description="with decode: the CPU seconds decode and augmentation took, part of iobench_cpu_s (each "
                          "worker's thread CPU clock around each sample's decode, crop and flip: what a sample "
                          "costs past its read); null without decode")


class Disk(Model):
    device: str = Field(description="block device behind the mount, as in /proc/diskstats")
    read_bytes: Count = Field(description="bytes the device read during the run (includes readahead)")
    read_ios: Count = Field(description="read requests the device completed during the run")


class Run(Model):
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
    engine: Literal["threads", "dataloader", "pipeline"] = Field(
        description='"threads": a thread pool that prefetches ahead; "dataloader": a torch DataLoader whose worker '
                    'processes read whole batches and hand each over as one shared-memory tensor; "pipeline": a '
                    "training run through another input pipeline than iobench's reader (`pipeline` names it)")
    pipeline: str | None = Field(
        None, description='training runs: the input pipeline that fed the GPUs (--pipeline): "raw" (iobench\'s '
                          "reader, bytes into the batch, as DALI's file reader feeds a GPU decode), \"torchvision\" "
                          "(ImageFolder-style Dataset + pytorch/examples' transforms + DataLoader), \"dali\" (DALI "
                          "decode + crop + normalize), \"dali-raw\" (DALI's file reader alone), or the user's "
                          "FILE.py:FUNC; null for replay and mitigation runs (iobench's reader)")
    concurrency: Count = Field(description="readers at once: threads, or DataLoader workers (1 for workers=0)")
    depth: Positive = Field(1, description="requests in flight per reader (--in-flight: object storage's GETs started "
                                           "ahead, in order; 1: one at a time, as a file is read)")
    throttled: Count = Field(0, description="answers the server throttled (503 SlowDown and the like) during the "
                                            "epoch, each retried by iobench after the server's pause; the samples "
                                            "were read all the same (object storage)")
    workers: Count | None = Field(None, description="DataLoader worker processes (0: the main process reads); "
                                                    "null for the thread engine")
    batch_size: Positive | None = Field(None, description="DataLoader batch size; null for the thread engine")
    decode: bool = Field(False, description="per sample, Pillow decode + torchvision's RandomResizedCrop(224) + flip "
                                            "after the read, timed apart (decode_ms); samples/s then includes that CPU "
                                            "work. A training run through another pipeline: it decodes (torchvision, "
                                            "dali), not timed apart")
    cache: Literal["cold", "warm"] = Field(
        description='"cold": page cache evicted before the epoch; "warm": read again without eviction')
    epoch: Count = Field(description="epoch number within this result (seeds the shuffle with `settings.seed`)")
    repeat: Count = Field(0, description="which repeat of the measured phases this run belongs to (--repeat N: 0 to "
                                         "N-1); the figures are the mean over repeats, see `stats`. A training "
                                         "run: 1 for the run made again at the same shape because the first's AU "
                                         "landed within 5% of the AU target (answer/search.py), its count judged "
                                         "on the mean AU of the two")
    passes: Positive = Field(1, description="passes over the dataset this epoch read, one after the other, each "
                                            "shuffled afresh: a warm epoch of one pass that lasted under the 0.5 s "
                                            "a run needs is read again as enough passes to last ~1 s "
                                            "(answer/sizing.passes_for); `samples` counts every pass")
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
    bytes: Count = Field(description="bytes actually returned by read() calls, counted, not assumed; a training run "
                                     "through another pipeline than raw (whose reads are the library's): the "
                                     "manifest's sizes of as many samples as it delivered")
    seconds: Seconds = Field(description="wall time of the epoch, first open to last close")
    first_batch_s: Seconds | None = Field(
        None, description="DataLoader: seconds from the epoch's start to its first batch in the main process (the "
                          "workers' start-up and first reads: the part of an epoch that does not grow with its size); "
                          "null for the thread engine, whose readers start at once")
    samples_per_s: Rate = Field(description="samples / seconds (files/s for the files source); a training run's one "
                                            "throughput is what its GPUs consumed over AU's window instead (first "
                                            "step excluded: `delivered_per_s`)")
    mb_per_s: Rate = Field(description="bytes / seconds / 10^6 (1 MB = 1,000,000 B); a training run: its samples/s "
                                       "at its mean sample size")
    latency_ms: Latency | None = Field(
        description="per sample, open + read to EOF + close. Includes waiting for the Python interpreter "
                    "lock on a busy client: compare p50 with the raw baseline's when the tail matters. Null for a "
                    "training run through another pipeline than raw: its reads happen inside the library, unseen")
    open_ms: Latency | None = Field(description="per sample, the open() alone (path lookup, permission, metadata); "
                                                "null where `latency_ms` is")
    batch_wait_ms: Latency | None = Field(
        None, description="training runs: per batch, how long the training loop waited for it after its last step "
                          "(steps 2..n, every GPU's): the input pipeline's stall as the GPU sees it; null elsewhere")
    decode_ms: Latency | None = Field(None, description="per sample, decode and augmentation; null without decode")
    cpu: Cpu = Field(description="CPU use during the epoch (psutil)")
    cpu_us_per_sample: Seconds | None = Field(
        None, description="iobench's own cost: user + system CPU microseconds per sample read (`cpu.iobench_cpu_s` "
                          "/ samples), of all iobench's processes over the epoch: opening, reading, timing and "
                          "handing over each sample, progress, a DataLoader's worker start-up in its first epoch, a "
                          "training run's consumer, and with decode the decode (also apart: "
                          "`decode_cpu_us_per_sample`; reading's own is the difference). Against the raw baseline's "
                          "(`baseline.points[].cpu_us_per_sample`) it shows the tool's overhead; null in results "
                          "written before it, and for a distributed job's aggregate (each rank's is in `ranks`)")
    decode_cpu_us_per_sample: Seconds | None = Field(
        None, description="with decode: decode and augmentation's own CPU microseconds per sample "
                          "(`cpu.decode_cpu_s` / samples), part of `cpu_us_per_sample`; null without decode")
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
                          "(first step excluded): all GPUs' samples there over the longest GPU's window (results "
                          "before 2026-12-05: the sum of each GPU's own rate, higher where windows differed); the "
                          "same figure as `samples_per_s` (the run's one throughput), kept under this name for "
                          "readers of earlier results")
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
        None, description="samples_per_s over the raw baseline's samples/s (`baseline.points`: fio's files/s, the "
                          "raw S3 client's objects/s) at the same concurrency (objects: requests in flight) and "
                          "cache state; null without it. Above 1 means the raw tool's per-sample overhead, not "
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

    @property
    def timed(self) -> Latency:
        """`latency_ms` of a run that timed its reads: every replay and mitigation run (a training run through
        another pipeline than raw has none: its reads are the library's)."""
        if self.latency_ms is None:
            raise ValueError(f"run {self.epoch} timed no read: its pipeline is {self.pipeline}")
        return self.latency_ms

    @property
    def opened(self) -> Latency:
        """`open_ms` of a run that timed its reads (see `timed`)."""
        if self.open_ms is None:
            raise ValueError(f"run {self.epoch} timed no open: its pipeline is {self.pipeline}")
        return self.open_ms

    @computed_field(description="requests in flight at once: readers (`concurrency`) x `depth`")  # type: ignore[prop-decorator]
    @property
    def in_flight(self) -> int:
        return self.concurrency * self.depth

    @computed_field(description='what `concurrency` counts: "threads" (the thread engine\'s readers) or "workers" '  # type: ignore[prop-decorator]
                                "(DataLoader worker processes: `workers`; 0 is the main process reading)")
    @property
    def reader(self) -> Literal["threads", "workers"]:
        return "threads" if self.engine == "threads" else "workers"


class Metadata(Model):
    cache: Literal["cold", "warm"] = Field(description='"cold": caches (with root: dentries and inodes too) dropped '
                                                        "before each part; \"warm\": right after")
    eviction: str | None = Field(description="how caches were dropped for a cold pass (fadvise cannot drop metadata)")
    dirs: Count = Field(description="folders listed (object storage: LIST requests, 1,000 keys each)")
    files: Count = Field(description="regular files seen by the listing: every file is counted (object storage: "
                                     "keys listed under the dataset's prefix, its manifest and marker included)")
    list_s: Seconds = Field(description="seconds to list the tree as torchvision's ImageFolder does (scandir per "
                                        "folder)")
    stat_files: Count = Field(description="files stat()ed (a random sample of at most 20,000; object storage: "
                                          "objects HEAD-ed, a sample of at most 2,000)")
    stat_per_s: Rate = Field(description="stat() calls (object storage: HEAD requests) per second, one thread")
    stat_ms: Latency = Field(description="per stat() call (object storage: per HEAD)")
    open_close_files: Count = Field(description="files opened and closed without reading (same sample; object "
                                                "storage: a ranged GET of each one's first byte)")
    open_close_per_s: Rate = Field(description="open()+close() pairs (object storage: first-byte GETs) per "
                                                "second, one thread")
    open_close_ms: Latency = Field(description="per open()+close() pair (object storage: per first-byte GET)")
    scale_files: Count = Field(description="dataset size the projection is for (--scale-files; ImageNet: 1,281,167)")
    projected_list_s: Seconds = Field(
        description="prediction, not a measurement: list_s scaled linearly to scale_files, the start-up cost "
                    "before the first batch")


class RawPoint(Model):
    """One point of the raw baseline: what ran (`baseline.tool`: fio on files, the CRT's S3 client on objects) at one
    concurrency and cache state."""

    concurrency: Count = Field(description="fio: jobs (numjobs), each reading its share of the files; awscrt: "
                                           "requests in flight")
    cache: Literal["cold", "warm"] = Field(description="cache state, prepared as for the loader runs")
    samples: Count = Field(description="samples read, loops included: fio, files (a random sample of the dataset of "
                                       "at most 20,000, read once per loop); awscrt, objects (every key, one GET each)")
    bytes: Count = Field(description="bytes read (fio: its io_bytes)")
    seconds: Seconds = Field(description="the tool's runtime for the reads (fio: includes open and close, 1 ms "
                                         "resolution; awscrt: first request sent to last body received)")
    samples_per_s: Rate = Field(description="samples / seconds (files/s, objects/s)")
    mb_per_s: Rate = Field(description="bytes / seconds / 10^6")
    latency_ms: Latency = Field(description="fio: its completion latency of each whole-file pread() (not open/close); "
                                            "awscrt: each GET, request sent to last byte")
    setup_s: Seconds = Field(description="time outside the timed reads (fio: parsing its logs, stat of every file; "
                                         "awscrt: its process's start and end around them)")
    program: str = Field(description="what ran: fio's job file (each job replays an iolog: open, one read of the "
                                     "file, close), or the raw S3 client's command line")
    cpu: Cpu | None = Field(None, description="CPU use while the tool ran, its set-up and every repeat included "
                                              "(iobench_cores counts the tool's processes): near the usable cores, "
                                              "its figure is a lower bound of the storage's")
    cpu_s: Seconds | None = Field(
        None, description="user + system CPU seconds of the tool in the run kept: fio's JSON's (usr_cpu + sys_cpu) % "
                          "x job_runtime, summed over the jobs (each file's open, read and close; not fio's set-up), "
                          "awscrt's process's own over its reads; null where fio did not say, and in results "
                          "written before it")
    cpu_us_per_sample: Seconds | None = Field(
        None, description="the tool's CPU microseconds per sample read (cpu_s / samples): the leanest per-sample "
                          "path, what runs[].cpu_us_per_sample is set against at the same concurrency and cache state")
    throttled: Count = Field(0, description="objects' raw baseline: answers the server throttled (503 SlowDown, 429), "
                                            "each GET sent again after the server's pause by the raw client (its own "
                                            "retries off, so none is hidden); the verdict's evidence says so when the "
                                            "server throttled; 0 for fio")
    repeats: Count = Field(1, description="runs at this point (fio cold: each from an evicted cache); the fastest kept")
    runs_samples_per_s: list[Rate] = Field(default_factory=list, description="samples/s of every repeat")
    at_best: bool = Field(True, description="false when `caveats` says the kept run may be below the tool's best")
    caveats: list[str] = Field(default_factory=list,
                               description="why the figure may be below the tool's best (another process dropped "
                                           "the caches while fio ran; timed reads too short)")
    valid: bool = Field(True, description="the point counts: it read for at least 0.5 s (verdict.MIN_SECONDS); "
                                          "false points are shown marked and never give the storage figure")
    invalid_reason: str | None = Field(None, description="why the point does not count")
    json_file: str | None = Field(None, description="the tool's own JSON output of the run kept, its path relative "
                                                    "to the result's folder: fio's (--output-format=json, as fio "
                                                    "printed it, for fio-plot and other fio tooling: fio/fio-<jobs>"
                                                    "jobs-<cache>.json; beside it the job file (.fio) and, only when "
                                                    "they total <= 1 MiB, the iologs it replays (.<j>.iolog: the file "
                                                    "paths and read order), else not kept), or awscrt's "
                                                    "(awscrt/awscrt-<n>inflight-<cache>.json). Null: not kept")


class Mitigation(Model):
    name: str = Field(description="what changed against the baseline (see runs[].mitigation)")
    source: str = Field(description="files, lmdb or tar")
    samples_per_s: Rate = Field(description="cold samples/s with the mitigation, same pattern and readers")
    speedup: Ratio = Field(description="samples_per_s over the baseline's (same run, same cache state)")
    extra_bytes: Count = Field(description="extra space it takes on the storage (a pack inside the dataset, under "
                                           "packed/), bytes")
    pack_s: Seconds | None = Field(description="time making the pack took (once), seconds")
    gpus_fed: Count | None = Field(description="predicted GPUs fed at this rate (rate / (AU target x per-GPU rate))")
    note: str | None = Field(None, description="what a reader should know (e.g. a weaker shuffle)")
    requests: Count | None = Field(None, description="object storage: GETs its epoch made (one per sample, or one "
                                                     "per shard streamed); null on files")
    first_byte_ms: Seconds | None = Field(None, description="object storage: median time to first byte of a GET, ms")
    request_ms: Seconds | None = Field(None, description="object storage: median time of a whole GET (a streamed "
                                                         "shard's: its samples' times together), ms")
    valid: bool = Field(True, description="its run (runs[] with this mitigation) counts: false rows are shown marked "
                                          "and never named as the best mitigation")
    invalid_reason: str | None = Field(None, description="why its run does not count (runs[].invalid_reason)")


class Baseline(Model):
    tool: Literal["fio", "awscrt"] = Field(
        description="what measured the raw points: fio (files: each job opens, reads whole and closes its files), or "
                    "the AWS CRT's native S3 client (awscrt, objects: every key GET once per point, `concurrency` "
                    "requests in flight)")
    tool_version: str | None = Field(None, description="its version; null when it is not installed")
    points: list[RawPoint] = Field(default_factory=list, description="the raw baseline's points, per concurrency "
                                                                     "and cache state")
    note: str | None = Field(None, description="why the baseline is missing or partial")


class RunStats(Model):
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


class FuseView(Model):
    """`run --url --mount`: the same dataset read as objects and as files through a FUSE view of the bucket."""

    mount: str = Field(description="the FUSE view's mount point (--mount)")
    fstype: str = Field(description="its file system type as in /proc/mounts (fuse.seaweedfs, fuse.mountpoint-s3, ...)")
    dataset: str = Field(description="the dataset's folder on it (the same keys and sizes as the objects)")
    readers: Count = Field(description="threads or DataLoader workers of both epochs")
    cache: str = Field(description="cache state of both epochs (cold: the files evicted from this host's cache)")
    objects_samples_per_s: Rate = Field(description="samples/s read as objects (a GET per sample)")
    files_samples_per_s: Rate = Field(description="samples/s read as files through the FUSE view")
    faster: Literal["objects", "files"] = Field(description="which of the two read faster")
    ratio: Ratio = Field(description="the faster's samples/s over the slower's")
    valid: bool = Field(description="both epochs count (runs[] with mitigation objects and fuse-view)")
