import numpy as np
import pytest

from iobench.dataset.sizes import parse_dist, parse_size
from iobench.errors import UserError


def test_parse_size_units():
    assert parse_size("110KiB") == 112_640
    assert parse_size("97kB") == 97_000
    assert parse_size("2MiB") == 2 * 1024 * 1024
    assert parse_size("4096") == 4096
    with pytest.raises(UserError, match="not a size"):
        parse_size("lots")


def test_imagenet_distribution_is_right_skewed_like_imagenet():
    sizes = parse_dist("imagenet").sample(200_000, np.random.default_rng(1))
    assert 105_000 < sizes.mean() < 115_000
    assert 93_000 < np.median(sizes) < 101_000
    assert sizes.mean() > np.median(sizes)  # right skew
    assert sizes.min() >= 2_000


def test_fixed_and_uniform():
    rng = np.random.default_rng(0)
    assert set(parse_dist("fixed:110KiB").sample(10, rng).tolist()) == {112_640}
    u = parse_dist("uniform:4KiB-256KiB").sample(10_000, rng)
    assert u.min() >= 4096 and u.max() <= 262_144 and u.std() > 50_000


@pytest.mark.parametrize("bad", ["normal", "fixed:", "fixed:100", "uniform:8KiB-4KiB", "uniform:4KiB"])
def test_bad_distributions_are_user_errors(bad):
    with pytest.raises(UserError):
        parse_dist(bad)
