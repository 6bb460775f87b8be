"""Snapshots that always work: the environment's own, or a replay of the episode's moves.

Search (``rollout/search/``) branches a world by ``snapshot``/``restore``. The default snapshot deep-copies the
environment, which fails for one that holds a live engine (``ctypes objects containing pointers cannot be
pickled``, a socket, a Java process). An episode is a pure function of its seed and its actions (the protocol:
the same seed gives the same start, and ``step`` is deterministic given the state), so such a world is restored
by resetting it to the seed and replaying the actions: slower, but exact.

An environment that knows it cannot be copied returns a :class:`Replay` from its own ``snapshot`` (the suites'
adapters do); one whose copy fails is remembered by class, so the copy is not attempted at every node again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_NOT_COPYABLE: set[type] = set()  # classes whose snapshot() failed once: replayed from then on


@dataclass(frozen=True)
class Replay:
    """A world state as the moves that lead to it: ``reset(seed)``, then ``step`` on each action in order."""

    seed: int
    actions: tuple[str, ...] = ()


def take_snapshot(env, seed: int, actions: list[str] | tuple[str, ...]) -> Any:
    """``env.snapshot()``, or a :class:`Replay` of ``seed`` and ``actions`` (the action texts the environment was
    stepped with since ``reset(seed)``) when the environment cannot be copied."""
    if type(env) not in _NOT_COPYABLE:
        try:
            return env.snapshot()
        except Exception:  # noqa: BLE001 - any failure to copy means: replay instead (exact, see the docstring)
            _NOT_COPYABLE.add(type(env))
    return Replay(int(seed), tuple(actions))


def restore_snapshot(env, snapshot: Any) -> None:
    """Put ``env`` back in the state of ``snapshot`` (one of :func:`take_snapshot`'s)."""
    if isinstance(snapshot, Replay):
        env.reset(snapshot.seed)
        for action in snapshot.actions:
            env.step(action)
    else:
        env.restore(snapshot)
