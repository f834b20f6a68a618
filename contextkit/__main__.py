"""``python -m contextkit``: the command line."""

from contextkit.cli import main

main()
