"""The S3 clients iobench uses, made the same way everywhere, and what their failures mean in one line. boto3 lists,
heads, writes and deletes (the store); `--s3-client` picks the reading client (crt, s3torchconnector, boto3: docs/s3.md,
"Clients"). Each takes credentials, region and profile from the standard AWS chain in the process that makes it (a
DataLoader worker makes its own after fork); --io-timeout bounds a request."""

from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from iobench.errors import EnvironmentRefused, UserError

if TYPE_CHECKING:
    from iobench.s3.url import S3Location

DEFAULT_REGION = "us-east-1"  # what the SDKs sign with where nothing names a region (on-premises stores ignore it)
CONTROL_ATTEMPTS = 3  # listing, heads and writes: a retry there measures nothing


def region(loc: S3Location) -> str:
    """The region requests are signed for: the location's, else the profile's or AWS_REGION's, else us-east-1."""
    if loc.region:
        return loc.region
    import boto3

    try:
        return boto3.session.Session(profile_name=loc.profile).region_name or DEFAULT_REGION
    except Exception as exc:  # a profile that is not there
        raise explain(exc, loc, "reading the AWS configuration") from None


def boto3_client(loc: S3Location, *, connections: int = 10, timeout_s: float = 60.0,
                 attempts: int = CONTROL_ATTEMPTS) -> Any:
    """A boto3 S3 client for the location (thread-safe: one is shared by `connections` threads)."""
    import boto3
    from botocore.config import Config

    config = Config(region_name=region(loc), max_pool_connections=max(10, connections),
                    connect_timeout=min(timeout_s, 10.0), read_timeout=timeout_s,
                    retries={"total_max_attempts": attempts, "mode": "standard"},  # attempts in all
                    s3={"addressing_style": "path" if loc.path_style else "auto"},
                    # on-premises stores differ in what they accept of the newest checksum headers
                    request_checksum_calculation="when_required", response_checksum_validation="when_required")
    try:
        session = boto3.session.Session(profile_name=loc.profile)
        return session.client("s3", endpoint_url=loc.endpoint, config=config)
    except Exception as exc:
        raise explain(exc, loc, "making an S3 client") from None


READ_CONNECTIONS = 512  # connections a reading client opens at most: the deepest default sweep (64 threads x 8)
S3TC_ATTEMPTS = 2  # the fewest s3torchconnector honours: its max_attempts=1 is taken as its default (10)
# retries a client makes of a GET on the reading path, out of iobench's sight: none for the CRT and boto3 (iobench's
# own retry of a throttled answer is counted: sources/s3.py); s3torchconnector retries a failed or throttled GET once
READ_RETRIES = {"crt": 0, "boto3": 0, "s3torchconnector": S3TC_ATTEMPTS - 1}


@dataclass(frozen=True)
class CrtClient:
    """The AWS CRT's S3 client (asynchronous, retries off: docs/s3.md, "Clients") with what a GET needs."""

    client: Any
    host: str  # the Host header: the endpoint's, or the bucket's virtual host
    path: str  # the prefix of a key's path: "/BUCKET/" (path style) or "/"


def crt_address(endpoint: str | None, bucket: str, region: str, path_style: bool) -> tuple[str, str, bool]:
    """(Host header, path prefix of every key, TLS) of a CRT request: path-style addressing puts the bucket in the
    path."""
    if endpoint is None:
        netloc, tls = f"s3.{region}.amazonaws.com", True
    else:
        parts = urlsplit(endpoint)
        netloc, tls = parts.netloc, parts.scheme == "https"
    if path_style:
        return netloc, f"/{bucket}/", tls
    return f"{bucket}.{netloc}", "/", tls


# the CRT sizes its connections by its throughput target: at 10 Gbps (its default) it opens ~26 and queues the other
# GETs inside the client, out of sight; so the target is set high and the connections capped instead
CRT_TARGET_GBPS = 1000.0


