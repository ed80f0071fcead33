"""Where a dataset lives in object storage: s3:// URLs, endpoints and the options that place a run (no server)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from iobench.errors import UserError
from iobench.s3.url import S3Location, parse_url
from iobench.store import S3Store
from iobench.store import at as place
from iobench.store import open as open_store


def test_a_url_is_a_bucket_and_a_prefix_and_a_dataset_is_a_name_under_it(monkeypatch) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    loc = parse_url("s3://my-bucket/some/prefix/")
    assert (loc.bucket, loc.prefix, loc.endpoint, loc.client) == ("my-bucket", "some/prefix", None, "crt")
    ds = loc / "imagenet-100f-1c-s0"
    assert str(ds) == "s3://my-bucket/some/prefix/imagenet-100f-1c-s0" and ds.name == "imagenet-100f-1c-s0"
    assert ds.key("train/a.JPEG") == "some/prefix/imagenet-100f-1c-s0/train/a.JPEG"
    assert parse_url("s3://my-bucket").key("x") == "x"
    assert not loc.path_style  # AWS's own endpoint: virtual-hosted
    assert pickle.loads(pickle.dumps(ds)) == ds  # it travels into DataLoader workers
    assert isinstance(open_store(loc), S3Store)


def test_the_endpoint_comes_from_the_option_else_the_sdks_environment(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://10.0.0.5:9000")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    assert parse_url("s3://bkt/p").endpoint == "http://10.0.0.5:9000"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.com/")
    loc = parse_url("s3://bkt/p")
    assert loc.endpoint == "https://s3.example.com" and loc.path_style
    assert parse_url("s3://bkt/p", endpoint="http://127.0.0.1:8333").endpoint == "http://127.0.0.1:8333"
    assert not parse_url("s3://bkt", endpoint="https://s3.us-west-2.amazonaws.com").path_style


@pytest.mark.parametrize(("url", "endpoint", "words"), [
    ("http://bkt/p", None, "is not an s3://BUCKET/PREFIX URL"),
    ("s3:/bkt", None, "is not an s3://BUCKET/PREFIX URL"),
    ("s3://Bad_Bucket/p", None, "is not a bucket name"),
    ("s3://ab/p", None, "is not a bucket name"),
    ("s3://bkt/a/../b", None, "has an empty, '.' or '..' part"),
    ("s3://bkt/a//b", None, "has an empty, '.' or '..' part"),
    ("s3://bkt/p", "ftp://host", "is not an http:// or https:// URL"),
    ("s3://bkt/p", "http://host:port", "its port 'port' is not a number"),
    ("s3://bkt/p", "http://key:secret@host:9000", "holds credentials"),
])
def test_a_malformed_url_or_endpoint_is_one_line(url: str, endpoint: str | None, words: str) -> None:
    with pytest.raises(UserError, match=None) as got:
        parse_url(url, endpoint=endpoint)
    assert words in str(got.value) and "\n" not in str(got.value)
    assert "secret" not in str(got.value)


def test_no_credential_is_in_what_a_result_records(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMIsecret")
    loc = parse_url("s3://bkt/p", endpoint="http://127.0.0.1:8333", profile="lab")
    described = S3Store(loc).describe(loc / "ds")
    text = repr(described) + str(loc) + repr(loc)
    assert "AKIDEXAMPLE" not in text and "wJalrXUtnFEMIsecret" not in text
    assert described["family"] == "object" and described["details"]["endpoint"] == "http://127.0.0.1:8333"
    assert described["details"]["client"] == "crt" and described["details"]["profile"] == "lab"


def test_the_place_of_a_command_is_the_url_or_the_mount_never_both() -> None:
    assert place(None, None) == Path(".")
    assert place(Path("/mnt/x"), None) == Path("/mnt/x")
    got = place(None, "s3://bkt/p", "http://127.0.0.1:1", None, None)
    assert isinstance(got, S3Location) and got.client == "crt"  # the default `--s3-client` help says
    assert place(None, "s3://bkt/p", "http://127.0.0.1:1", None, "boto3").client == "boto3"
    with pytest.raises(UserError, match="give one or the other"):
        place(Path("/mnt/x"), "s3://bkt/p")
    with pytest.raises(UserError, match="--endpoint-url applies to object storage"):
        place(None, None, "http://127.0.0.1:1")
    with pytest.raises(UserError, match="--s3-client applies to object storage"):
        place(None, None, None, None, "boto3")
