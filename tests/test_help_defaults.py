"""Options agree across commands: every default the help says is the default the command uses, one name
per idea (old spellings still work, out of the help), and the choices listed in help and completion. In process:
each command runs with its defaults up to the call that would do the work, which is caught with what it was given."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.shell_completion import ShellComplete
from click.testing import CliRunner

from iobench import session
from iobench.cli import commands as cmds
from iobench.cli.app import cli
from iobench.dataset import default_classes
from iobench.dataset.gen import FILES_PER_CLASS
from iobench.dataset.sizes import parse_size

runs = importlib.import_module("iobench.cli.run")  # the module: iobench.cli names the command `run`

TORCH = importlib.util.find_spec("torch") is not None


class Seen(Exception):
    """Raised by a stand-in for the call that would do the work, with what it was given."""

    def __init__(self, args: tuple, kw: dict):
        super().__init__("seen")
        self.args_, self.kw = args, kw


def _stand_in(*args: Any, **kw: Any) -> None:
    raise Seen(args, kw)


def _seen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], *where: tuple[object, ...]) -> Seen:
    """`iobench ARGV` in `tmp_path`, stopped at the first of `where` (module, name) it calls."""
    for module, name, *passes in where:  # (module, name, "pass"): a check that lets the command on
        monkeypatch.setattr(module, name, (lambda *a, **k: None) if passes else _stand_in)
    monkeypatch.chdir(tmp_path)
    got = CliRunner().invoke(cli, argv, catch_exceptions=True)
    assert isinstance(got.exception, Seen), (argv, got.output, got.exception)
    return got.exception


def _flag(on: bool, name: str) -> str:
    return name if on else f"no-{name}"


def _list(values: Any) -> str:
    return ",".join(map(str, values))


# (command, option) -> (the arguments it runs with, where it is stopped, what it used)
Real = tuple[list[str], tuple[tuple[object, ...], ...], Callable[[Seen], object]]
MEASURE = ((session, "measure"),)  # imported by `run` and `fio` when they run (iobench/cli/run.py)
FIO = ((session, "require_fio", "pass"),)


def _settings(s: Seen) -> Any:
    return s.args_[0]


REAL: dict[tuple[str, str], Real] = {
    ("run", "--mount"): ([], MEASURE, lambda s: str(s.args_[1])),
    ("run", "--files"): ([], MEASURE, lambda s: s.args_[3].spec.files),
    ("run", "--size-dist"): ([], MEASURE, lambda s: s.args_[3].spec.dist.spec),
    ("run", "--seed"): ([], MEASURE, lambda s: _settings(s).seed),
    ("run", "--threads"): (["--engine", "threads"], MEASURE, lambda s: _list(_settings(s).concurrency)),
    ("run", "--cache"): ([], MEASURE, lambda s: "both" if _settings(s).cache == ["cold", "warm"] else s),
    ("run", "--workload"): ([], MEASURE, lambda s: Path(_settings(s).workload).stem),
    ("run", "--order"): ([], MEASURE, lambda s: _list(_settings(s).orders)),
    ("run", "--source"): ([], MEASURE, lambda s: _list(_settings(s).sources)),
    ("run", "--epochs"): ([], MEASURE, lambda s: _settings(s).epochs),
    ("run", "--repeat"): ([], MEASURE, lambda s: _settings(s).repeat),
    ("run", "--fio"): ([], MEASURE, lambda s: _flag(_settings(s).raw_baseline, "fio")),
    ("run", "--metadata"): ([], MEASURE, lambda s: _flag(_settings(s).metadata, "metadata")),
    ("run", "--scale-files"): ([], MEASURE, lambda s: _settings(s).scale_files),
    ("run", "--engine"): ([], MEASURE, lambda s: _settings(s).engine),
    ("run", "--workers"): (["--engine", "dataloader"], MEASURE, lambda s: _list(_settings(s).concurrency)),
    ("run", "--batch-size"): ([], MEASURE, lambda s: _settings(s).batch_size),
    ("run", "--prefetch-factor"): ([], MEASURE, lambda s: _settings(s).prefetch_factor),
    ("run", "--decode"): ([], MEASURE, lambda s: _flag(_settings(s).decode, "decode")),
    ("run", "--pipeline"): ([], MEASURE, lambda s: _list(_settings(s).pipelines)),
    ("run", "--model"): ([], MEASURE, lambda s: _settings(s).model),
    ("run", "--gpu"): ([], MEASURE, lambda s: _settings(s).gpu),
    ("run", "--rate-kind"): ([], MEASURE, lambda s: _settings(s).rate_kind),
    ("run", "--au-target"): ([], MEASURE, lambda s: _settings(s).au_target),
    ("run", "--consumer"): ([], MEASURE, lambda s: _settings(s).consumer),
    ("run", "--io-timeout"): ([], MEASURE, lambda s: _settings(s).io_timeout_s),
    ("run", "--timeout"): (["--ranks", "2"], ((runs, "launch"),), lambda s: s.args_[2]),
    ("fio", "--mount"): ([], (*FIO, *MEASURE), lambda s: str(s.args_[1])),
    ("fio", "--files"): ([], (*FIO, *MEASURE), lambda s: s.args_[3].spec.files),
    ("fio", "--size-dist"): ([], (*FIO, *MEASURE), lambda s: s.args_[3].spec.dist.spec),
    ("fio", "--seed"): ([], (*FIO, *MEASURE), lambda s: _settings(s).seed),
    ("fio", "--io-timeout"): ([], (*FIO, *MEASURE), lambda s: _settings(s).io_timeout_s),
    ("fio", "--threads"): ([], (*FIO, *MEASURE), lambda s: _list(_settings(s).concurrency)),
    ("fio", "--cache"): ([], (*FIO, *MEASURE), lambda s: "both" if _settings(s).cache == ["cold", "warm"]
                         else s),
    ("gen", "--mount"): ([], ((session, "probe"),), lambda s: str(s.args_[0])),
    ("gen", "--files"): ([], ((session, "make"),), lambda s: s.args_[1].files),
    ("gen", "--size-dist"): ([], ((session, "make"),), lambda s: s.args_[1].dist.spec),
    ("gen", "--seed"): ([], ((session, "make"),), lambda s: s.args_[1].seed),
    ("gen", "--io-timeout"): ([], ((session, "probe"),), lambda s: s.args_[1]),
    ("pack", "--mount"): ([], ((session, "pack"),), lambda s: str(s.args_[0])),
    ("pack", "--files"): ([], ((session, "pack"),), lambda s: s.args_[2].spec.files),
    ("pack", "--size-dist"): ([], ((session, "pack"),), lambda s: s.args_[2].spec.dist.spec),
    ("pack", "--seed"): ([], ((session, "pack"),), lambda s: s.args_[2].spec.seed),
    ("pack", "--format"): ([], ((session, "pack"),), lambda s: _list(s.args_[3])),
    ("pack", "--shard-size"): ([], ((session, "pack"),),
                               lambda s: "256MiB" if s.args_[4] == parse_size("256MiB") else s.args_[4]),
    ("clean", "--mount"): ([], ((session, "probe"),), lambda s: str(s.args_[0])),
    ("plan", "--files"): (["--gpu", "h200", "--gpus", "8", "--model", "resnet50"], ((cmds, "plan"),),
                          lambda s: s.kw["dataset_files"]),
    ("plan", "--au-target"): (["--gpu", "h200", "--gpus", "8", "--model", "resnet50"], ((cmds, "plan"),),
                              lambda s: s.kw["au_target"]),
    ("plan", "--gpus-per-node"): (["--gpu", "h200", "--gpus", "8", "--model", "resnet50"], ((cmds, "plan"),),
                                  lambda s: s.kw["gpus_per_node"]),
    ("gpus", "--rate-kind"): ([], ((cmds, "rates"),), lambda s: "all" if s.args_[0] is None else s.args_[0]),
    ("gpu-rate", "--model"): ([], ((cmds.benchmark, "measure"),), lambda s: s.args_[0]),
    ("gpu-rate", "--batch-size"): ([], ((cmds.benchmark, "measure"),), lambda s: s.kw["batch"]),
    ("gpu-rate", "--steps"): ([], ((cmds.benchmark, "measure"),), lambda s: s.kw["steps"]),
    ("gpu-rate", "--device"): ([], ((cmds.benchmark, "measure"),), lambda s: s.kw["device"]),
}

# defaults said as a rule or a place, not a value: each checked apart (or by the test that owns it)
DESCRIBED = {
    ("run", "--classes"), ("fio", "--classes"), ("gen", "--classes"), ("pack", "--classes"),  # ~1,281 a folder
    ("run", "--out"), ("fio", "--out"),  # reports/<timestamp>-<fstype>-<mount>/
    ("gen", "--threads"),  # the store's writers: 32 on a network or FUSE file system, else 2 per core up to 8
    ("report", "--html"), ("report", "--md"), ("report", "--name"),
    ("compare", "--html"), ("compare", "--md"), ("compare", "--csv"), ("compare", "--name"),
    ("plan", "--mean-size"), ("plan", "--rate-kind"),  # the result's or the model's; the pair's first kind
    ("plan", "--pipeline"),  # the result's first pipeline (tests/test_pipelines.py)
    ("run", "--in-flight"),  # DEFAULT_IN_FLIGHT with --url, else 1 (tests/test_s3.py runs the default)
    # the AWS SDKs' environment and chain; crt: parse_url's (tests/test_s3_url.py)
    *((cmd, opt) for cmd in ("run", "fio", "gen", "clean", "pack")
      for opt in ("--endpoint-url", "--profile", "--s3-client")),
}

NEEDS_TORCH = {("run", "--engine"), ("run", "--workers")}  # without torch a run falls back to the thread engine


def _help_defaults() -> dict[tuple[str, str], str]:
    """(command, option) -> what its help says after `[default: `, for every option shown."""
    out = {}
    top = click.Context(cli)
    for name in cli.list_commands(top):  # each command imported from its module as it is asked for (cli/app.py)
        command = cli.get_command(top, name)
        assert command is not None
        ctx = click.Context(command, info_name=name)
        for p in command.params:
            if not isinstance(p, click.Option) or p.hidden:
                continue
            record = p.get_help_record(ctx)
            m = re.search(r"\[default: ([^\]]*)\]", record[1]) if record else None
            if m:
                out[(name, p.opts[0])] = m.group(1)
    return out


def _value_said(text: str) -> str:
    """"the workload's: 2,4,8; ..." says 2,4,8."""
    return text.removeprefix("the workload's: ").split(";")[0].strip()


def _same(said: str, real: object) -> bool:
    if isinstance(real, bool) or not isinstance(real, int | float):
        return said == str(real)
    try:
        return float(said.replace(",", "")) == float(real)
    except ValueError:
        return False


def test_every_default_in_the_help_is_checked_or_described() -> None:
    said = _help_defaults()
    unknown = sorted(set(said) - set(REAL) - DESCRIBED)
    assert not unknown, f"a default in the help no test compares with the real one: {unknown}"
    missing = sorted(set(REAL) - set(said))
    assert not missing, f"REAL names options whose help says no default: {missing}"


@pytest.mark.parametrize("key", sorted(REAL), ids=lambda k: f"{k[0]} {k[1]}")
def test_the_default_the_help_says_is_the_one_used(key: tuple[str, str], monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    if key in NEEDS_TORCH and not TORCH:
        pytest.skip("the DataLoader engine needs torch")
    args, where, used = REAL[key]
    real = used(_seen(monkeypatch, tmp_path, [key[0], *args], *where))
    said = _value_said(_help_defaults()[key])
    assert _same(said, real), f"iobench {key[0]} {key[1]}: the help says {said!r}, the command uses {real!r}"


def test_a_dataset_shape_default_is_imagenet_folder_sizes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert f"{FILES_PER_CLASS:,}" in _help_defaults()[("run", "--classes")]
    spec = _seen(monkeypatch, tmp_path, ["gen"], (session, "make")).args_[1]
    assert spec.classes == default_classes(spec.files)


@pytest.mark.parametrize(("argv", "old", "new", "field", "value"), [
    (["gpu-rate"], ["--batch", "8"], ["--batch-size", "8"], "batch", 8),
    (["plan", "--gpu", "h200", "--gpus", "8", "--model", "resnet50"], ["--dataset-files", "5000"],
     ["--files", "5000"], "dataset_files", 5000),
    (["plan", "--gpu", "h200", "--gpus", "8", "--model", "resnet50"], ["--mean-kb", "150"],
     ["--mean-size", "150kB"], "mean_kb", 150.0),
])
def test_an_old_spelling_works_and_is_out_of_the_help(argv: list[str], old: list[str], new: list[str], field: str,
                                                     value: object, monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    where = (cmds.benchmark, "measure") if argv[0] == "gpu-rate" else (cmds, "plan")
    for spelling in (old, new):
        assert _seen(monkeypatch, tmp_path, [*argv, *spelling], where).kw[field] == value
    shown = CliRunner().invoke(cli, [argv[0], "--help"]).output
    assert new[0] in shown and not re.search(rf"{old[0]}\b(?!-)", shown), shown


def test_an_old_and_a_new_spelling_of_the_mean_size_together_are_refused() -> None:
    got = CliRunner().invoke(cli, ["plan", "--gpu", "h200", "--gpus", "8", "--model", "resnet50", "--mean-kb", "1",
                                   "--mean-size", "1kB"])
    assert "old spelling of --mean-size" in str(got.exception)


def test_the_choices_are_in_the_help() -> None:
    shown = re.sub(r"\s+", " ", CliRunner().invoke(cli, ["run", "--help"], terminal_width=200).output)
    for choices in ("[cold|warm|both]", "[sequential|shuffled|both]", "[files|lmdb|tar|all]",
                    "[measured|published|mlperf-storage]", "[threads|dataloader]"):
        assert choices in shown, choices
    gpus = re.search(r"--gpu \[([^\]]*)\]", shown)
    assert gpus and {"v100", "a100", "h100", "h200", "b200", "mi355"} <= set(gpus.group(1).split("|"))


def _completions(args: list[str], incomplete: str) -> list[str]:
    return [c.value for c in ShellComplete(cli, {}, "iobench", "_IOBENCH_COMPLETE").get_completions(args,
                                                                                                     incomplete)]


def test_the_choices_complete() -> None:
    assert _completions(["run", "--cache"], "") == ["cold", "warm", "both"]
    assert _completions(["run", "--cache"], "cold,") == ["cold,warm"]
    assert _completions(["fio", "--cache"], "w") == ["warm"]
    assert _completions(["run", "--order"], "s") == ["sequential", "shuffled"]
    assert _completions(["run", "--source"], "files,") == ["files,lmdb", "files,tar"]
    assert _completions(["run", "--rate-kind"], "m") == ["measured", "mlperf-storage"]
    assert _completions(["plan", "--gpu"], "") and "mi355" in _completions(["run", "--gpu"], "m")
    assert _completions(["run", "--model"], "res") == ["resnet101", "resnet18", "resnet50"]
    assert "unet3d" in _completions(["plan", "--gpu", "h200", "--model"], "")


@pytest.mark.parametrize(("command", "old", "new"), [
    ("gpu-rate", "--batch", "--batch-size"), ("plan", "--dataset-files", "--files"),
    ("plan", "--mean-kb", "--mean-size"),
])
def test_an_old_spelling_does_not_complete(command: str, old: str, new: str) -> None:
    assert new in _completions([command], "--") and old not in _completions([command], "--")
    assert old not in _completions([command], old)  # (--batch still starts --batch-size)


def test_an_old_spelling_does_not_complete_in_bash() -> None:
    """As bash asks (its completion script sets COMP_WORDS, COMP_CWORD and _IOBENCH_COMPLETE=bash_complete)."""
    env = {**os.environ, "COMP_WORDS": "iobench gpu-rate --bat", "COMP_CWORD": "2",
           "_IOBENCH_COMPLETE": "bash_complete"}
    got = subprocess.run([sys.executable, "-m", "iobench.cli"], env=env, capture_output=True, text=True, timeout=60)
    assert got.stdout.split() == ["plain,--batch-size"], got


def test_the_models_are_in_the_help_and_another_is_judged_where_used(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    for command in ("run", "plan"):
        shown = re.sub(r"\s+", " ", CliRunner().invoke(cli, [command, "--help"], terminal_width=200).output)
        models = re.search(r"--model \[([^\]]*)\]", shown)
        assert models and {"resnet50", "vit_b_16", "unet3d", "retinanet"} <= set(models.group(1).split("|"))
    settings = _settings(_seen(monkeypatch, tmp_path, ["run", "--engine", "threads", "--model", "ResNet-50"], *MEASURE))
    assert settings.model == "resnet50"  # an alias is the table's name
    got = CliRunner().invoke(cli, ["plan", "--gpu", "h200", "--gpus", "8", "--model", "mymodel", "--rate", "100"])
    assert got.exit_code == 0 and "100 samples/s" in got.output, got.output  # a model the table lacks, with --rate


@pytest.mark.parametrize(("argv", "parsed"), [
    (["--cache", "warm"], ("warm",)), (["--cache", "both"], ("cold", "warm")),
    (["--order", "both"], ("sequential", "shuffled")), (["--source", "all"], ("files", "lmdb", "tar")),
    (["--gpu", "H100-SXM"], "h100"),
])
def test_a_choice_given_is_the_value_run_uses(argv: list[str], parsed: object, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    settings = _settings(_seen(monkeypatch, tmp_path, ["run", "--engine", "threads", *argv], *MEASURE))
    got = {"--cache": settings.cache, "--order": settings.orders, "--source": settings.sources,
           "--gpu": settings.gpu}[argv[0]]
    assert (tuple(got) if isinstance(got, list) else got) == parsed
