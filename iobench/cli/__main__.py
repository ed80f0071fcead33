"""`python -m iobench.cli`: the command line, as the `iobench` entry point runs it."""

from iobench.cli import main

main()