def crt_client(loc: S3Location, *, connections: int = READ_CONNECTIONS) -> CrtClient:
    """An awscrt S3 client for the location, opening up to `connections` at once (its throughput target set high:
    see CRT_TARGET_GBPS); one per process, made after fork (the CRT's threads are not forked)."""
    from awscrt import auth, io, s3

    host, path, tls = crt_address(loc.endpoint, loc.bucket, region(loc), loc.path_style)
    try:
        bootstrap = io.ClientBootstrap(elg := io.EventLoopGroup(), io.DefaultHostResolver(elg))
        creds = (auth.AwsCredentialsProvider.new_profile(bootstrap, profile_name=loc.profile) if loc.profile else
                 auth.AwsCredentialsProvider.new_default_chain(bootstrap))
        # the CRT's S3 signing: SigV4 encodes an S3 key once, not twice as AwsSigningConfig's default does for other
        # services (a key with a space or '+' would be signed as AWS does not check it; SeaweedFS accepts both)
        signing = s3.create_default_s3_signing_config(region=region(loc), credential_provider=creds)
        client = s3.S3Client(bootstrap=bootstrap, region=region(loc), signing_config=signing,
                             tls_mode=s3.S3RequestTlsMode.ENABLED if tls else s3.S3RequestTlsMode.DISABLED,
                             throughput_target_gbps=CRT_TARGET_GBPS, max_active_connections_override=connections,
                             retry_config=s3.S3RetryConfig(retry_mode=s3.S3RetryMode.NONE))
    except Exception as exc:
        raise explain(exc, loc, "making an S3 client") from None
    return CrtClient(client, host, path)


def s3torchconnector_client(loc: S3Location, *, attempts: int = S3TC_ATTEMPTS) -> Any:
    """An s3torchconnector S3Client for the location, as S3MapDataset makes one; one per process (its native client
    is made on first use, in the process that uses it). No time-out setting: --io-timeout's watchdog ends a GET."""
    from s3torchconnector._s3client import S3Client, S3ClientConfig

    config = S3ClientConfig(force_path_style=loc.path_style, max_attempts=attempts, profile=loc.profile)
    try:
        return S3Client(region(loc), endpoint=loc.endpoint, s3client_config=config)
    except Exception as exc:
        raise explain(exc, loc, "making an S3 client") from None


