"""Mitigations on object storage, on the real SeaweedFS bed with its FUSE view (s3_bed_fuse: `weed mount` of the same
bucket): `pack --url` uploads tar shards with their exact sizes, both shard sources (a ranged GET per sample, a GET
per shard streamed) read every sample once per epoch through both engines, the mitigations table on --url, objects
vs the FUSE view in one run, and clean removes what iobench wrote and keeps a foreign key."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import numpy as np
import pytest
from conftest import iobench

from iobench import store
from iobench.engines.threads import ThreadEngine
from iobench.record.order import epoch_order
from iobench.record.recorder import EpochRecorder
from iobench.result import Result
from iobench.s3.url import parse_url
from iobench.sources.pack_tar import plan_tar

pytestmark = pytest.mark.testbed

FILES = 400
SHAPE = ["--files", str(FILES), "--size-dist", "uniform:4KiB-24KiB", "--classes", "2"]
SHARD = 1024 * 1024  # ~5 shards of the ~5.5 MB dataset: streams to deal to the readers


@pytest.fixture(scope="module")
def packed(s3_bed_fuse) -> tuple[str, str]:
    """(prefix, dataset key prefix): a dataset of this module's own, uploaded by gen and packed by pack --url."""
    prefix = f"m-{uuid.uuid4().hex[:8]}"
    url = f"s3://{s3_bed_fuse.bucket}/{prefix}"
    gen = iobench("gen", "--url", url, *SHAPE, "--quiet", env=s3_bed_fuse.env(), timeout=300)
    assert gen.returncode == 0, gen.stderr
    pack = iobench("pack", "--url", url, *SHAPE, "--shard-size", "1MiB", "--quiet", env=s3_bed_fuse.env(),
                   timeout=300)
    assert pack.returncode == 0, pack.stderr
    assert "in objects, made in" in pack.stdout, pack.stdout
    return prefix, gen.stdout.strip().split(f"s3://{s3_bed_fuse.bucket}/", 1)[1]


