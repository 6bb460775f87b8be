"""Environments nobody here wrote: game suites from PyPI adapted to the :class:`~selfevolve.envs.base.TextEnv`
protocol, named ``PREFIX:GAME`` (``docs/environments.md``, "Suites"):

- ``textarena:<EnvId>``: TextArena's single-player games (``textarena:FrozenLake-v0``);
- ``twx:<game>``: TextWorldExpress (``twx:coin``), which needs Java;
- ``rg:<dataset>``: reasoning-gym's puzzles (``rg:maze``), with optional retry turns.

Each name resolves to a class of its own (a subclass of the suite's adapter with the game fixed, made once per
process), so everything that takes an environment class (the trainer, evaluation, Ray workers) takes it as it
is. The module-level ``__getattr__`` below makes those classes importable by name, so pickle (and Ray) send
them by reference. The suites' packages are the optional extra ``[suites]``; a name whose package, data or Java
is missing is refused with the reason (:class:`Unavailable`, a ConfigError).
"""

from __future__ import annotations

import importlib
import re
from functools import lru_cache

from selfevolve.errors import ConfigError

# prefix -> (the adapter's module, the form of its names, an example). Each module has game_class(game) and
# ADAPTER (the adapter class, whose options every game of the suite has).
SUITES: dict[str, tuple[str, str, str]] = {
    "textarena": ("selfevolve.envs.suites.textarena", "textarena:<EnvId>", "textarena:FrozenLake-v0"),
    "twx": ("selfevolve.envs.suites.twx", "twx:<game>", "twx:coin"),
    "rg": ("selfevolve.envs.suites.reasoning_gym", "rg:<dataset>", "rg:maze"),
}
FORMS = ", ".join(form for _, form, _ in SUITES.values())
INSTALL = "pip install 'selfevolve[suites]'"
_GAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]*")


class Unavailable(ConfigError):
    """A suite's game that cannot run on this machine (a package, a download or Java is missing)."""


def is_suite_name(name: str) -> bool:
    return isinstance(name, str) and name.partition(":")[0].strip().lower() in SUITES and ":" in name


def split_name(name: str) -> tuple[str, str]:
    """``(prefix, game)`` of ``PREFIX:GAME``; ConfigError for an unknown prefix or a malformed game."""
    prefix, _, game = name.strip().partition(":")
    prefix, game = prefix.lower(), game.strip()
    if prefix not in SUITES:
        raise ConfigError(f"unknown env suite {prefix!r} in {name!r}; suites: {FORMS}")
    if not _GAME.fullmatch(game):
        _, form, example = SUITES[prefix]
        raise ConfigError(f"env {name!r}: name the game as {form}, e.g. {example}")
    return prefix, game


def suite_class(name: str):
    """The environment class of ``PREFIX:GAME``, made once per process (later calls return the same class)."""
    prefix, game = split_name(name)
    return _suite_class(prefix, game)


@lru_cache(maxsize=None)
def _suite_class(prefix: str, game: str):
    module = importlib.import_module(SUITES[prefix][0])
    cls = module.game_class(game)
    cls.__module__ = __name__  # importable as selfevolve.envs.suites.<name>: see __getattr__
    cls.__qualname__ = cls.name
    return cls


def adapters() -> dict[str, type]:
    """Each suite's adapter class by the form of its names (``twx:<game>``), for listings of env options."""
    # the adapters' modules import their suite's package only when a game is resolved
    return {form: importlib.import_module(module).ADAPTER for module, form, _ in SUITES.values()}


def __getattr__(attr: str):
    """``getattr(selfevolve.envs.suites, "twx:coin")`` is that game's class (how pickle finds it again)."""
    if is_suite_name(attr):
        try:
            return suite_class(attr)
        except ConfigError as e:
            raise AttributeError(str(e)) from None
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
