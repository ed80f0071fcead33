"""The GPU-host check's own parts, where CI runs (no GPU): the real training job (scripts/train_imagefolder.py) on
the CPU, and the GPU-decode user pipeline (scripts/gpu_decode_pipeline.py) through `--pipeline FILE:FUNC`, which
decodes on the CPU without a GPU (docs/gpu-host.md ran both on an H200)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import iobench, make_dataset

from iobench.result import Result

pytest.importorskip("torchvision")

SCRIPTS = Path(__file__).parent.parent / "scripts"
FILES = 480  # 15 batches of 32: AU's 11 steps and more


@pytest.fixture(scope="module")
def mount(tmp_path_factory: pytest.TempPathFactory) -> Path:
    m = tmp_path_factory.mktemp("gpu-host")
    make_dataset(m, FILES, "fixed:8kB", classes=2)
    return m


def test_the_real_training_job_counts_its_images_and_busy_time(tmp_path):
    # 4 steps of 8 images: what is counted is the same at any batch, and a CPU training step costs by the image
    make_dataset(tmp_path, 32, "fixed:8kB", classes=2)
    root = next((tmp_path / "iobench-data").iterdir()) / "train"
    # one compute thread: torch's default pool (a thread per core) spun on the cores the parallel pass's other
    # workers use, doubling the job's CPU (14.8 -> 7.3 CPU-s here); what is counted does not depend on it
    proc = subprocess.run([sys.executable, str(SCRIPTS / "train_imagefolder.py"), str(root), "--model",
                           "mobilenet_v3_small", "--device", "cpu", "--workers", "1", "--batch-size", "8"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # 4 steps of 8; the first excluded from the window, as AU excludes it
    assert (out["steps"], out["images"]) == (4, 3 * 8)
    assert out["images_per_s"] == pytest.approx(out["images"] / out["wall_s"], rel=0.01)
    assert 0 < out["gpu_busy"] <= 1.0  # on the CPU the step's own time stands for the GPU's


def test_the_gpu_decode_pipeline_runs_as_a_users_pipeline(mount, tmp_path):
    spec = f"{SCRIPTS / 'gpu_decode_pipeline.py'}:loader"
    proc = iobench("run", "--mount", str(mount), "--files", str(FILES), "--size-dist", "fixed:8kB", "--classes", "2",
                   "--workers", "1", "--batch-size", "32", "--cache", "warm", "--no-fio", "--no-metadata", "--gpus",
                   "1", "--rate", "10000000", "--pipeline", spec, "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    runs = [r for r in Result.load(tmp_path / "out" / "result.json").runs if r.kind == "training"]
    assert runs and runs[0].pipeline == spec and runs[0].samples == FILES and runs[0].latency_ms is None
