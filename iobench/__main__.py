"""`python -m iobench`: what torchrun runs on every rank (`torchrun ... -m iobench run ...`)."""

from iobench.cli import main

main()
