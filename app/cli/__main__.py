"""`python -m app.cli`: the same as the `capplan` console script."""

from app.cli import main

main()
