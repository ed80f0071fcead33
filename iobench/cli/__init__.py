"""Command line: `iobench gen`, `iobench run`, ... Bad input ends in one line on stderr, never a traceback; the
exit codes are in docs/errors.md (iobench.errors has their constants).

app.py the group and main()'s errors to exit codes, options.py the shared options and RunOptions, refusals.py the
options that do not apply, run.py `run` and `fio`, commands.py the others. Nothing here imports iobench.phases.

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