def versions() -> dict[str, str]:
    """The client libraries' versions, as a result records them."""
    found = {}
    for name in ("boto3", "botocore", "awscrt", "s3torchconnector", "s3torchconnectorclient"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


THROTTLED = frozenset({"SlowDown", "503", "Throttling", "ThrottlingException", "RequestLimitExceeded",
                       "TooManyRequests", "429", "ErrTooManyRequest"})


def explain(exc: BaseException, loc: S3Location, doing: str, status: int = 0) -> UserError:
    """A client's failure as one line naming what iobench was doing at which endpoint and bucket: the environment
    refusing (exit 3) for an endpoint that does not answer, no credentials, a missing bucket, a key gone, access
    denied; a usage error (exit 2) for a profile that is not there. `status`: the answer's HTTP status where the
    caller saw it (the CRT's errors do not say it)."""
    from botocore import exceptions as bx

    at = f"{loc} at {loc.endpoint or 'AWS S3'}"
    if status == 404 and doing == "reading":  # a sample's GET (a missing bucket fails the listing, long before)
        return EnvironmentRefused(f"{doing} {at}: no such key (404): the object was deleted after the dataset was "
                                  "listed")
    if isinstance(exc, bx.ProfileNotFound):
        return UserError(f"{doing}: the AWS profile {loc.profile!r} is not in ~/.aws/config or credentials")
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return EnvironmentRefused(f"{doing} {at}: no S3 credentials found (set AWS_ACCESS_KEY_ID and "
                                  "AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials with --profile)")
    if isinstance(exc, bx.EndpointConnectionError | bx.ConnectTimeoutError | bx.ReadTimeoutError
                  | bx.ConnectionClosedError):
        return EnvironmentRefused(f"{doing} {at}: the endpoint does not answer ({_first_line(exc)})")
    if isinstance(exc, bx.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("NoSuchBucket",) or (code == "404" and "bucket" in doing):
            return EnvironmentRefused(f"{doing} {at}: the bucket {loc.bucket!r} does not exist")
        if code == "NoSuchKey":
            return explain(exc, loc, doing, 404)
        if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"):
            why = {"InvalidAccessKeyId": "the access key is not known there",
                   "SignatureDoesNotMatch": "the secret key does not match the access key"}.get(code, "access denied")
            return EnvironmentRefused(f"{doing} {at}: {why}")
        if code in THROTTLED:  # a bodiless answer (a HEAD's) has its status as its code: said once
            return throttled_error(loc, doing, code if code == str(status) else f"{status} {code}")
        return EnvironmentRefused(f"{doing} {at}: {code or status}: {error.get('Message') or _first_line(exc)}")
    if isinstance(exc, bx.BotoCoreError):
        return EnvironmentRefused(f"{doing} {at}: {_first_line(exc)}")
    text = _first_line(exc)
    # the CRT's errors carry no types: their words say what failed
    lowered = text.lower()
    if "no such bucket" in lowered or "nosuchbucket" in lowered:
        return EnvironmentRefused(f"{doing} {at}: the bucket {loc.bucket!r} does not exist")
    if "access denied" in lowered or "forbidden" in lowered or "403" in lowered:
        return EnvironmentRefused(f"{doing} {at}: access denied")
    if "throttl" in lowered or "slowdown" in lowered or "503" in lowered:
        return throttled_error(loc, doing, text)
    if "credentials" in lowered:
        return EnvironmentRefused(f"{doing} {at}: no S3 credentials found ({text})")
    return EnvironmentRefused(f"{doing} {at}: {text}" + (f" (HTTP {status})" if status else ""))


def throttled_error(loc: S3Location, doing: str, answer: str) -> EnvironmentRefused:
    """A throttled answer as one line: `explain`'s, and a GET's throttled past iobench's patience (sources/s3.py)."""
    return EnvironmentRefused(f"{doing} {loc} at {loc.endpoint or 'AWS S3'}: the server is throttling requests "
                              f"({answer}): measure with fewer requests in flight (--in-flight, --threads, --workers), "
                              "or ask its owner for a higher limit")


PAUSE_S = (0.02, 1.0)  # the backoff of a throttled GET without Retry-After: from 20 ms, doubling, at most 1 s


def retry_after(headers: Any) -> float | None:
    """The seconds a throttled answer's Retry-After asks for, if it has one in seconds."""
    for name, value in headers or ():
        if name.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except ValueError:
                return None
    return None


def pause(asked: float | None, attempt: int) -> float:
    """Seconds before the `attempt`-th throttled GET of an object is sent again: the server's Retry-After (`asked`),
    else the backoff, jittered."""
    if asked is not None:
        return asked
    return min(PAUSE_S[1], PAUSE_S[0] * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def quiet_metadata_service() -> None:
    """No EC2 instance-metadata lookups for credentials on hosts that are not in EC2: each costs seconds of
    time-outs before the 'no credentials' answer."""
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


def get_small(client: Any, loc: S3Location, rel: str, limit: int | None = None,
              what: str = "an iobench marker") -> bytes | None:
    """`rel` under `loc` whole, through boto3 `client` (None: no such key), for iobench's own small objects (markers,
    manifests); one bigger than `limit` is not `what` (a one-line error); any failure is one line."""
    from botocore.exceptions import ClientError

    try:
        got = client.get_object(Bucket=loc.bucket, Key=loc.key(rel))
    except Exception as exc:
        if isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None
        raise explain(exc, loc, f"reading {rel} of") from None
    if limit is not None and got["ContentLength"] > limit:
        raise UserError(f"{loc}/{rel} is {got['ContentLength']:,} bytes: not {what}; move it away")
    return bytes(got["Body"].read())


def put_small(client: Any, loc: S3Location, rel: str, body: bytes) -> None:
    """Write `body` as `rel` under `loc` through boto3 `client`; any failure is one line."""
    try:
        client.put_object(Bucket=loc.bucket, Key=loc.key(rel), Body=body)
    except Exception as exc:
        raise explain(exc, loc, f"writing {rel} to") from None
