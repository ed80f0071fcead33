"""The raw baseline for objects, in fio's role: the AWS CRT's own S3 client (awscrt, native C: its event loop, HTTP
and signing outside Python) GETting every key of a list, each once, whole, with N requests in flight.

Run as a program in a process of its own (``python -m iobench.s3.raw --bucket B --in-flight N --keys FILE ...``), so
that its CPU is its own and a server that stops answering is ended by killing it (phases/raw_objects.py); it prints
one JSON document, or on a failed GET one line on stderr and exit 1 (docs/s3.md, "The raw baseline"). The CRT's
retries are off: a throttled answer is counted and the GET sent again after the server's pause, as iobench's readers
do (sources/s3.py), so the baseline never hides a throttling server; a key throttled `--give-up` seconds ends it."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.parse
from typing import Any

from iobench.s3.clients import crt_address, pause, retry_after, versions

NAME = "awscrt"


def version() -> str | None:
    """awscrt's version, or None where it is not installed (its package's metadata: the library is not loaded)."""
    return versions().get(NAME)


def _percentiles(ns: list[int]) -> dict[str, float]:
    """p50, p90, p99, p999, max and mean in ms (nearest rank), as fio's latencies are given."""
    xs = sorted(ns)
    if not xs:
        return {}
    at = {k: xs[min(len(xs) - 1, max(0, int(round(q * len(xs))) - 1))] / 1e6
          for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999))}
    return {**at, "max": xs[-1] / 1e6, "mean": sum(xs) / len(xs) / 1e6}


PROGRESS_S = 0.2  # how often the bytes received so far are written to --progress
THROTTLED = (503, 429)


def _report(path: str, got: list[int], stop: threading.Event) -> None:
    """Every PROGRESS_S, the bytes received so far into `path` (what the parent watches for a stall: the CRT's
    event loops read their own wake-ups, so /proc's counters move while a frozen server sends nothing)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while not stop.wait(PROGRESS_S):
            os.pwrite(fd, f"{sum(got):20d}\n".encode(), 0)
    finally:
        os.close(fd)


def read_all(keys: list[str], in_flight: int, *, bucket: str, endpoint: str | None, region: str,
             path_style: bool, progress: str | None = None, give_up_s: float = 45.0) -> dict[str, Any]:
    """GET every key once with `in_flight` requests at a time; what it measured (see the module's docstring).
    `progress`: a file to write the bytes received so far to, every PROGRESS_S; `give_up_s`: a key throttled this
    long ends it."""
    from awscrt import auth, http, io, s3

    host, base, tls = crt_address(endpoint, bucket, region, path_style)
    elg = io.EventLoopGroup()
    boot = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
    signing = s3.create_default_s3_signing_config(
        region=region, credential_provider=auth.AwsCredentialsProvider.new_default_chain(boot))
    client = s3.S3Client(bootstrap=boot, region=region, signing_config=signing,
                         tls_mode=s3.S3RequestTlsMode.ENABLED if tls else s3.S3RequestTlsMode.DISABLED,
                         max_active_connections_override=in_flight, throughput_target_gbps=100.0,
                         retry_config=s3.S3RetryConfig(retry_mode=s3.S3RetryMode.NONE))
    n = len(keys)
    # per key: its first GET sent, the answering GET sent, its first byte, its last, bytes, throttled answers
    started, sent, first, total, got, throttles = [0] * n, [0] * n, [0] * n, [0] * n, [0] * n, [0] * n
    lock, finished = threading.Lock(), threading.Event()
    state: dict[str, Any] = {"next": 0, "left": n, "error": None}
    live: dict[int, Any] = {}  # the requests in flight (the CRT ends one whose Python object goes)
    clock = time.perf_counter_ns

    def start() -> None:
        with lock:
            i = state["next"]
            if i >= n or state["error"] is not None:
                return
            state["next"] = i + 1
        started[i] = clock()
        send(i)

    def send(i: int) -> None:
        path = base + urllib.parse.quote(keys[i], safe="/~")
        request = http.HttpRequest("GET", path, http.HttpHeaders([("Host", host)]))

        def on_headers(status_code: int, headers: Any, **_: Any) -> None:
            if status_code < 300:
                first[i] = clock()

        def on_body(chunk: bytes, offset: int, **_: Any) -> None:
            got[i] += len(chunk)

        def on_done(error: BaseException | None = None, status_code: int | None = None,
                    error_body: bytes | None = None, error_headers: Any = None, **_: Any) -> None:
            now = clock()
            throttled = error is not None and (status_code in THROTTLED or "SLOW_DOWN" in getattr(error, "name", ""))
            with lock:
                live.pop(i, None)
                if throttled and (now - started[i]) / 1e9 < give_up_s and state["error"] is None:
                    throttles[i] += 1  # counted, and the GET sent again after the server's pause
                    got[i] = 0
                    timer = threading.Timer(pause(retry_after(error_headers), throttles[i]), send, (i,))
                    timer.daemon = True
                    timer.start()
                    return
                total[i] = now
                if error is not None and state["error"] is None:
                    why = (error_body or b"").decode("utf-8", "replace").split("<Code>")[-1].split("<")[0]
                    line = f"GET {keys[i]}: {status_code or ''} {why or error}".strip()
                    state["error"] = line if not throttled else (
                        f"{line}: the server is throttling requests ({throttles[i] + 1} answers over "
                        f"{(now - started[i]) / 1e9:.1f} s)")
                state["left"] -= 1
                if state["left"] == 0 or state["error"] is not None:
                    finished.set()
            start()

        sent[i] = clock()
        handle = client.make_request(type=s3.S3RequestType.GET_OBJECT, request=request, on_headers=on_headers,
                                     on_body=on_body, on_done=on_done)
        with lock:
            if total[i] == 0:
                live[i] = handle

    if progress is not None:
        threading.Thread(target=_report, args=(progress, got, finished), daemon=True).start()
    cpu0, t0 = os.times(), clock()
    for _ in range(min(in_flight, n)):
        start()
    if n:
        finished.wait()
    t1, cpu1 = max(total) if n else clock(), os.times()
    if state["error"] is not None:
        raise RuntimeError(state["error"])
    return {"tool": NAME, "version": version(), "in_flight": in_flight, "requests": n, "bytes": sum(got),
            "seconds": (t1 - t0) / 1e9,
            "cpu_s": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
            "latency_ms": _percentiles([b - a for a, b in zip(started, total, strict=True)]),
            "first_byte_ms": _percentiles([b - a for a, b in zip(sent, first, strict=True) if b]),
            "throttled": sum(throttles)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m iobench.s3.raw", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--endpoint", default=None, help="scheme://host[:port]; none: AWS's own for the region")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--path-style", action="store_true")
    ap.add_argument("--in-flight", type=int, required=True)
    ap.add_argument("--keys", required=True, help="a file of the keys to GET, one a line")
    ap.add_argument("--progress", default=None, help="a file to write the bytes received so far to")
    ap.add_argument("--give-up", type=float, default=45.0, help="seconds a key may be throttled before it ends the run")
    args = ap.parse_args(argv)
    with open(args.keys, encoding="utf-8") as f:
        keys = [line.rstrip("\n") for line in f if line.strip()]
    try:
        out = read_all(keys, args.in_flight, bucket=args.bucket, endpoint=args.endpoint, region=args.region,
                       path_style=args.path_style, progress=args.progress, give_up_s=args.give_up)
    except Exception as exc:  # one line: the parent names the point and keeps what was measured
        print(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
