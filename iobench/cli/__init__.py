"""Command line: `iobench gen`, `iobench run`, ... Bad input ends in one line on stderr, never a traceback.

Exit codes a script can act on (iobench.errors): 0 done; 1 done, but `run --check` found the GPUs asked about
(--gpus N) not fed, or your own pipeline's code (`run --pipeline FILE.py:FUNC`) raised (its traceback, then one
line); 2 usage error; 3 the environment refused (mount missing, read-only, full, permission denied); 130 Ctrl-C
(SIGINT) and 143 SIGTERM, the partial result kept. `--json -` writes the JSON alone to stdout, every human line to
stderr (iobench.output).

Click only: options.py the options shared and RunOptions (`run` and `fio` as one typed value), refusals.py the
table of options that do not apply, run.py `run` and `fio`, commands.py the others. What is measured or written
lives in iobench.session and the modules it calls; nothing here imports iobench.phases."""

from __future__ import annotations

import signal
import sys

import click

from iobench import __version__
from iobench.cli.commands import clean, compare, gen, gpu_rate, gpus, pack, plan_cmd, report, schema, workloads
from iobench.cli.run import fio_cmd, run
from iobench.errors import (
    EXIT_REFUSED,
    EXIT_USAGE,
    EXIT_USER_CODE,
    EnvironmentRefused,
    Interrupted,
    UserCodeError,
    UserError,
    explain_oserror,
)
from iobench.output import CLOSED_AT_START, reopen_closed_std_fds


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="iobench")
def cli() -> None:
    """iobench: can this storage feed the GPUs of a training job that reads millions of small files?"""


for _command in (gen, run, fio_cmd, pack, report, compare, plan_cmd, gpus, gpu_rate, workloads, schema, clean):
    cli.add_command(_command)


def main() -> None:
    """Entry point: map every expected failure to one line and an exit code (see the module's docstring)."""
    def err(msg: str) -> None:
        click.echo(f"iobench: {msg}", err=True)

    CLOSED_AT_START.update(reopen_closed_std_fds())
    stopped_by = [signal.SIGINT]

    def terminate(signum: int, frame: object) -> None:
        stopped_by[0] = signal.SIGTERM  # exits 143, not 130
        raise KeyboardInterrupt  # SIGTERM as Ctrl-C: keep what was measured, restore settings

    signal.signal(signal.SIGTERM, terminate)
    try:
        # non-standalone: a command's click.exceptions.Exit(code) comes back as the return value
        code = cli.main(prog_name="iobench", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:  # usage errors too: one line, not click's three
        err(f"error: {exc.format_message()}")
        sys.exit(EXIT_USAGE)
    except Interrupted as exc:
        err(str(exc))
        sys.exit(128 + stopped_by[0])
    except UserCodeError as exc:  # the user's own code: its traceback is theirs to read, then one line
        sys.stderr.write("--- the traceback of your code (not iobench's) ---\n" + exc.traceback)
        err(f"error: {exc}" + (f" ({exc.kept})" if exc.kept else ""))
        sys.exit(EXIT_USER_CODE)
    except (KeyboardInterrupt, click.Abort):
        err("interrupted" if stopped_by[0] == signal.SIGINT else "terminated (SIGTERM)")
        sys.exit(128 + stopped_by[0])
    except EnvironmentRefused as exc:
        err(f"error: {exc}")
        sys.exit(EXIT_REFUSED)
    except UserError as exc:
        err(f"error: {exc}")
        sys.exit(EXIT_USAGE)
    except OSError as exc:
        explained = explain_oserror(exc, "stopped")
        err(f"error: {explained}")
        sys.exit(EXIT_REFUSED if isinstance(explained, EnvironmentRefused) else EXIT_USAGE)
    sys.exit(code if isinstance(code, int) else 0)
