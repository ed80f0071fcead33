"""The package list, which pyproject.toml cannot say: setuptools finds iobench and its subpackages (a new one needs
no entry anywhere), and iobench.workloads is added by hand, because it is the top-level workloads/ folder
(pyproject.toml's package-dir maps it) and discovery only finds packages by their folders. The rest of the
packaging is in pyproject.toml."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["iobench", "iobench.*"]), "iobench.workloads"])