def _listed(bed, prefix: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for page in bed.boto3().get_paginator("list_objects_v2").paginate(Bucket=bed.bucket, Prefix=prefix):
        found.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return found


def _manifest(bed, top: str, client: str = "crt"):
    for k, v in bed.env().items():  # the in-process sources read the bed as the subprocesses do
        if k.startswith("AWS_"):
            import os

            os.environ[k] = v
    return store.home_of(parse_url(f"s3://{bed.bucket}/{top}", endpoint=bed.endpoint, client=client)).manifest()


def test_pack_url_uploads_the_shards_with_their_exact_sizes(s3_bed_fuse, packed) -> None:
    _, top = packed
    pack = f"{top}/packed/tar-1MiB/"
    keys = _listed(s3_bed_fuse, pack)
    m = _manifest(s3_bed_fuse, top)
    plan = plan_tar(m.sizes, SHARD)
    shards = {f"{pack}shard-{s:06d}.tar": size for s, size in enumerate(plan.shard_bytes)}
    assert len(shards) > 2
    assert {k: v for k, v in keys.items() if k.endswith(".tar")} == shards
    c = s3_bed_fuse.boto3()
    marker = json.loads(c.get_object(Bucket=s3_bed_fuse.bucket, Key=f"{pack}iobench-pack.json")["Body"].read())
    assert marker["status"] == "complete" and marker["params"]["shard_size"] == SHARD
    index = np.load(io.BytesIO(c.get_object(Bucket=s3_bed_fuse.bucket, Key=f"{pack}index.npy")["Body"].read()))
    assert (index[:, 2] == m.sizes).all() and (index[:, 1] == plan.offset).all()
    # the member at its offset is the object's bytes
    first = c.get_object(Bucket=s3_bed_fuse.bucket, Key=m.paths[7])["Body"].read()
    shard = f"{pack}shard-{index[7, 0]:06d}.tar"
    got = c.get_object(Bucket=s3_bed_fuse.bucket, Key=shard,
                       Range=f"bytes={index[7, 1]}-{index[7, 1] + index[7, 2] - 1}")["Body"].read()
    assert got == first


@pytest.mark.parametrize("client", ["crt", "boto3"])
def test_both_shard_sources_read_every_sample_once_per_epoch(s3_bed_fuse, packed, client: str) -> None:
    _, top = packed
    m = _manifest(s3_bed_fuse, top, client)
    for stream in (False, True):
        src = store.source("tar", m, stream=stream)
        for epoch in (1, 2):
            order = src.stream_order(0, epoch, readers=4) if stream else epoch_order("shuffled", len(m), 0, epoch)
            rec = EpochRecorder(len(order), 4)
            ThreadEngine(4, io_timeout_s=30.0).epoch(src, order, rec)
            assert rec.read_mask().all()
            assert sorted(order.tolist()) == list(range(FILES))  # every sample once
            assert (rec.nbytes == m.sizes[order]).all() and int(rec.nbytes.sum()) == int(m.sizes.sum())
            gets, first, whole = src.requests(order, rec)
            assert gets == (len(src.shard_keys) if stream else FILES)
            assert 0 < first["p50"] <= whole["p50"]


def test_mitigations_on_objects_and_the_fuse_view_in_one_run(s3_bed_fuse, packed, tmp_path: Path) -> None:
    prefix, top = packed
    out = tmp_path / "r"
    proc = iobench("run", "--url", f"s3://{s3_bed_fuse.bucket}/{prefix}", "--mount", str(s3_bed_fuse.mount), *SHAPE,
                   "--no-fio", "--engine", "dataloader", "--workers", "2", "--batch-size", "16", "--cache", "cold",
                   "--epochs", "1", "--no-metadata", "--mitigations", "--out", str(out),
                   env={**s3_bed_fuse.env(), "COLUMNS": "250"},
                   cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    r = Result.load(out / "result.json")
    names = [m.name for m in r.mitigations]
    assert names == ["baseline", "tar-range", "tar-stream", "in-flight-8"]  # the sweep's deepest --in-flight: 8
    total = sum(_listed(s3_bed_fuse, f"{top}/train/").values())
    for run in r.runs:  # the sweep, the four mitigations and the two of the FUSE view: every sample, once
        assert run.complete and (run.samples, run.bytes) == (FILES, total), run.mitigation
    by = {m.name: m for m in r.mitigations}
    assert by["baseline"].requests == by["tar-range"].requests == by["in-flight-8"].requests == FILES
    deeper = next(x for x in r.runs if x.mitigation == "in-flight-8")
    assert (deeper.depth, deeper.in_flight) == (8, 16)  # the baseline's 2 workers, 8 GETs each
    shards = [k for k in _listed(s3_bed_fuse, f"{top}/packed/tar-1MiB/") if k.endswith(".tar")]
    # one GET per shard, each worker streaming its own; once a worker's shards run out the DataLoader still hands it
    # every other batch: each such batch of the other's stream is a GET of its own
    assert len(shards) > 2 and len(shards) <= (by["tar-stream"].requests or 0) < len(shards) + FILES // 16 // 2
    assert all(m.first_byte_ms and m.request_ms and m.first_byte_ms <= m.request_ms for m in r.mitigations)
    said = proc.stdout + proc.stderr
    assert "mitigations: cold" in said and "tar-stream" in said and "GETs" in said
    assert "Best mitigation:" in said or "No mitigation measured" in said
    f = r.fuse_view
    assert f is not None and f.fstype == "fuse.seaweedfs" and f.readers == 2
    files = next(x for x in r.runs if x.mitigation == "fuse-view")
    objects = next(x for x in r.runs if x.mitigation == "objects")
    assert (files.source, objects.source) == ("files", "objects")
    assert (f.files_samples_per_s, f.objects_samples_per_s) == (files.samples_per_s, objects.samples_per_s)
    assert f.ratio == pytest.approx(max(files.samples_per_s, objects.samples_per_s)
                                    / min(files.samples_per_s, objects.samples_per_s), rel=0.01)
    assert "objects vs files on the same storage" in said
    assert f"{f.faster} are" in said and "Objects vs files on the same storage" in said
    assert "Objects vs the FUSE view" in (out / "report.md").read_text()


def test_a_mount_that_is_not_the_bucket_is_refused_in_one_line(s3_bed_fuse, packed, tmp_path: Path) -> None:
    prefix, _ = packed
    proc = iobench("run", "--url", f"s3://{s3_bed_fuse.bucket}/{prefix}", "--mount", str(tmp_path), *SHAPE, "--no-fio",
                   "--engine", "threads", "--threads", "2", "--cache", "cold", "--no-metadata", "--out",
                   str(tmp_path / "r"), env=s3_bed_fuse.env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert "holds no copy of" in line and "FUSE mount of the same bucket" in line


def test_clean_removes_the_dataset_and_its_pack_and_keeps_a_foreign_key(s3_bed_fuse, packed) -> None:
    prefix, top = packed
    c = s3_bed_fuse.boto3()
    c.put_object(Bucket=s3_bed_fuse.bucket, Key=f"{prefix}/notes.txt", Body=b"mine")
    proc = iobench("clean", "--url", f"s3://{s3_bed_fuse.bucket}/{prefix}", "--yes", env=s3_bed_fuse.env(),
                   timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "objects" in proc.stdout, proc.stdout
    assert set(_listed(s3_bed_fuse, f"{prefix}/")) == {f"{prefix}/notes.txt"}  # nothing of iobench's: pack included


def test_a_fuse_view_with_a_missing_or_resized_file_is_refused(tmp_path: Path) -> None:
    from iobench.dataset import Manifest
    from iobench.dataset.paths import PathTable
    from iobench.errors import UserError
    from iobench.phases.objects import fuse_manifest

    loc = parse_url("s3://bkt/p", endpoint="http://127.0.0.1:1") / "ds"
    rel = ["train/a.JPEG", "train/b.JPEG"]
    m = Manifest(loc, PathTable.relative("p/ds", rel), np.array([3, 5]))
    top = tmp_path / "p" / "ds" / "train"
    top.mkdir(parents=True)
    (top / "a.JPEG").write_bytes(b"abc")
    with pytest.raises(UserError, match=r"b\.JPEG is missing"):
        fuse_manifest(m, str(tmp_path))
    (top / "b.JPEG").write_bytes(b"abcd")
    with pytest.raises(UserError, match="has 4 bytes, the object 5"):
        fuse_manifest(m, str(tmp_path))
    (top / "b.JPEG").write_bytes(b"abcde")
    got = fuse_manifest(m, str(tmp_path))
    assert got.root == tmp_path / "p" / "ds" and got.paths[1] == str(top / "b.JPEG")
