"""The result file, the contract between `run` and everything that reads its output: versioned JSON, written
atomically after every run. Here: Result (load, save), where and how it was measured, and the verdict; what the
runs measured is in result_runs.py, the field types and read-back rules in result_fields.py. Every field carries its
description: docs/results.md is generated from them (scripts/gen_docs.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, ValidationInfo, computed_field, model_validator

from iobench.errors import explain_oserror
from iobench.result_fields import (
    LOADING,
    Count,
    Fraction,
    Model,
    PerGpu,
    Positive,
    Rate,
    Ratio,
    Seconds,
    Target,
    Usable,
    not_finite,
    unusable,
)
from iobench.result_runs import (
    Baseline,
    Cpu,
    Disk,
    FuseView,
    Latency,
    Metadata,
    Mitigation,
    RawPoint,
    Run,
    RunStats,
)
from iobench.safefs import read_input, write_file

__all__ = ["READS", "SCHEMA", "Baseline", "Cpu", "Dataset", "Disk", "Distributed", "FuseView", "Host", "Latency",
           "Metadata", "Mitigation", "Mount", "RankEpoch", "RankRecord", "RawPoint", "Result", "Run", "RunStats",
           "Settings", "Verdict", "unusable"]

SCHEMA = "iobench.result/2"
READS = ("iobench.result/1", SCHEMA)  # the schema versions this iobench reads back (/1: `_upgraded`)


class Mount(Model):
    path: str = Field(description="mount point that holds the dataset (longest match in /proc/mounts)")
    source: str = Field(description="what is mounted: device, server:/export, or FUSE source")
    fstype: str = Field(description="file system type as in /proc/mounts (ext4, xfs, nfs4, fuse.sshfs, ...)")
    options: str = Field(description="mount options as in /proc/mounts")
    family: Literal["local", "nfs", "lustre", "fuse", "network", "object"] = Field(
        description="kind of file system: local block device, NFS (nfs, nfs4), Lustre, FUSE (sshfs, GlusterFS, "
                    "...), another network file system, or object storage (fstype s3: path is the s3:// URL, "
                    "source the endpoint)")
    device: str | None = Field(description="block device (vda, loop0, nvme0n1, dm-0); null for network/FUSE")
    read_ahead_kb: Count | None = Field(description="readahead of the backing device info (/sys/class/bdi)")
    bdi: str = Field(description="major:minor of the file system's backing device info")
    details: dict[str, str | int | None] = Field(
        description="settings that matter for small-file reads, by family. NFS: server, vers, proto, rsize, "
                    "wsize, nconnect, timeo, retrans, hard/soft, actimeo/ac/noac and acregmin..acdirmax, "
                    "lookupcache; Lustre: stripe_count, stripe_size (lfs getstripe), max_read_ahead_mb, "
                    "max_read_ahead_per_file_mb, statahead_max (lctl get_param); FUSE: subtype, max_read; object "
                    "storage: endpoint, bucket, prefix, client (crt or boto3), profile, path_style, read_retries "
                    "and the client libraries' version_* (never a credential)")
    unread: list[str] = Field(description="settings that could not be read, each with why (never guessed)")

    @property
    def objects(self) -> bool:
        """Object storage (a bucket's prefix): samples are keys read by GETs, and there is no client cache."""
        return self.family == "object"


class Dataset(Model):
    path: str = Field(description="dataset root folder")
    files: Count = Field(description="number of samples")
    bytes: Count = Field(description="sum of file sizes")
    mean_bytes: Ratio = Field(description="mean file size")
    median_bytes: Ratio = Field(description="median file size")
    made_by_iobench: bool = Field(description="true when `iobench gen` made it; false for a scanned --dataset")
    params: dict | None = Field(description="gen parameters (files, size_dist, classes, seed) when made by iobench")
    fits_in_ram: bool = Field(
        description="dataset bytes < host RAM: the page cache can hold it, warm runs then measure RAM")
    links_skipped: Count = Field(
        0, description="a scanned --dataset: links (to files or folders) whose target is outside the tree, not "
                       "followed and not read (`settings.follow_links` false); links that stay inside it are "
                       "followed and not counted")
    links_followed: Count = Field(
        0, description="a scanned --dataset: links whose target is outside the tree, followed and read "
                       "(--follow-links)")


class Host(Model):
    hostname: str = Field(description="client host name")
    kernel: str = Field(description="kernel release")
    cpus: Positive | None = Field(description="logical CPUs of the host")
    cpus_usable: Usable | None = Field(
        None, description="cores iobench may use: its CPU affinity (taskset, cpuset) capped by its cgroup's CPU "
                          "quota, as in a container; the verdict's client-CPU test compares with this, not `cpus`")
    client_ceiling_samples_per_s: Rate | None = Field(
        None, description="the most samples/s this client's CPU could deliver on the pipeline's path: `cpus_usable` "
                          "(else `cpus`) / the CPU per sample (reading, and decoding with decode: "
                          "`runs[].cpu_us_per_sample`) of the run the verdict's pipeline figure comes from "
                          "(`verdict.pipeline_from`); a measured figure, set with the verdict; null without that run's "
                          "CPU per sample (results written before it, a distributed job, the raw baseline alone)")
    ram_bytes: Count = Field(description="total RAM")
    ram_available_bytes: Count = Field(description="RAM available when the run started")
    python: str = Field(description="Python version")
    iobench: str = Field(description="iobench version")
    root: bool = Field(description="ran as root (can drop caches)")


class Settings(Model):
    sources: list[Literal["files", "lmdb", "tar"]] = Field(
        ["files"], description="sources the sweep ran on (--source): the same pattern on each, packed beside "
                               "the dataset when needed")
    orders: list[str] = Field(description="orders replayed")
    concurrency: list[Count] = Field(description="reader counts swept: threads (thread engine) or DataLoader workers "
                                                 "(0: the main process reads), as `reader` says")
    in_flight: list[Positive] = Field([1], description="requests in flight per reader swept (--in-flight: object "
                                                       "storage; each reader count runs at each)")
    engine: Literal["threads", "dataloader"] = Field("threads", description="replay engine")
    batch_size: Positive = Field(256, description="DataLoader batch size")
    prefetch_factor: Positive = Field(2, description="DataLoader batches each worker keeps ready")
    decode: bool = Field(False, description="decode and augment each sample after reading it (CPU work)")
    pipelines: list[str] = Field(
        ["raw"], description='the input pipelines of the training runs (--pipeline), one training search each: "raw" '
                             "(iobench's reader), \"torchvision\", \"dali\", \"dali-raw\", or the user's "
                             "FILE.py:FUNC / package.module:FUNC (docs/pipelines.md)")
    cache: list[str] = Field(description='cache states measured ("cold", "warm")')
    epochs: Count = Field(description="epochs per (order, concurrency, cache state)")
    seed: Count = Field(description="seed of the shuffles")
    replay: bool = Field(True, description="loader epochs replayed (false for `iobench fio` alone)")
    metadata: bool = Field(True, description="metadata phase run")
    raw_baseline: bool = Field(True, description="raw baseline asked for (--fio/--no-fio): fio on files (when fio is "
                                                 "installed), the AWS CRT's S3 client on objects (`baseline.tool`)")
    scale_files: Count = Field(1_281_167, description="dataset size for projections (ImageNet-1k train: 1,281,167)")
    mitigations: bool = Field(False, description="mitigation phase run (--mitigations)")
    fuse_view: str | None = Field(None, description="with --url: the FUSE view of the same bucket (--mount) read "
                                                  "beside the objects")
    follow_links: bool = Field(False, description="--dataset with --follow-links: links whose target is outside the "
                                                  "tree were followed (`dataset.links_followed`), else skipped "
                                                  "(`dataset.links_skipped`)")
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

    def raw_depths(self, most: int) -> list[int]:
        """The raw baseline's requests in flight on object storage, to meet each of the sweep's runs at its own
        (readers x --in-flight, as runs[].in_flight), up to `most` (the keys: deeper, some would have no GET)."""
        return sorted({min(max(c, 1) * d, most) for c, d in self.sweep(most)})

    def depth_for(self, conc: int, depth: int, files: int) -> int:
        """The GETs in flight per reader a run at `conc` readers keeps of --in-flight `depth` over `files` objects:
        at most the objects each reader has (more would have no GET to send), and with the DataLoader at most a batch
        (a worker keeps its GETs within its batch)."""
        most = -(-files // max(conc, 1))
        if self.engine == "dataloader":
            most = min(most, self.batch_size)
        return max(1, min(depth, most))

    def sweep(self, files: int) -> list[tuple[int, int]]:
        """(readers, GETs in flight per reader) of the sweep over `files` objects, each depth as `depth_for` keeps
        it, once each, in the order asked."""
        return list(dict.fromkeys((c, self.depth_for(c, d, files)) for c in self.concurrency for d in self.in_flight))


class Distributed(Model):
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


class RankEpoch(Model):
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


class RankRecord(Model):
    rank: Count = Field(description="global rank")
    local_rank: Count = Field(description="rank on its host")
    host: str = Field(description="host name")
    pid: Count = Field(description="process id on that host")
    cpus_usable: Usable = Field(description="cores this rank's process may use (affinity, cgroup quota)")
    epochs: list[RankEpoch] = Field(default_factory=list, description="this rank's figures per epoch")


class Verdict(Model):
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
        None, description="storage capacity: the most the storage gave this client cold, the best of the raw "
                          "baseline, every valid loader run at its best concurrency and every valid cold training run "
                          "(what its GPUs took in); null without a valid cold measurement")
    storage_is_lower_bound: bool = Field(
        False, description="the client's CPU was saturated (or, for a training run, its GPUs were fed) while that "
                           "figure was measured: the storage may give more")
    storage_spread: Ratio | None = Field(
        None, description="how far the storage figure moves between identical runs, as a fraction of it: over "
                          "--repeat runs, the epochs of its configuration or the raw baseline's runs "
                          "(storage_spread_measured), else 0.05 assumed (what MLPerf Storage allows)")
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
                                                       '"awscrt, 16 in flight", "dataloader, 4 workers", ...)')
    pipeline_samples_per_s: Rate | None = Field(
        None, description="pipeline capacity: samples/s the training-shaped input pipeline (the workload's engine, "
                          "batch and decode) delivered on this client, from valid training runs where one starved, "
                          "else the best valid replay run of that shape")
    pipeline_from: str | None = Field(None, description="which run(s) the pipeline figure comes from")
    client_pipeline: str | None = Field(
        None, description="the input pipeline this client's answer is for (the first of --pipeline: its training "
                          "runs' `pipeline`); null in results written before it")
    pipeline_cpu_us_per_sample: Seconds | None = Field(
        None, description="CPU microseconds per sample of the run the pipeline figure comes from (its process tree: "
                          "reading, decoding where it decodes, handing over): what this client's CPU ceiling divides")
    pipelines_fed: dict[str, Count | None] | None = Field(
        None, description="with several pipelines (--pipeline raw,torchvision): GPUs this client fed with each, by "
                          "the same rules as `client_gpus_fed` on that pipeline's training runs (null: no answer for "
                          "it); null with one pipeline")
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
        None, description="smallest reader count (object storage: requests in flight, runs[].in_flight) whose mean "
                          "reached 90% of the best mean, when more gave no more; null when only one was measured or "
                          "the rate was still rising")
    unstable: bool = Field(False, description="the storage figure's configuration spread over 5% across "
                                              "--repeat runs: it does not repeat (see `stats`)")
    still_rising: bool = Field(
        False, description="the most readers measured gave > 10% more than any fewer readers did: more may give more")
    order: str | None = Field(None, description="order of the best run")

    @model_validator(mode="before")
    @classmethod
    def _client_from_gpus_fed(cls, data: object) -> object:
        """A verdict written before client_gpus_fed said it as gpus_fed."""
        if isinstance(data, dict) and "client_gpus_fed" not in data and data.get("gpus_fed") is not None:
            data = {**data, "client_gpus_fed": data["gpus_fed"]}
        return data


