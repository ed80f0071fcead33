"""Where a dataset lives in object storage: `S3Location`, an s3://BUCKET/PREFIX with the endpoint, profile and
client that reach it (no secret: credentials come from the standard chain in each process that reads).

A location is a value: it is pickled into DataLoader workers and written into a result (`str()` never holds a
credential), and `location / name` is the dataset `name` under it, as a folder's `path / name`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from iobench.errors import UserError

CLIENTS = ("crt", "boto3", "s3torchconnector")  # `--s3-client`: the AWS CRT (awscrt; the default), boto3, or
# s3torchconnector (what S3MapDataset/S3IterableDataset read with)
ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # the AWS SDKs' own names, most specific first
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")  # S3's bucket naming rules (3-63 characters)


@dataclass(frozen=True)
class S3Location:
    """s3://bucket/prefix at `endpoint` (None: AWS's own for the region), read with `client`."""

    bucket: str
    prefix: str = ""  # no leading or trailing "/"; "" is the bucket's top
    endpoint: str | None = None  # scheme://host[:port], no credentials in it
    profile: str | None = None  # the AWS config/credentials profile (None: the default chain)
    client: str = "crt"  # the reading client (CLIENTS)
    region: str | None = None  # None: the profile's or the environment's, else us-east-1

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def __truediv__(self, name: str) -> S3Location:
        return replace(self, prefix=self.key(name))

    @property
    def name(self) -> str:
        return self.prefix.rsplit("/", 1)[-1]

    @property
    def path_style(self) -> bool:
        """Path-style addressing (http://host/bucket/key) wherever the endpoint is not AWS's own: on-premises
        stores (SeaweedFS, Ceph RGW, MinIO, PowerScale) seldom have a wildcard DNS name per bucket."""
        return self.endpoint is not None and not _is_aws(self.endpoint)

    def key(self, rel: str) -> str:
        """The object key of `rel` under this location."""
        return f"{self.prefix}/{rel}" if self.prefix else rel


def _is_aws(endpoint: str) -> bool:
    host = urlsplit(endpoint).hostname or ""
    return host.endswith(".amazonaws.com") or host.endswith(".amazonaws.com.cn")


def check_endpoint(endpoint: str, where: str) -> str:
    """An endpoint as http(s)://host[:port]; a malformed one, one with a path or a query (the bucket and keys are
    put after it: a path would be silently dropped or misread), or one holding credentials, is a one-line error."""
    parts = urlsplit(endpoint)
    try:
        parts.port  # noqa: B018 - a port that is not a number, or not 0-65535, raises here
    except ValueError:
        port = parts.netloc.rpartition(":")[2]
        raise UserError(f"{where} {endpoint!r}: its port {port!r} is not " +
                        ("a port number (1-65535)" if port.isdigit() else "a number")) from None
    if parts.port == 0:
        raise UserError(f"{where} {endpoint!r}: its port '0' is not a port number (1-65535)")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{where} {endpoint!r} is not an http:// or https:// URL with a host (e.g. "
                        "http://10.0.0.5:9000)")
    if parts.username or parts.password:
        raise UserError(f"{where} holds credentials: give them through the environment or a profile (iobench "
                        "records the endpoint in its results)")
    if parts.query or parts.fragment or parts.path.strip("/"):
        raise UserError(f"{where} {endpoint!r}: an endpoint is http(s)://HOST[:PORT], with no path, query or "
                        "fragment (the bucket goes in --url s3://BUCKET/PREFIX)")
    return endpoint.rstrip("/")


def parse_url(url: str, *, endpoint: str | None = None, profile: str | None = None, client: str = "crt",
              region: str | None = None) -> S3Location:
    """s3://BUCKET[/PREFIX] as a location; the endpoint from `endpoint` (--endpoint-url), else the environment's
    AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, else AWS's own. A malformed URL is a one-line error."""
    if not url.startswith("s3://"):
        raise UserError(f"--url {url!r} is not an s3://BUCKET/PREFIX URL")
    bucket, _, prefix = url[len("s3://"):].partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise UserError(f"--url {url!r}: {bucket!r} is not a bucket name (3-63 lowercase letters, digits, dots "
                        "and hyphens)")
    prefix = prefix.strip("/")
    parts = prefix.split("/") if prefix else []
    if "\\" in prefix:  # a key's parts are /-separated: a backslash would be part of a name, not a separator
        # the URL as typed: its repr would double the backslash
        raise UserError(f"--url '{url}': its prefix holds a backslash: separate its parts with / (s3://BUCKET/a/b)")
    if any(p in ("", ".", "..") for p in parts) or "\0" in prefix:
        raise UserError(f"--url {url!r}: its prefix {prefix!r} has an empty, '.' or '..' part")
    if client not in CLIENTS:
        raise UserError(f"--s3-client {client!r}: one of {', '.join(CLIENTS)}")
    where = "--endpoint-url"
    if endpoint is None:
        for name in ENDPOINT_ENV:
            if os.environ.get(name):
                endpoint, where = os.environ[name], name
                break
    return S3Location(bucket, prefix, check_endpoint(endpoint, where) if endpoint else None, profile, client,
                      region)
