"""`iobench run --ranks P`: P ranks on this host through torchrun's own launcher."""

from __future__ import annotations

import os
import socket


def launch(ranks: int, argv: list[str], timeout_s: float) -> int:
    """`iobench run --ranks P`: P ranks on this host through torchrun's own launcher (a c10d rendezvous on a free
    local port, no restarts), each running this same command. Returns the exit code; a rank that died is named."""
    import logging
    import sys

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, get_args_parser

    for name in [n for n in logging.root.manager.loggerDict if n.startswith("torch.distributed")]:
        logging.getLogger(name).setLevel(logging.CRITICAL)  # its lines are not ours to show: iobench says what failed
    import uuid

    # torchrun --standalone's rendezvous, spelled out (it sets these in torchrun's main, not in its parser)
    args = get_args_parser().parse_args(["--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0",
                                         f"--rdzv-id={uuid.uuid4()}", f"--nproc-per-node={ranks}",
                                         "--max-restarts=0", "--monitor-interval=0.2", "-m", "iobench", *argv])
    config, cmd, cmd_args = config_from_args(args)
    # the grace a rank gets between SIGTERM and SIGKILL once the job stops: enough for rank 0 to save
    config.shutdown_timeout = max(5, min(int(timeout_s), 30))
    _stop_within(config.shutdown_timeout)
    os.environ["IOBENCH_RANKS"] = str(ranks)
    try:
        elastic_launch(config, cmd)(*cmd_args)
    except ChildFailedError as exc:
        import signal

        # A rank killed by a signal (not the launcher's own SIGTERM to the others) could not say so: name it here.
        # A rank that exited with a code said why itself, in one line: its code is the run's (rank 0's first: it
        # is the one that answers, e.g. exit 1 from --check).
        host = socket.gethostname()
        died = [f"rank {rank} on {host} (pid {f.pid}) {_how(f.exitcode)}" for rank, f in sorted(exc.failures.items())
                if f.exitcode < 0 and f.exitcode != -signal.SIGTERM]
        if died:
            sys.stderr.write(f"iobench: error: {'; '.join(died)}: the job stopped (rank 0 kept what was gathered)\n")
            return 3  # as any rank lost: the environment ended the run
        codes = [f.exitcode for _, f in sorted(exc.failures.items())]
        return next((c for c in codes if c > 0), 128 + signal.SIGTERM)
    return 0


def _stop_within(timeout_s: int) -> None:
    """torch's launcher stops the other ranks after one failed with a fixed 30 s grace (PContext.close's default;
    LaunchConfig.shutdown_timeout serves only some of its paths): behind a frozen rank that is 30 s of waiting.
    The same close, with our grace."""
    from torch.distributed.elastic.multiprocessing.api import PContext

    close = PContext.close

    def bounded(self, death_sig=None, timeout: int = timeout_s) -> None:
        close(self, death_sig, timeout)

    PContext.close = bounded  # type: ignore[method-assign]


def _how(code: int) -> str:
    import signal

    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with {code}"
