"""The verdict against storage and clients whose limit is known: real file systems, the real CLI in a subprocess.

Each scenario sets the limit from outside iobench and checks that the verdict names it, with figures that match:

    storage     loop XFS with reads capped by a cgroup-v1 blkio throttle (1,000 IO/s on the loop device)
    client-cpu  the same XFS capped at 3,000 IO/s, iobench pinned to one CPU (its affinity) with a CPU quota of half
                of it (a cgroup-v1 cpu quota, as a container's limit) and decoding: this client feeds no GPU while
                the storage feeds several (the buyer's case)
    storage     sshfs through a proxy that adds 8 ms each way (a real network file system)
    client-cpu  warm data with --decode (Pillow decode and augmentation on a 2-core client)
    gpu / not   --gpus 2 with a consumer far slower, then far faster, than the capped XFS
    (none)      a run too short to measure anything: every run invalid, no GPU count, the way out said

The figures measured are in each test's docstring (a 2-core VM shared with other test runs: noisy); run with -s
to see a scenario's figures, which a failing test also shows. Every scenario first checks that it really set up
the limit it claims (the preconditions, which hold whatever the verdict says), then what the verdict says.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest
from conftest import iobench, needs_root
from testbed_fixtures import blkio_cgroup, cpu_cgroup, mount_source, testbed

from iobench.answer.rules import RISING

# Each scenario's verdict judges rates against a limit set from outside: run alone (scripts/test's quiet pass)
pytestmark = pytest.mark.quiet

pytest.importorskip("torch")  # every scenario replays with DataLoader workers

RUN_TIMEOUT_S = 240
# Small, fast settings: one cold epoch per DataLoader worker count, no metadata phase.
FAST = ("--engine", "dataloader", "--epochs", "1", "--no-metadata")
XFS_SMALL = 1000  # ~110 kB ImageNet-like JPEGs; at 1,000 IO/s an epoch takes ~1 s
XFS_2K = 2000  # capped: ~2 s an epoch; decoded on half a core (~100-200/s): 10-20 s; fio there (~2,000/s): ~1 s
PINNED_CORES = 0.5  # the pinned client's quota: one core decoded 200-425 samples/s on the hosts met, 360 feed a GPU
PINNED_IOPS = 3000  # its storage's cap: ~8 GPUs' worth, and fio's 2,000 files last >= 0.67 s on any host
IOPS_CAP = 1000
MIN_SECONDS = 0.5  # a shorter run (loader or fio) does not count


def run_cli(mount: Path, out: Path, *args: str, cgroups: tuple[Path, ...] = (),
            cpus: list[int] | None = None) -> tuple[dict, float]:
    """`iobench run --mount MOUNT --out OUT --quiet ARGS` in a process of its own (in `cgroups`, on `cpus`); its
    result.json and the wall seconds it took."""
    argv = ["run", "--mount", str(mount), "--out", str(out), "--quiet", *args]
    t0 = time.monotonic()
    proc = iobench(*argv, timeout=RUN_TIMEOUT_S, cgroups=cgroups, cpus=cpus)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    result = json.loads((out / "result.json").read_text())
    print(figures(result, seconds))  # shown with -s, and in the report of a failing test
    return result, seconds


def replay_runs(result: dict) -> list[dict]:
    """The sweep's runs: not training runs (gpus set), not mitigations."""
    return [r for r in result["runs"] if r.get("gpus") is None and r.get("mitigation") is None]


def fio_cold(result: dict) -> list[float]:
    """fio's cold files/s at each job count, from the runs long enough to count."""
    return [b["samples_per_s"] for b in ((result.get("baseline") or {}).get("points") or [])
            if b["cache"] == "cold" and b["seconds"] >= MIN_SECONDS]


def ios_per_file(run: dict) -> float | None:
    return run["disk"]["read_ios"] / run["samples"] if run.get("disk") and run["samples"] else None


