"""The command line's typed options and its one table of refusals (iobench/cli/options.py, refusals.py), without
processes: every key of the table is a parameter of `run`, RunOptions has a field per parameter, and an option is
judged on its value (a switch that turns a phase off is never refused)."""

from __future__ import annotations

import dataclasses

import pytest

from iobench.cli.options import DEFAULT_FILES, RunOptions, shape_of
from iobench.cli.refusals import REFUSALS, Case, flag, refuse
from iobench.cli.run import fio_cmd, run
from iobench.errors import UserError

LOCAL = Case("dataloader", fallback=False, distributed=False, orders=("shuffled",))
DISTRIBUTED = dataclasses.replace(LOCAL, distributed=True)


def _defaults() -> dict:
    """What click hands `run` when no option is given (click >= 8.3 keeps a flag's unset default as a sentinel in
    `Parameter.default`, resolved only in a context)."""
    return run.make_context("run", []).params


def _opts(**given: object) -> RunOptions:
    params = _defaults()
    assert all(name in params for name in given), given
    return RunOptions.from_params({**params, **given})


def test_every_key_of_the_table_is_a_parameter_of_run() -> None:
    names = {p.name for p in run.params}
    flags = {o for p in run.params for o in p.opts + p.secondary_opts}
    for row in REFUSALS:
        for option in row.options:
            assert option in names, f"refusals: {option!r} is no parameter of `iobench run`"
            assert flag(option) in flags, f"refusals: {flag(option)} is no option of `iobench run`"


def test_run_options_have_a_field_per_parameter_and_fio_the_first_ones() -> None:
    fields = [f.name for f in dataclasses.fields(RunOptions)]
    assert sorted(fields) == sorted(p.name for p in run.params)
    assert [p.name for p in fio_cmd.params] == fields[:len(fio_cmd.params)]
    with pytest.raises(TypeError):
        RunOptions.from_params({**_defaults(), "threads_": None})


def test_the_defaults_are_not_given_and_nothing_is_refused() -> None:
    o = _opts()
    assert (o.mount, o.seed, o.fio, o.metadata, o.scale_files, o.prefetch_factor) == (None,) * 6
    refuse(o, LOCAL)
    refuse(o, DISTRIBUTED)


@pytest.mark.parametrize("switch", [{"fio": False}, {"metadata": False}, {"fio": False, "metadata": False}])
def test_a_switch_that_turns_a_phase_off_is_never_refused(switch: dict) -> None:
    refuse(_opts(**switch), DISTRIBUTED)
    refuse(_opts(**switch), LOCAL)


@pytest.mark.parametrize(("given", "words"), [({"fio": True}, "--fio does not apply to a distributed run"),
                                               ({"metadata": True}, "--metadata does not apply"),
                                               ({"threads": "4"}, "--threads"),
                                               ({"scale_files": 1000}, "--scale-files does not apply"),
                                               ({"workers": "1,2"}, "one --workers"),
                                               ({"repeat": 2}, "--repeat does not apply")])
def test_a_value_that_asks_for_what_a_distributed_run_does_not_do_is_refused(given: dict, words: str) -> None:
    refuse(_opts(**{k: v for k, v in given.items() if k != "threads"}), LOCAL)
    with pytest.raises(UserError, match=words):
        refuse(_opts(**given), DISTRIBUTED)


def test_the_value_given_decides_even_when_it_is_the_default() -> None:
    """--prefetch-factor 2 is the default's value, typed: it does not apply to the thread engine."""
    threads = dataclasses.replace(LOCAL, engine="threads", fallback=True)
    with pytest.raises(UserError, match=r"--prefetch-factor applies to the DataLoader engine; .*PyTorch is not"):
        refuse(_opts(prefetch_factor=2), threads)
    with pytest.raises(UserError, match="--mount shapes or places"):
        refuse(_opts(mount=".", dataset="."), LOCAL)


def test_the_shape_asked_for_is_the_options_given() -> None:
    shape = shape_of(None, None, None, 0)
    assert shape.asked == {"seed"} and shape.spec.files == DEFAULT_FILES and shape.spec.seed == 0
    with pytest.raises(UserError, match="--files must be >= 1"):  # 0 is a value given, not the default
        shape_of(0, None, None, None)
