"""Environments made once and reused across episodes, and closed when the run is done.

The trainer plays ``tasks_per_step x group_size`` episodes a step. Making a fresh environment for each is free
for the built-in games, but not for a world with an engine behind it (TextWorldExpress keeps a game object in a
Java process): a pool hands out the same instances every step (``reset`` starts each episode afresh) and
:meth:`EnvPool.close` calls ``close()`` on all of them. A class with ``reusable = False`` gets fresh instances
each time, and the old ones are closed.
"""

from __future__ import annotations

from itertools import count
from typing import Any, Callable, Iterable

from selfevolve.envs.base import TextEnv


def close_all(envs: Iterable[TextEnv]) -> None:
    """``close()`` on every environment (each once, also when one appears several times)."""
    seen: set[int] = set()
    for env in envs:
        if id(env) not in seen:
            seen.add(id(env))
            env.close()


class EnvPool:
    """Environments of one class and options; ``take(n)`` returns ``n`` distinct ones, the same ones each call."""

    def __init__(self, env_cls: type[TextEnv], options: dict[str, Any]):
        self.env_cls, self.options = env_cls, dict(options)
        self.envs: list[TextEnv] = []

    def _make(self) -> TextEnv:
        from selfevolve.envs import make_env  # envs/__init__ imports this module

        return make_env(self.env_cls, **self.options)

    def take(self, n: int) -> list[TextEnv]:
        """``n`` environments for one batch of episodes (none of them in use elsewhere until the next call)."""
        if not getattr(self.env_cls, "reusable", True):
            close_all(self.envs)
            self.envs = []
        while len(self.envs) < n:
            self.envs.append(self._make())
        return self.envs[:n]

    def maker(self) -> Callable[[], TextEnv]:
        """A factory for one batch (``rollout/search/`` asks for its environments one by one): its k-th call
        returns the pool's k-th environment."""
        if not getattr(self.env_cls, "reusable", True):
            close_all(self.envs)
            self.envs = []
        counter = count()

        def next_env() -> TextEnv:
            k = next(counter)
            while len(self.envs) <= k:
                self.envs.append(self._make())
            return self.envs[k]

        return next_env

    def close(self) -> None:
        """Close every environment made so far; the pool stays usable (it makes new ones on the next call)."""
        close_all(self.envs)
        self.envs = []
