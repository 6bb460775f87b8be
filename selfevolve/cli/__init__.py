"""The ``selfevolve`` command: ``train``, ``sweep``, ``eval`` (``training.py``); ``explore``, ``evolve``
(``evolving.py``); ``view``, ``serve``, ``export``, ``bench`` (``runs.py``). What they share — the app, the
consoles, one-line errors — is in ``base.py``.

Errors the user can fix (a wrong config key, an unknown name, a missing folder) print one line and exit with
status 2 — no traceback.
"""

from __future__ import annotations

import sys

# Each module registers its commands on ``app`` when imported; ``selfevolve --help`` lists them in this order.
from selfevolve.cli import training  # noqa: F401  (first: train, sweep, eval)
from selfevolve.cli import evolving  # noqa: F401  (then: explore, evolve)
from selfevolve.cli import runs  # noqa: F401  (last: view, serve, export, bench)
from selfevolve.cli.base import app, err, out
from selfevolve.train.signals import exit_code, stop_on_sigterm

__all__ = ["app", "err", "main", "out"]


def main() -> None:
    try:
        with stop_on_sigterm():
            app()
    except KeyboardInterrupt as stop:
        sys.exit(exit_code(stop))
