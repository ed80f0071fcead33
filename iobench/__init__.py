"""iobench: can this storage feed the GPUs of a training job that reads millions of small files?"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("iobench")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+src"
