"""Command line: `iobench gen`, `iobench run`, ... Bad input ends in one line on stderr, never a traceback.

Exit codes a script can act on (iobench.errors): 0 done; 1 done, but `run --check` found the GPUs asked about
(--gpus N) not fed, or your own pipeline's code (`run --pipeline FILE.py:FUNC`) raised (its traceback, then one
line); 2 usage error (and a standard output that cannot be written: full, an error); 3 the environment
refused (mount missing, read-only, full, permission denied); 128 + the signal for SIGINT (Ctrl-C, 130), SIGTERM (143)
and SIGHUP (129), the partial result kept; 141 when the reader of stdout left (`iobench run | head -1`), silently,
as a tool killed by SIGPIPE. `--json -` writes the JSON alone to stdout, every human line to stderr
(iobench.output).

Click only: app.py the group and main()'s errors to exit codes, options.py the options shared and RunOptions (`run`
and `fio` as one typed value), refusals.py the table of options that do not apply, run.py `run` and `fio`,
commands.py the others. What is measured or written lives in iobench.session and the modules it calls; nothing here
imports iobench.phases.

This module imports nothing heavy until main() has set what a signal does: a Ctrl-C while the commands are
still being imported (a second or more: numpy, rich, pydantic) ends in one line, not a traceback."""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from typing import Any

from iobench.errors import STOP_SIGNALS


def signal_words(signum: int) -> str:
    """How a stop signal is said: "interrupted" for Ctrl-C, else "terminated (SIGTERM)"."""
    return "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"


def _stop_while_starting(signum: int, frame: Any) -> None:
    # nothing has been done yet: one line and out at once (a KeyboardInterrupt raised inside an import would end
    # in Python's traceback, past every handler)
    with suppress(OSError):
        os.write(2, f"iobench: {signal_words(signum)} while starting: nothing was done\n".encode())
    os._exit(128 + signum)


def main() -> None:
    """Entry point (the `iobench` script, `python -m iobench.cli`, `python -m iobench` on torchrun's ranks)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop_while_starting)
    from iobench.cli.app import run_main

    run_main()


def __getattr__(name: str) -> Any:
    """`iobench.cli.cli`, the click group, imported when asked for (see the module's docstring)."""
    if name == "cli":
        from iobench.cli.app import cli

        return cli
    raise AttributeError(name)
