"""SIGTERM stops a run the way Ctrl-C does.

Job schedulers, ``kill``, ``docker stop`` and ``timeout`` send SIGTERM, whose default action ends the process
on the spot — with no message and no exit status a script can tell from a crash. Here it raises
:class:`Terminated`, a ``KeyboardInterrupt``, so that every path written for Ctrl-C handles it too: the step
in progress is abandoned, the last checkpoint (written atomically) stays valid, the trainer says how to
resume, and the command exits with 143 (128 + SIGTERM) instead of Ctrl-C's 130.
"""

from __future__ import annotations

import contextlib
import signal
import threading

INTERRUPTED_EXIT = 130  # 128 + SIGINT, what shells report for Ctrl-C


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (see the module docstring)."""

    exit_code = 128 + signal.SIGTERM


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """The exit status for a stop: 143 for SIGTERM, 130 for Ctrl-C."""
    return getattr(interrupt, "exit_code", INTERRUPTED_EXIT)


def _raise_terminated(signum, frame):
    raise Terminated()


@contextlib.contextmanager
def stop_on_sigterm():
    """Within the block, SIGTERM raises :class:`Terminated`; the previous handler is restored after. Signal
    handlers can only be set from the main thread: elsewhere (a run started in a worker thread) this does
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
