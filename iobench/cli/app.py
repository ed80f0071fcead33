"""The command group and main()'s mapping of every expected failure to one line and an exit code (see the
package's docstring)."""

from __future__ import annotations

import importlib
import signal
import sys
from contextlib import suppress
from typing import Any

import click

from iobench import __version__
from iobench.cli import signal_words
from iobench.distributed.launch import hold
from iobench.errors import (
    EXIT_REFUSED,
    EXIT_STDOUT_CLOSED,
    EXIT_USAGE,
    EXIT_USER_CODE,
    STOP_SIGNALS,
    EnvironmentRefused,
    Interrupted,
    UserCodeError,
    UserError,
    explain_oserror,
)
from iobench.host.stall import AFTER_FINISH
from iobench.output import CLOSED_AT_START, StdoutClosed, check_stdout, guard_stdout, reopen_closed_std_fds

# each command's module:name, imported when the command runs, its help is shown or it is completed (click's lazy
# loading of subcommands): `iobench --version` or `report` does not pay for what `run` imports
COMMANDS = {"gen": "commands:gen", "run": "run:run", "fio": "run:fio_cmd", "pack": "commands:pack",
            "report": "commands:report", "compare": "commands:compare", "plan": "commands:plan_cmd",
            "gpus": "commands:gpus", "gpu-rate": "commands:gpu_rate", "workloads": "commands:workloads",
            "schema": "commands:schema", "clean": "commands:clean"}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, name = COMMANDS[cmd_name].split(":")
        command: click.Command = getattr(importlib.import_module(f"iobench.cli.{module}"), name)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="iobench")
def cli() -> None:
    """iobench: can this storage feed the GPUs of a training job that reads millions of small files?"""


def err(msg: str) -> None:
    if hold(f"iobench: {msg}"):  # a rank of --ranks other than 0: rank 0 speaks for the job
        return
    with suppress(OSError, ValueError):  # stderr gone too: the exit code says it
        click.echo(f"iobench: {msg}", err=True)


def run_main() -> None:
    """Run the command; map every expected failure to one line and an exit code (see the package's docstring)."""
    CLOSED_AT_START.update(reopen_closed_std_fds())
    guard_stdout()
    stopped_by: list[int] = [signal.SIGINT]

    def stop(signum: int, frame: Any) -> None:
        stopped_by[0] = signum  # exits 128 + it
        raise KeyboardInterrupt  # every stop signal as Ctrl-C: keep what was measured, restore settings

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)
    try:
        # non-standalone: a command's click.exceptions.Exit(code) comes back as the return value
        code = cli.main(prog_name="iobench", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:  # usage errors too: one line, not click's three
        err(f"error: {exc.format_message()}")
        sys.exit(EXIT_USAGE)
    except Interrupted as exc:  # said as the signal was, as after a finished run: "terminated (SIGHUP): kept ..."
        err(signal_words(stopped_by[0]) + str(exc).removeprefix("interrupted"))
        sys.exit(128 + stopped_by[0])
    except UserCodeError as exc:  # the user's own code: its traceback is theirs to read, then one line
        sys.stderr.write("--- the traceback of your code (not iobench's) ---\n" + exc.traceback)
        err(f"error: {exc}" + (f" ({exc.kept})" if exc.kept else ""))
        sys.exit(EXIT_USER_CODE)
    except (KeyboardInterrupt, click.Abort):
        err(signal_words(stopped_by[0]))
        sys.exit(128 + stopped_by[0])
    except (UserError, OSError) as exc:  # an OSError said as what iobench was doing, exit 3 where it is a refusal
        said = explain_oserror(exc, "stopped") if isinstance(exc, OSError) else exc
        err(f"error: {said}")
        sys.exit(EXIT_REFUSED if isinstance(said, EnvironmentRefused) else EXIT_USAGE)
    _finish(code if isinstance(code, int) else 0)


def _finish(code: int) -> None:
    """A command that did its work: a stop signal that came once its run had finished is said, and leaves the
    code as it is; a standard output that could not be written is the exit code (its reader gone: 141, quietly)."""
    if AFTER_FINISH:
        err(f"{signal_words(AFTER_FINISH[0])} after the run had finished: its result is complete")
    try:
        check_stdout()
    except StdoutClosed:
        sys.exit(EXIT_STDOUT_CLOSED)
    except UserError as exc:
        err(f"error: {exc}")
        sys.exit(EXIT_USAGE)
    sys.exit(code)
