"""The CLI as a user runs it: real subprocesses, real files, one-line errors."""

import fcntl
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import first_epoch_kept, iobench, make_dataset, needs_root, tree_hashes

from iobench.result import SCHEMA, Result


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str, code: int = 2) -> None:
    """One line on stderr; exit code 2 (usage) or 3 (the environment refused)."""
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("iobench: error:"), proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_run_end_to_end_writes_a_complete_result(tmp_path):
    out, extra = tmp_path / "out", tmp_path / "copy.json"
    proc = iobench("run", "--mount", str(tmp_path), "--files", "200", "--size-dist", "fixed:50kB",
                   "--engine", "threads", "--threads", "1,4", "--out", str(out), "--json", str(extra), check=True)
    assert "verdict:" in proc.stdout and "files/s" in proc.stdout
    raw = json.loads((out / "result.json").read_text())
    assert raw["schema"] == SCHEMA and raw["complete"] is True
    assert raw["mount"]["path"] and raw["mount"]["fstype"]
    assert raw["dataset"]["files"] == 200 and raw["dataset"]["bytes"] == 200 * 50_000
    runs = raw["runs"]
    assert [(r["concurrency"], r["cache"]) for r in runs] == [(1, "cold"), (1, "warm"), (4, "cold"), (4, "warm")]
    for r in runs:
        assert (r["source"], r["order"], r["engine"]) == ("files", "shuffled", "threads")
        # a warm epoch under the floor is read as several passes (answer/sizing): each counted
        assert r["passes"] >= 1 and (r["passes"] == 1 or r["cache"] == "warm")
        assert r["samples"] == 200 * r["passes"] and r["bytes"] == 200 * 50_000 * r["passes"]
        assert r["samples_per_s"] == pytest.approx(r["samples"] / r["seconds"], rel=0.01)
        assert r["mb_per_s"] == pytest.approx(r["bytes"] / r["seconds"] / 1e6, rel=0.01)
        lat = r["latency_ms"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    assert len({r["epoch"] for r in runs}) == 4
    assert Result.load(extra).verdict == Result.load(out / "result.json").verdict
    # the same mount again: the dataset is found and reused, not made anew
    again = iobench("run", "--mount", str(tmp_path), "--files", "200", "--engine", "threads", "--threads", "2",
                    "--cache", "warm", "--out", str(tmp_path / "o2"), check=True)
    assert "using the dataset iobench made earlier" in again.stderr
    assert "reusing the existing dataset" in again.stderr


def test_gen_prints_the_dataset_folder(tmp_path):
    proc = iobench("gen", "--mount", str(tmp_path), "--files", "30", "--size-dist", "uniform:4KiB-16KiB",
                   "--quiet", check=True)
    folder = Path(proc.stdout.strip().splitlines()[-1])
    assert folder.is_dir() and len(list(folder.glob("train/*/*.JPEG"))) == 30


def test_run_on_an_existing_image_tree(tmp_path, small_dataset):
    tree = tmp_path / "tree" / "cls"
    tree.mkdir(parents=True)
    for p in small_dataset.paths[:25]:
        shutil.copy(p, tree)
    out = tmp_path / "out"
    iobench("run", "--dataset", str(tree.parent), "--engine", "threads", "--threads", "2", "--out", str(out),
            check=True)
    r = Result.load(out / "result.json")
    assert r.dataset.files == 25 and not r.dataset.made_by_iobench
    assert r.runs[0].bytes == int(small_dataset.sizes[:25].sum())


@pytest.mark.parametrize("args, needle, code", [
    (["run", "--mount", "/nonexistent/mnt"], "does not exist", 3),
    (["gen", "--mount", "/nonexistent/mnt"], "does not exist", 3),
    (["run", "--threads", "0"], "--threads", 2),
    (["run", "--threads", "a,b"], "--threads", 2),
    (["run", "--cache", "lukewarm"], "--cache", 2),
    (["gen", "--size-dist", "gaussian"], "size distribution", 2),
    (["run", "--dataset", "/nonexistent/data"], "does not exist", 3),
])
def test_bad_input_is_one_line(args, needle, code, tmp_path):
    _one_line_error(iobench(*args, cwd=tmp_path), needle, code=code)


def test_mount_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    _one_line_error(iobench("run", "--mount", str(f)), "not a directory", code=3)


def test_dataset_without_images_and_with_a_fake_jpeg(tmp_path):
    (tmp_path / "empty").mkdir()
    _one_line_error(iobench("run", "--dataset", str(tmp_path / "empty")), "no images")
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "x.JPEG").write_text("hello")
    _one_line_error(iobench("run", "--dataset", str(tmp_path / "fake")), "is not an image")


