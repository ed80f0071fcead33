"""iobench against a second S3 server, Ceph's radosgw (the rgw bed: scripts/testbed up rgw): gen uploads a small
dataset, run with the default client reads every object once, clean removes it; the bed's identity without rights
is refused (reading and making a bucket), and the bed writes nothing outside its state dir.

Needs root (up installs radosgw, ceph-mon and ceph-osd with apt-get when missing); skips with up's reason
otherwise. Marked `rgw` and opt-in (tests/conftest.py): `pytest -m rgw tests/test_s3_rgw.py` or IOBENCH_RGW=1.
About 100 s on 2 busy cores: ~30 s bring the session bed up, the crash test brings up one of its own (~20 s).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from conftest import iobench
from testbed_fixtures import S3Bed, bed_state, procs_naming, run_testbed

from iobench.result import Result

pytestmark = [pytest.mark.testbed, pytest.mark.rgw]

FILES = 120
SHAPE = ["--files", str(FILES), "--size-dist", "uniform:4KiB-24KiB", "--classes", "2"]
# where the Ceph daemons write by default: the bed points every path into its state dir instead
SYSTEM_DIRS = ("/etc/ceph", "/var/lib/ceph", "/var/log/ceph", "/run/ceph")
CEPH_DAEMONS = {"ceph-mon", "ceph-osd", "radosgw"}


def _keys(bed: S3Bed, prefix: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for page in bed.boto3().get_paginator("list_objects_v2").paginate(Bucket=bed.bucket, Prefix=prefix):
        found.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return found


def test_gen_run_clean_on_radosgw(rgw_bed: S3Bed, tmp_path: Path) -> None:
    url = f"s3://{rgw_bed.bucket}/t-{uuid.uuid4().hex[:8]}"
    gen = iobench("gen", "--url", url, *SHAPE, env=rgw_bed.env(), timeout=300)
    assert gen.returncode == 0, gen.stderr
    samples = {k: s for k, s in _keys(rgw_bed, url.split("/", 3)[3] + "/").items() if k.endswith(".JPEG")}
    assert len(samples) == FILES
    out = tmp_path / "r"
    run = iobench("run", "--url", url, *SHAPE, "--no-fio", "--engine", "threads", "--threads", "4", "--cache", "cold",
                  "--epochs", "1", "--no-metadata", "--out", str(out), "--quiet", env=rgw_bed.env(), cwd=tmp_path,
                  timeout=300)
    assert run.returncode == 0, run.stderr
    r = Result.load(out / "result.json")
    (one,) = r.runs
    assert one.source == "objects" and one.complete and one.measures == "storage"
    assert (one.samples, one.bytes) == (FILES, sum(samples.values()))  # every object read once, whole
    assert r.mount.family == "object" and r.mount.details["endpoint"] == rgw_bed.endpoint
    assert rgw_bed.secret_key not in (out / "result.json").read_text()
    clean = iobench("clean", "--url", url, "--yes", env=rgw_bed.env(), timeout=300)
    assert clean.returncode == 0, clean.stderr
    assert _keys(rgw_bed, url.split("/", 3)[3] + "/") == {}


def test_the_identity_without_rights_is_refused(rgw_bed: S3Bed) -> None:
    admin, nobody = rgw_bed.boto3(), rgw_bed.boto3(nobody=True)
    admin.put_object(Bucket=rgw_bed.bucket, Key="rights/k", Body=b"x")
    try:
        for call in (lambda: nobody.get_object(Bucket=rgw_bed.bucket, Key="rights/k"),
                     lambda: nobody.list_objects_v2(Bucket=rgw_bed.bucket),
                     lambda: nobody.create_bucket(Bucket=f"nobody-{uuid.uuid4().hex[:6]}")):
            with pytest.raises(ClientError) as e:
                call()
            assert e.value.response["Error"]["Code"] == "AccessDenied", e.value.response
    finally:
        admin.delete_object(Bucket=rgw_bed.bucket, Key="rights/k")


def test_the_bed_writes_nothing_outside_its_state_dir(rgw_bed: S3Bed) -> None:
    started = bed_state(rgw_bed.state)["started"]
    newer = [os.path.join(root, name)
             for top in SYSTEM_DIRS if os.path.isdir(top)
             for root, dirs, files in os.walk(top) for name in dirs + files
             if os.lstat(os.path.join(root, name)).st_mtime >= started]
    assert newer == []


def test_down_after_a_crashed_up(tmp_path: Path) -> None:
    """`up` dies right after the OSD is up (before radosgw): `down` still stops the monitor and the OSD and removes
    the state dir with the OSD's block file."""
    state_dir = tmp_path / "state"
    res = run_testbed("up", "rgw", "--state", str(state_dir), env={"IOBENCH_TESTBED_CRASH_AFTER": "osd"})
    if res.returncode != 70 and "not installed" in res.stderr:
        pytest.skip(res.stderr.strip().splitlines()[-1])
    assert res.returncode == 70, res.stderr
    assert not bed_state(state_dir)["complete"] and len(procs_naming(state_dir, CEPH_DAEMONS)) == 2
    assert run_testbed("status", "rgw", "--state", str(state_dir)).returncode == 3  # half-done is not up
    down = run_testbed("down", "rgw", "--state", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert procs_naming(state_dir, CEPH_DAEMONS) == [] and not state_dir.exists()
