"""Object storage over S3: where a dataset lives in a bucket (`S3Location`, url.py) and the clients that reach it
(clients.py: boto3 for listing and writing, and for reading where chosen; the AWS CRT's asynchronous S3 client
(awscrt) for reading). The store (iobench/store/s3.py) and the source (iobench/sources/s3.py) build on these."""

from iobench.s3.url import CLIENTS, S3Location, parse_url

__all__ = ["CLIENTS", "S3Location", "parse_url"]