@needs_root
def test_read_only_mount_refuses_gen(tmp_path):
    src, ro = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    subprocess.run(["mount", "--bind", str(src), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        _one_line_error(iobench("gen", "--mount", str(ro), "--files", "5"), "read-only", code=3)
    finally:
        subprocess.run(["umount", str(ro)], check=True)


@needs_root
def test_permission_denied(tmp_path):
    """Root without CAP_DAC_OVERRIDE is refused like any user by a folder it may not write."""
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) not installed")
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chown(locked, 12345, 12345)
    locked.chmod(0o500)
    proc = subprocess.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--",
                           sys.executable, "-m", "iobench.cli", "gen", "--mount", str(locked), "--files", "5"],
                          capture_output=True, text=True, timeout=120)
    _one_line_error(proc, "permission denied", code=3)


def test_ctrl_c_keeps_what_was_measured(tmp_path):
    out = tmp_path / "out"
    iobench("gen", "--mount", str(tmp_path), "--files", "300", "--size-dist", "fixed:20kB", "--quiet", check=True)
    proc = subprocess.Popen([sys.executable, "-m", "iobench.cli", "run", "--mount", str(tmp_path),
                             "--engine", "threads", "--threads", "1", "--cache", "warm", "--epochs", "1000",
                             "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first_epoch_kept(out, proc)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()  # a run that did not stop is not left reading
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    r = Result.load(out / "result.json")
    assert not r.complete and len(r.runs) >= 1
    whole = sum(x.complete for x in r.runs)  # the epoch cut short, when Ctrl-C came inside one, said as partial
    assert re.fullmatch(rf"iobench: interrupted: kept {whole} measured epoch{'s' if whole != 1 else ''}( and the "
                        rf"partial one it stopped in \(complete: false\))? in {re.escape(str(out / 'result.json'))}",
                        err.strip().splitlines()[-1]), err
    assert ("partial" in err.strip().splitlines()[-1]) == (whole < len(r.runs))
    assert all(x.complete for x in r.runs[:-1])
    assert sum(x.samples for x in r.runs) > 0


@pytest.fixture(scope="module")
def fio_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run with its fio baseline at 1 and 3 jobs, cold and warm (the result's folder), read by the tests of the
    baseline's points and of fio's own JSON kept beside them."""
    if shutil.which("fio") is None:
        pytest.skip("fio not installed (scripts/test installs it)")
    mount = tmp_path_factory.mktemp("fio-run")
    out = mount / "out"
    iobench("run", "--mount", str(mount), "--files", "150", "--size-dist", "uniform:8kB-64kB", "--engine", "threads",
            "--threads", "1,3", "--out", str(out), check=True)
    return out


def test_fio_baseline_and_efficiency_at_equal_concurrency_and_cache(fio_run):
    r = Result.load(fio_run / "result.json")
    assert r.baseline is not None and r.baseline.tool == "fio" and r.baseline.tool_version
    fio = {(b.concurrency, b.cache): b for b in r.baseline.points}
    assert set(fio) == {(1, "cold"), (1, "warm"), (3, "cold"), (3, "warm")}
    for b in fio.values():
        loops = b.samples // 150  # warm: fio loops over the files for ~1 s; cold: once (a second loop is not cold)
        assert b.samples == 150 * loops and b.bytes == r.dataset.bytes * loops  # every file, once per loop, real bytes
        assert loops == 1 if b.cache == "cold" else loops >= 1
        assert b.cache == "warm" or (b.repeats == 2 and len(b.runs_samples_per_s) == 2)  # cold: the best of two
        assert b.samples_per_s == pytest.approx(b.samples / b.seconds, rel=0.01)
        assert "read_iolog" in b.program
    for run in r.runs:
        ref = fio[(run.concurrency, run.cache)]
        assert run.efficiency == pytest.approx(run.samples_per_s / ref.samples_per_s, abs=1e-3)
    assert [m.cache for m in r.metadata] == ["cold", "warm"]
    assert all(m.files == 150 for m in r.metadata)


def test_without_fio_the_run_goes_on_and_says_how_to_install(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path / "empty-bin")}
    out = tmp_path / "out"
    proc = iobench("run", "--mount", str(tmp_path), "--files", "40", "--size-dist", "fixed:8kB", "--engine", "threads",
                   "--threads", "2",
                   "--out", str(out), env=env, check=True)
    assert "apt-get install -y fio" in proc.stderr
    r = Result.load(out / "result.json")
    assert r.baseline.tool_version is None and r.baseline.points == [] and "apt-get install" in r.baseline.note
    assert r.complete and all(x.efficiency is None for x in r.runs)
    _one_line_error(iobench("fio", "--mount", str(tmp_path), env=env), "apt-get install -y fio")


def test_dataloader_engine_run_records_workers_and_decode(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "out"
    iobench("run", "--mount", str(tmp_path), "--files", "160", "--size-dist", "fixed:40kB", "--engine", "dataloader",
            "--workers", "0,2", "--batch-size", "8", "--no-metadata", "--out", str(out), check=True)
    r = Result.load(out / "result.json")
    assert [(x.engine, x.workers, x.concurrency, x.batch_size) for x in r.runs if x.gpus is None] == [
        ("dataloader", 0, 1, 8), ("dataloader", 0, 1, 8), ("dataloader", 2, 2, 8), ("dataloader", 2, 2, 8)]
    assert all(x.samples == 160 * x.passes and x.bytes == 160 * 40_000 * x.passes and x.decode_ms is None
               for x in r.runs)
    # 160 files in batches of 8 over 2 workers, read cold in well under 0.5 s: too short to mean anything (a cold
    # epoch is not lengthened by passes; a warm one is, answer/sizing)
    assert all(not x.valid and x.invalid_reason for x in r.runs if x.cache == "cold" and x.gpus is None)
    assert all(x.passes > 1 for x in r.runs if x.cache == "warm" and x.gpus is None)
    if r.baseline.tool_version:  # workers=0 reads in one process: compared with one fio job
        assert {(b.concurrency, b.cache) for b in r.baseline.points} == {(1, "cold"), (1, "warm"), (2, "cold"),
                                                                        (2, "warm")}
    dec = tmp_path / "dec"
    iobench("run", "--mount", str(tmp_path), "--files", "160", "--engine", "dataloader", "--workers", "1",
            "--batch-size", "16", "--decode", "--cache", "warm", "--no-fio", "--no-metadata", "--out", str(dec),
            check=True)
    d = Result.load(dec / "result.json").runs[0]
    # decoding a JPEG costs more than reading it warm
    assert d.decode and d.decode_ms is not None and d.decode_ms.p50 > d.latency_ms.p50


def test_decode_needs_the_dataloader_engine(tmp_path):
    _one_line_error(iobench("run", "--mount", str(tmp_path), "--engine", "threads", "--decode"), "--engine dataloader")


def test_gpus_and_workloads_are_listed():
    g = iobench("gpus", check=True).stdout
    assert "resnet50" in g and "h200" in g and "4,677.3" in g and "mlperf-storage" in g
    w = iobench("workloads", check=True).stdout
    names = ("imagenet-resnet50", "imagenet-vit-b16", "small-files-4k", "coco-detection", "mlperf-storage-resnet50")
    for name in names:
        assert name in w


def test_gpu_rate_says_what_it_needs_without_a_gpu():
    proc = iobench("gpu-rate", "--model", "resnet50")
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda and importlib.util.find_spec("torchvision"):
        assert proc.returncode == 0 and "training samples/s" in proc.stdout
    else:
        _one_line_error(proc, "torchvision" if not importlib.util.find_spec("torchvision") else "no CUDA GPU")


def test_cuda_consumer_says_what_is_missing(tmp_path):
    proc = iobench("run", "--mount", str(tmp_path), "--consumer", "cuda", "--engine", "threads")
    _one_line_error(proc, "--consumer cuda")
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available() and importlib.util.find_spec("torchvision"):
            pytest.skip("a GPU is here: the CUDA consumer is exercised by a GPU session, not this check")
        _one_line_error(iobench("run", "--mount", str(tmp_path), "--consumer", "cuda", "--engine", "dataloader"),
                        "--consumer cuda")


INAPPLICABLE = [
    (("--threads", "1"), "--threads sets the thread engine's readers"),  # the default workload's engine: DataLoader
    (("--engine", "threads", "--workers", "2"), "--workers applies to the DataLoader engine"),
    (("--engine", "threads", "--batch-size", "8"), "--batch-size applies to the DataLoader engine"),
    (("--engine", "threads", "--prefetch-factor", "4"), "--prefetch-factor applies to the DataLoader engine"),
    (("--dataset", ".", "--files", "10"), "--files shapes or places a generated dataset"),
    (("--dataset", ".", "--size-dist", "fixed:4kB"), "--size-dist shapes or places"),
    (("--dataset", ".", "--classes", "3"), "--classes shapes or places"),
    (("--dataset", ".", "--mount", "."), "--mount shapes or places"),
    (("--no-metadata", "--scale-files", "1000"), "--scale-files projects the metadata phase"),
    (("--rate", "100", "--consumer", "cuda"), "--rate does not apply"),
    (("--mitigations", "--cache", "warm"), "--mitigations are measured cold"),
]


@pytest.mark.parametrize(("args", "message"), INAPPLICABLE, ids=[" ".join(a) for a, _ in INAPPLICABLE])
def test_an_option_that_does_not_apply_is_refused_before_measuring(tmp_path, args, message):
    proc = iobench("run", *args, cwd=tmp_path)
    if "--consumer" in args and "CUDA" in proc.stderr:
        pytest.skip("checked after the CUDA check on a host without a GPU")
    _one_line_error(proc, message)
    assert not (tmp_path / "iobench-data").exists() and not (tmp_path / "reports").exists()


def test_the_same_options_apply_with_the_engine_they_belong_to(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "out"
    iobench("run", "--mount", str(tmp_path), "--files", "64", "--size-dist", "fixed:4kB", "--engine", "threads",
            "--threads", "1,2", "--cache", "cold", "--no-fio", "--no-metadata", "--rate", "100", "--out", str(out),
            check=True)
    r = Result.load(out / "result.json")
    assert [x.concurrency for x in r.runs] == [1, 2] and {x.engine for x in r.runs} == {"threads"}
    assert r.settings.concurrency == [1, 2]
    # --rate alone is "a GPU consuming 100 samples/s", not the workload's H200 training ResNet-50
    s = r.settings
    assert (s.gpu, s.model, s.rate_kind, s.rate_per_gpu) == (None, None, "given", 100)


def test_run_keeps_fios_own_json_beside_the_result(fio_run):
    out = fio_run  # the baseline's run above: one JSON per point, named by its jobs and cache state
    kept = sorted((out / "fio").glob("*.json"))
    assert [p.name for p in kept] == ["fio-1jobs-cold.json", "fio-1jobs-warm.json", "fio-3jobs-cold.json",
                                      "fio-3jobs-warm.json"]
    for p in kept:  # fio's own --output-format=json document, for fio-plot and other fio tooling
        doc = json.loads(p.read_text())
        assert "fio version" in doc and isinstance(doc["jobs"], list) and doc["jobs"]
        assert p.with_suffix(".fio").read_text().startswith("; iobench fio baseline")
    r = Result.load(out / "result.json")
    assert r.baseline is not None and r.baseline.points
    for b in r.baseline.points:
        assert b.json_file == f"fio/fio-{b.concurrency}jobs-{b.cache}.json" and (out / b.json_file).is_file()
        assert json.loads((out / b.json_file).read_text())["jobs"][0]["read"]["io_bytes"] == b.bytes


def test_repeat_measures_the_sweep_again_and_is_recorded(tmp_path):
    out = tmp_path / "out"
    iobench("run", "--mount", str(tmp_path), "--files", "64", "--size-dist", "fixed:4kB", "--engine", "threads",
            "--threads", "1", "--cache", "cold", "--epochs", "2", "--repeat", "2", "--no-fio", "--no-metadata",
            "--out", str(out), check=True)
    r = Result.load(out / "result.json")
    assert r.settings.repeat == 2 and [(x.repeat, x.epoch) for x in r.runs] == [(0, 1), (0, 2), (1, 3), (1, 4)]
    _one_line_error(iobench("run", "--mount", str(tmp_path), "--repeat", "0"), "--repeat must be >= 1")


def test_dataset_with_white_space_in_names_runs_and_fio_reads_the_others(tmp_path):
    if shutil.which("fio") is None:
        pytest.skip("fio not installed (scripts/test installs it)")
    from PIL import Image

    for folder, name in (("class a", "img {i}.jpg"), ("b", "img{i}.jpg")):
        (tmp_path / "ds" / folder).mkdir(parents=True)
        for i in range(20):
            Image.new("RGB", (32, 32), (i, 2 * i, 3 * i)).save(tmp_path / "ds" / folder / name.format(i=i))
    out = tmp_path / "out"
    iobench("run", "--dataset", str(tmp_path / "ds"), "--engine", "threads", "--threads", "1", "--no-metadata",
            "--cache", "cold", "--out", str(out), check=True)
    r = Result.load(out / "result.json")
    assert r.complete and r.runs[0].samples == 40  # the loader read every file, spaces or not
    assert "fio cannot replay 20 of the 40 paths" in r.baseline.note and r.baseline.points[0].samples == 20


def test_a_negative_seed_is_refused_in_one_line(tmp_path):
    proc = iobench("run", "--mount", str(tmp_path), "--seed", "-1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "--seed" in proc.stderr


# ---- standard output that fails, and stop signals at any moment ------------------------------------------------

SMALL_RUN = ["--files", "40", "--size-dist", "fixed:4kB", "--classes", "1", "--engine", "threads", "--threads", "1",
             "--cache", "warm", "--no-fio", "--no-metadata"]


def _run_with_stdout(tmp_path: Path, stdout, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "iobench.cli", "run", "--mount", str(tmp_path), *SMALL_RUN,
                             "--out", str(tmp_path / "out"), "--json", str(tmp_path / "r.json"), *extra],
                            stdout=stdout, stderr=subprocess.PIPE, text=True)


def _finished_and_kept(tmp_path: Path, before: dict[str, str]) -> None:
    """The run did all its work although stdout failed: result, reports, the --json file; the dataset untouched."""
    r = Result.load(tmp_path / "out" / "result.json")
    assert r.complete and r.verdict is not None
    assert (tmp_path / "out" / "report.html").is_file() and (tmp_path / "out" / "report.md").is_file()
    assert Result.load(tmp_path / "r.json").created == r.created
    assert {k: v for k, v in tree_hashes(tmp_path).items() if k in before} == before


def test_a_full_stdout_is_the_outputs_fault_not_the_storages(tmp_path):
    make_dataset(tmp_path, 40, "fixed:4kB", classes=1)
    before = tree_hashes(tmp_path)
    with open("/dev/full", "w") as full:
        proc = _run_with_stdout(tmp_path, full)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1] == "iobench: error: cannot write to standard output: No space left on device"
    _finished_and_kept(tmp_path, before)


def test_a_reader_that_left_ends_the_output_quietly_with_141(tmp_path):
    """`iobench run | head -1` made certain: the pipe's reading end is closed before iobench writes a line."""
    make_dataset(tmp_path, 40, "fixed:4kB", classes=1)
    before = tree_hashes(tmp_path)
    r, w = os.pipe()
    proc = _run_with_stdout(tmp_path, w)
    os.close(w)
    os.close(r)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err  # 128 + SIGPIPE, as a tool that SIGPIPE ends
    assert "Traceback" not in err and "error" not in err, err
    _finished_and_kept(tmp_path, before)


def _caught(pid: int, sig: int) -> bool:
    """The process has a handler for `sig` (its SigCgt mask in /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(int(ln.split()[1], 16) for ln in f if ln.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(mask & (1 << (sig - 1)))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM], ids=lambda s: s.name)
def test_a_stop_signal_while_still_importing_is_one_line(tmp_path, sig):
    """Sent the moment iobench's first handler is set (SIGHUP caught: Python alone catches only SIGINT), while
    the commands are still being imported (half a second or more)."""
    proc = subprocess.Popen([sys.executable, "-m", "iobench.cli", "run", "--mount", str(tmp_path), *SMALL_RUN,
                             "--out", str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 30
    while not _caught(proc.pid, signal.SIGHUP) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.001)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    said = "interrupted" if sig == signal.SIGINT else f"terminated ({sig.name})"
    assert (proc.returncode, err, out) == (128 + sig, f"iobench: {said} while starting: nothing was done\n", "")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_after_the_verdict_leaves_the_run_finished(tmp_path, sig):
    """The JSON goes to stdout last (`--json -`), into a pipe of one page the test does not read yet: iobench is
    held writing it, after the verdict, when the signal comes."""
    make_dataset(tmp_path, 40, "fixed:4kB", classes=1)
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen([sys.executable, "-m", "iobench.cli", "run", "--mount", str(tmp_path), *SMALL_RUN,
                             "--out", str(tmp_path / "out"), "--json", "-"], stdout=w, stderr=subprocess.PIPE,
                            text=True)
    os.close(w)
    err = ""
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            err += line
            if line.startswith("verdict:"):
                break
        time.sleep(0.5)  # the JSON (tens of kB) fills the pipe: iobench waits in write()
        assert proc.poll() is None, err
        proc.send_signal(sig)
        with os.fdopen(r) as f:
            out = f.read()
        err += proc.stderr.read()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    said = "interrupted" if sig == signal.SIGINT else f"terminated ({sig.name})"
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert err.splitlines()[-1] == f"iobench: {said} after the run had finished: its result is complete"
    assert Result.model_validate_json(out).complete and Result.load(tmp_path / "out" / "result.json").complete
