"""``python -m selfevolve.cli``: the ``selfevolve`` command."""

from selfevolve.cli import main

main()