def figures(result: dict, seconds: float) -> str:
    """What a scenario measured, one line per run: the calibration behind its thresholds."""
    lines = [f"--- {' '.join(result['command'][-12:])}: {seconds:.1f} s"]
    for r in result["runs"]:
        ipf = ios_per_file(r)
        lines.append(
            f"  {r['engine']} w={r['workers']} {r['cache']} gpus={r['gpus']} {r['samples']} in {r['seconds']:.2f} s "
            f"= {r['samples_per_s']:,.0f}/s ios/file={'-' if ipf is None else f'{ipf:.3f}'} "
            f"cores={r['cpu']['iobench_cores']} busy={r['cpu']['system_busy_pct']}% au={r.get('au')} "
            f"valid={r.get('valid')} {r.get('invalid_reason') or ''}")
    for b in (result.get("baseline") or {}).get("points") or []:
        lines.append(f"  fio jobs={b['concurrency']} {b['cache']}: {b['samples_per_s']:,.0f} files/s in "
                     f"{b['seconds']} s")
    v = result.get("verdict") or {}
    keys = ("limit", "storage_samples_per_s", "storage_is_lower_bound", "storage_gpus_fed", "pipeline_samples_per_s",
            "client_gpus_fed", "gpus_fed_confirmed", "gpus_asked", "asked_fed", "rate_per_gpu", "au_target")
    lines.append("  verdict: " + " ".join(f"{k}={v.get(k)}" for k in keys))
    lines.append(f"  cpus_usable={result['host'].get('cpus_usable')} text: {v.get('text', '')[:300]}")
    return "\n".join(lines)


def fed_by(supply: float, verdict: dict) -> int:
    """GPUs a supply of samples/s keeps at the AU target."""
    return math.floor(supply / (verdict["au_target"] * verdict["rate_per_gpu"]) + 1e-9)


def storage_answer_holds(v: dict) -> None:
    """The storage's GPUs follow from its figure, floor(storage / (AU target x rate)) (the low end of a range, when
    the figure sits within its spread of a line), and the first line says them, then this client's."""
    count = fed_by(v["storage_samples_per_s"], v)
    low, high = v["storage_gpus_range"] or [count, count]
    assert low <= count <= high and v["storage_gpus_fed"] == low, v["text"]
    words = f"{low}-{high}" if v["storage_gpus_range"] else f"{low}"
    least = "at least " if v["storage_is_lower_bound"] else ""
    if v["gpus_asked"] is None:
        assert f"the storage feeds {least}{words} " in v["answer"], v["answer"]
    elif v["asked_fed"]:  # the count asked about first, then how many the storage feeds
        assert (f"and up to {words} " in v["answer"]) == (low > v["gpus_asked"]) or high > low, v["answer"]
    else:
        assert f"(enough for {words})" in v["answer"], v["answer"]
    assert "client feeds" in v["answer"] or "client fed" in v["answer"], v["answer"]
    client = f"{v['client_gpus_range'][0]}-{v['client_gpus_range'][1]}" if v["client_gpus_range"] \
        else f"{v['client_gpus_fed']}"
    assert f"client feeds {client}" in v["answer"] or v["asked_client_fed"], v["answer"]
    if v["gpus_asked"] is None:  # the first line under ~200 characters, beside the test bed's long mount path
        assert len(v["answer"]) - len(v["answer"].split(": ", 1)[0]) < 170, v["answer"]
    else:  # a pipeline other than raw is named, with its CPU per sample (docs/pipelines.md): ~70 characters more;
        # a range ("up to 6-7") and "at least" (a busy host's lower bound) ~12 more: 271 beside a CPU hog
        named = v.get("client_pipeline") not in (None, "raw")
        assert len(v["answer"]) < (285 if named else 200), v["answer"]


# ------------------------------------------------------------------------------------------------ the beds