class Result(Model):
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
    baseline: Baseline | None = Field(None, description="raw storage baseline on the same samples: fio on files, the "
                                                   "AWS CRT's S3 client on objects (`baseline.tool`)")
    mitigations: list[Mitigation] = Field(default_factory=list, description="each mitigation against the "
                                                                           "baseline, measured in the same run")
    fuse_view: FuseView | None = Field(None, description="--url with --mount: objects vs files through the FUSE view "
                                                         "of the same bucket, in the same run")
    distributed: Distributed | None = Field(
        None, description="set when the run spanned several ranks (torchrun, or --ranks): the job's shape; `runs` "
                          "then holds one aggregate per epoch and `ranks` each rank's figures")
    ranks: list[RankRecord] = Field(default_factory=list, description="distributed: per rank, its host and epochs")
    stats: list[RunStats] = Field(default_factory=list,
                                  description="per replay configuration: the steady-state figure, over repeats "
                                              "with its spread (set with the verdict)")
    warnings: list[str] = Field(default_factory=list, description="caveats a reader must see")
    verdict: Verdict | None = Field(None, description="summary, set when the run completes")

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

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
        if (at := not_finite(data)) is not None:
            raise ValueError(f"{at} is not a finite number (NaN or infinity: iobench never writes one)")
        return _upgraded(data) if schema == "iobench.result/1" else data

    def save(self, path: Path) -> None:
        """Atomic write: a reader never sees a half-written file. One that fails is a one-line error naming the
        file (a write() that fails names none)."""

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file(path, self.model_dump_json(indent=1, by_alias=True))
        except OSError as exc:
            raise explain_oserror(exc, f"cannot write the result {path}") from exc

    @classmethod
    def load(cls, path: Path) -> Result:
        """The result in the file at `path`, validated as read back (see LOADING): a ValidationError says why it is
        not usable (`unusable`); a special file or one too big to be a result, a one-line UserError (read_input)."""
        return cls.model_validate_json(read_input(path, "an iobench result"), context=LOADING)


# /1 named the raw baseline "fio" even when the AWS CRT's S3 client measured it: /2 names it by what ran
POINT_V1 = {"files": "samples", "files_per_s": "samples_per_s", "runs_files_per_s": "runs_samples_per_s",
             "job": "program"}


def _upgraded(data: dict) -> dict:
    """A result of schema /1 under /2's names (docs/results.md lists them); the figures are not touched, fields /1
    never had take their defaults, and `schema` stays what the file says (a report names the version it was in)."""
    data = dict(data)
    if isinstance(settings := data.get("settings"), dict) and "fio" in settings:
        data["settings"] = {("raw_baseline" if k == "fio" else k): v for k, v in settings.items()}
    if isinstance(base := data.get("baseline"), dict):
        base = {k: v for k, v in base.items() if k not in ("fio", "fio_version")}
        base.setdefault("tool", "fio")
        if base.get("tool_version") is None and base["tool"] == "fio":
            base["tool_version"] = data["baseline"].get("fio_version")
        points = data["baseline"].get("fio", [])
        base["points"] = [{POINT_V1.get(k, k): v for k, v in p.items()} if isinstance(p, dict) else p
                          for p in points] if isinstance(points, list) else points
        data["baseline"] = base
    return data
