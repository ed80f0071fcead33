"""Object storage over S3: where a dataset lives in a bucket (url.py), the clients that reach it (clients.py) and the
raw baseline (raw.py)."""