@pytest.fixture(scope="module")
def xfs_data(xfs_mount: Path) -> tuple[Path, str]:
    """ImageNet-like datasets of 1,000 and 2,000 files on loop XFS (made once for the module, ~5 s), and
    the loop device under them; `run --files N` picks one."""
    device = mount_source(xfs_mount)
    if not device or not device.startswith("/dev/loop"):
        pytest.skip(f"the xfs test bed at {xfs_mount} is not on a loop device ({device})")
    folder = xfs_mount / "t-limits"
    folder.mkdir(exist_ok=True)
    for files in (XFS_SMALL, XFS_2K):
        iobench("gen", "--mount", str(folder), "--files", str(files), "--quiet", check=True)
    return folder, device


# ------------------------------------------------------------------------------------------------ scenarios


@pytest.fixture(scope="module")
def capped(xfs_data, tmp_path_factory) -> tuple[dict, Path]:
    """XFS with reads capped at 1,000 IO/s: 2,000 files (an epoch of ~2 s: the throttle's first burst, ~100 reads
    over the cap, weighs 5% in it), 1 and 2 workers, --rate 400 (its result and folder)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a blkio cgroup)")
    folder, device = xfs_data
    out = tmp_path_factory.mktemp("capped") / "out"
    with blkio_cgroup("iobench-test-cap", device, read_iops=IOPS_CAP) as cg:
        r, _ = run_cli(folder, out, "--files", str(XFS_2K), *FAST, "--workers", "1,2", "--batch-size", "16",
                       "--cache", "cold", "--rate", "400", cgroups=(cg,))
    return r, out


@pytest.fixture(scope="module")
def pinned(xfs_data, tmp_path_factory) -> tuple[dict, Path]:
    """The same XFS, its reads capped at PINNED_IOPS, iobench (its workers and fio with it) pinned to CPU 0 with a
    quota of half of it, its training run decoding (--pipeline torchvision; the replay reads raw, a second figure
    of the storage beside fio's, in ~0.6 s where decoding it took ~15 s): 2,000 files, one worker, --rate 400
    --gpus 1 (its result and folder). Both
    limits known, not the host's speed: uncapped and on a whole core, a fast host's core decoded ~400 samples/s
    (a GPU fed) and its fio read the 2,000 files in 0.48 s (too short to count)."""
    folder, device = xfs_data
    out = tmp_path_factory.mktemp("pinned") / "out"
    with blkio_cgroup("iobench-test-pin-io", device, read_iops=PINNED_IOPS) as io, \
            cpu_cgroup("iobench-test-pin", PINNED_CORES) as cpu:
        r, _ = run_cli(folder, out, "--files", str(XFS_2K), *FAST, "--workers", "1", "--batch-size", "16",
                       "--cache", "cold", "--rate", "400", "--gpus", "1", "--pipeline", "torchvision",
                       cgroups=(io, cpu), cpus=[0])
    return r, out


@pytest.mark.root
@pytest.mark.testbed
@needs_root
def test_storage_capped_at_1000_iops_is_the_limit(xfs_data, capped):
    """Reads capped at 1,000 IO/s: the storage is the limit, and what it delivers is what the cap allows.
    Measured (3 runs): 1.00-1.17 device reads per file (readahead, XFS metadata), loader 846-1,013 files/s
    (1 and 2 workers), fio 629-964 files/s, training AU 0.93-0.95 at 2 GPUs and 0.76-0.85 at 3 (--rate 400:
    2 GPUs take 800 of the ~1,000 samples/s); 23-35 s."""
    _, device = xfs_data
    r, _ = capped
    cold = [x for x in replay_runs(r) if x["cache"] == "cold"]
    # preconditions: the device behind the runs is the capped loop device, and the cap held
    assert cold and all(x["disk"] and x["disk"]["device"] == os.path.basename(device) for x in cold)
    per_file = min(ios_per_file(x) for x in cold)  # the cheapest way of reading a file the runs measured
    assert 0.95 <= per_file <= 1.5, per_file
    allowed = IOPS_CAP / per_file  # files/s the cap allows
    assert max(x["samples_per_s"] for x in cold) <= 1.1 * allowed
    assert fio_cold(r) and max(fio_cold(r)) <= 1.1 * allowed
    # the verdict
    v = r["verdict"]
    assert all(x["valid"] is True and x["invalid_reason"] is None for x in replay_runs(r))
    assert v["limit"] == "storage", v["text"]
    assert v["storage_samples_per_s"] == pytest.approx(allowed, rel=0.10)
    assert v["storage_samples_per_s"] >= max(fio_cold(r)) * 0.999  # the best of fio and the loader runs
    assert v["rate_per_gpu"] == 400 and v["au_target"] == pytest.approx(0.9)
    storage_answer_holds(v)
    assert 1 <= v["storage_gpus_fed"] <= 3  # ~950 / 360: 2
    # this client's answer comes from its training runs: a count that reached the target beside one that did not
    train = {x["gpus"]: x["au"] for x in r["runs"] if x.get("gpus") and x["valid"]}
    assert v["gpus_fed_confirmed"] and v["client_gpus_fed"] in train and v["client_gpus_fed"] + 1 in train, train
    assert train[v["client_gpus_fed"]] >= 0.9 > train[v["client_gpus_fed"] + 1] or v["client_gpus_range"]


@pytest.mark.root
@pytest.mark.testbed
@needs_root
def test_a_client_pinned_to_one_cpu_is_the_limit_and_not_the_storages(pinned):
    """The buyer's case: this client, half of one CPU and decoding, feeds no GPU of 400 samples/s (Pillow on one
    core: 200-425 samples/s on the hosts met, half of it here), while the storage (fio, in the same quota, reads
    up to the cap of 3,000 IO/s) gives several GPUs' worth: the storage's answer comes first and is not 0.
    Measured: decode 176-212 samples/s in the quota, fio at one job 2,959 files/s under the cap; ~30 s."""
    r, _ = pinned
    v = r["verdict"]
    assert r["host"]["cpus_usable"] == PINNED_CORES  # the quota is what iobench says it may use
    assert fio_cold(r) and v["storage_samples_per_s"] >= 2 * 0.9 * 400, v["text"]  # precondition
    assert v["storage_samples_per_s"] >= max(fio_cold(r)) * 0.999
    storage_answer_holds(v)
    assert v["storage_gpus_fed"] >= 2 and v["client_gpus_fed"] == 0 and v["limit"] == "client-cpu", v["text"]
    assert v["answer"].startswith("Yes: the storage feeds 1 GPU of 400 samples/s"), v["answer"]
    assert "its CPU is the limit" in v["answer"] and v["asked_client_fed"] is False, v["answer"]
    assert any("cores of a client for its input pipeline (decode included)" in line for line in v["evidence"])


@pytest.mark.root
@pytest.mark.testbed
def test_sshfs_with_added_latency_is_the_limit(tmp_path):
    """sshfs with 8 ms added each way (a bed of its own): the storage (the network path) is the limit; the client
    idles. Reader threads sweep far enough (16, 32, 64) that more readers give no more.
    The dataset is written on the server's side of the export (gen through sshfs takes ~10-20 ms a file).
    Why 8 ms: at 2 ms sshfs's own plateau (~600-870 files/s from 16 threads on) is the ssh stack's CPU (ssh, sshd,
    sshfs and the proxy on this host, the server's half included), and beside a CPU-bound neighbour (stress-ng --cpu
    1) the host was 90% busy, which the verdict rightly reads as this client's CPU. At 8 ms the plateau is the
    round trips': 228-236 files/s at 16, 32 and 64 threads with stress-ng --cpu 1 beside it (host 71-74% busy),
    238-240 without (host 24-25%), iobench 0.04-0.05 cores; 1,000 files are runs of ~4.2 s; ~30 s in all."""
    with testbed("sshfs", tmp_path / "bed", delay_ms=8) as mount:
        source = mount_source(mount) or ""  # root@127.0.0.1:/.../export
        assert ":" in source, source
        server_side = Path(source.split(":", 1)[1]) / "t-limits"
        server_side.mkdir(exist_ok=True)
        iobench("gen", "--mount", str(server_side), "--files", "1000", "--quiet", check=True)
        r, _ = run_cli(mount / "t-limits", tmp_path / "out", "--files", "1000", "--engine", "threads",
                       "--threads", "16,32,64", "--epochs", "1", "--no-metadata", "--cache", "cold", "--no-fio")
    cold = {x["concurrency"]: x for x in replay_runs(r) if x["cache"] == "cold"}
    # preconditions: more readers stopped giving more (the verdict's rule), and iobench was far from busy
    assert sorted(cold) == [16, 32, 64]
    assert cold[64]["samples_per_s"] <= RISING * max(cold[16]["samples_per_s"], cold[32]["samples_per_s"])
    assert all(x["cpu"]["iobench_cores"] < 0.5 * r["host"]["cpus"] for x in cold.values())
    v = r["verdict"]
    assert v["limit"] == "storage", v["text"]


def test_warm_decode_is_client_cpu(tmp_path):
    """Warm data, decoded and augmented on this host: the client CPU is the limit, not the storage.
    Measured (2 cores): 259-555 (1 worker) and 441-1,022 (2 workers) samples/s, decode p50 ~2 ms, read p50
    0.02-0.5 ms (a read includes waiting for a busy CPU); 5-12 s (800 files), 12 s at 400 on a host ~2 busy.
    400 files, not 800: the judgement is decode's time per sample against a read's, and whose CPU set the pace,
    which the count does not move while each run counts: 25 batches for 1 worker, 12.5 each for 2 (10 needed), a
    warm epoch under 0.5 s read again as passes, and 25 steps for the training run the default workload makes at
    1 GPU (11 needed); each of the three runs decodes every file (~2-3 ms of CPU each)."""
    r, _ = run_cli(tmp_path, tmp_path / "out", "--files", "400", *FAST, "--workers", "1,2", "--batch-size", "16",
                   "--cache", "warm", "--decode", "--no-fio")
    warm = [x for x in replay_runs(r) if x["cache"] == "warm"]
    # precondition: decoding, not reading, took the time
    assert warm and all(x["decode"] and x["decode_ms"]["p50"] > 2 * x["latency_ms"]["p50"] for x in warm)
    v = r["verdict"]
    assert v["limit"] == "client-cpu", v["text"]


@pytest.mark.root
@pytest.mark.testbed
@needs_root
def test_asked_gpus_fed_and_not_fed(xfs_data, tmp_path):
    """--gpus 2 on XFS capped at 1,000 IO/s: a consumer far slower than the storage is fed (the GPUs are the
    limit: "Yes:"); one far faster is not ("No:"), and the cap is the limit. Capped, the storage is the same
    from run to run; on the shared local disk a training run at 2 GPUs x 500 samples/s once delivered 884 of the
    1,000 samples/s asked (AU 0.904) right after replay runs at 3,000-3,400 files/s, as other runs' IO came.
    Measured capped, 1,000 files: replay 986-1,091 files/s, training at 2 x 150/s AU 0.98; 9-14 s both runs."""
    folder, device = xfs_data
    # 2 and 4 workers: both keep the throttle's queue full (one alone sometimes does not: 1 -> 2 then rises
    # > 10% and the verdict rightly cannot call the storage the limit)
    common = ("--files", str(XFS_SMALL), *FAST, "--workers", "2,4", "--batch-size", "16", "--cache", "cold",
              "--no-fio", "--gpus", "2")
    with blkio_cgroup("iobench-test-gpus", device, read_iops=IOPS_CAP) as cg:
        slow, _ = run_cli(folder, tmp_path / "slow", *common, "--rate", "150", cgroups=(cg,))
        fast, _ = run_cli(folder, tmp_path / "fast", *common, "--rate", "100000", cgroups=(cg,))
    # preconditions: the storage gave over twice what 2 GPUs at 150 samples/s take, and far less than 2 x 100,000
    assert max(x["samples_per_s"] for x in replay_runs(slow)) > 2 * 2 * 150
    assert max(x["samples_per_s"] for x in replay_runs(fast)) < 0.1 * 2 * 100_000
    v = slow["verdict"]
    assert v["gpus_asked"] == 2
    assert v["asked_fed"] is True, v["text"]
    assert v["limit"] == "gpu", v["text"]
    assert v["text"].startswith("Yes:"), v["text"]
    v = fast["verdict"]
    assert v["gpus_asked"] == 2
    assert v["asked_fed"] is False, v["text"]
    assert v["text"].startswith("No:"), v["text"]
    # not the GPUs: the cap (storage), or, where more readers still got more through it (the block layer merges
    # neighbouring small reads), the reader count; the limit this scenario is about is scenario 1's
    assert v["limit"] in ("storage", "input-pipeline"), v["text"]
    assert v["answer"].startswith("No: 2 GPUs of 100,000 samples/s need 180,000 samples/s; the storage gave "), \
        v["text"]


@pytest.mark.root
@pytest.mark.testbed
def test_the_advice_for_a_run_too_short_makes_a_run_that_counts(sshfs_delay_mount, tmp_path):
    """On sshfs with 2 ms each way (~850 files/s at 16 threads), 200 files last ~0.25 s: the run does not count,
    and the --files it advises, computed from the rate it measured, gives one that does. ~20 s."""
    source = mount_source(sshfs_delay_mount) or ""
    server_side = Path(source.split(":", 1)[1]) / "t-advice"
    server_side.mkdir(exist_ok=True)
    args = ("--engine", "threads", "--threads", "16", "--epochs", "1", "--no-metadata", "--cache", "cold", "--no-fio",
            "--size-dist", "fixed:8kB")
    iobench("gen", "--mount", str(server_side), "--files", "200", "--size-dist", "fixed:8kB", "--quiet", check=True)
    r, _ = run_cli(sshfs_delay_mount / "t-advice", tmp_path / "short", "--files", "200", *args)
    assert not any(x["valid"] for x in replay_runs(r)), r["verdict"]["text"]  # precondition: under 0.5 s
    advised = r["verdict"]["answer"].split("--files ")[1].split(" ")[0]
    iobench("gen", "--mount", str(server_side), "--files", advised.replace(",", ""), "--size-dist", "fixed:8kB",
            "--quiet", check=True)
    again, _ = run_cli(sshfs_delay_mount / "t-advice", tmp_path / "again", "--files", advised.replace(",", ""), *args)
    assert all(x["valid"] for x in replay_runs(again)), again["verdict"]["text"]
    assert again["verdict"]["storage_samples_per_s"] is not None


@pytest.mark.root
@pytest.mark.testbed
@needs_root
def test_compare_orders_the_storages_by_their_figure_not_by_their_clients(capped, pinned, tmp_path):
    """The storage-limited bed (capped: its storage feeds ~2 GPUs of 400 samples/s) and the client-limited one
    (pinned: this client feeds none, its storage ~8): `compare` names the one whose storage feeds the most, though
    its client fed the fewest."""
    (c, c_out), (p, p_out) = capped, pinned
    assert p["verdict"]["client_gpus_fed"] < c["verdict"]["client_gpus_fed"]  # precondition: the clients' order
    proc = iobench("compare", str(c_out), str(p_out), "--name", "capped", "--name", "fast", "--json", "-", "--md",
                   str(tmp_path / "c.md"))
    assert proc.returncode == 0, proc.stderr
    headline = json.loads(proc.stdout)["headline"]
    assert headline.startswith(f"fast's storage feeds the most GPUs from one client: "
                               f"{p['verdict']['storage_gpus_fed']} (against capped: "
                               f"{c['verdict']['storage_gpus_fed']})"), headline
