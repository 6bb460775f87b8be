"""Text environments: the protocol (:class:`TextEnv`), the built-in worlds and a small registry.

- what every environment shares: ``base.py`` (the protocol, :class:`TextEnv`), ``holdout.py`` (held-out
  content), ``profile.py`` (a world described as data), ``task_files.py`` (requests as JSONL), ``replay.py``;
- ``games/``: FrozenLake and Sokoban; ``tools/``: the tool worlds (shop, tables); ``suites/``: TextArena,
  TextWorldExpress and reasoning-gym games behind adapters;
- this registry, and ``pool.py`` (environments kept open across steps, made through it).

The games, the tool worlds and the suites import the shared modules and never each other, nor this registry
(``tests/test_layout.py``).
Names: the built-in worlds of ``ENVS`` (``frozenlake``, ``sokoban``, ``shop``, ``tables``) and the suites'
``PREFIX:GAME`` (``textarena:FrozenLake-v0``, ``twx:coin``, ``rg:maze``; ``envs/suites/``), resolved by
:func:`env_class`.
"""

from __future__ import annotations

import inspect
from typing import Any

from selfevolve.envs.base import StepResult, TextEnv
from selfevolve.envs.games import FrozenLakeEnv, SokobanEnv, solve
from selfevolve.envs.tools import ShopEnv, TablesEnv
from selfevolve.errors import ConfigError

ENVS: dict[str, type[TextEnv]] = {"frozenlake": FrozenLakeEnv, "sokoban": SokobanEnv, "shop": ShopEnv,
                                  "tables": TablesEnv}

__all__ = ["ENVS", "FrozenLakeEnv", "ShopEnv", "SokobanEnv", "TablesEnv", "StepResult", "TextEnv", "check_env_config",
           "env_class", "env_options", "make_env", "solve"]


def env_class(name: str) -> type[TextEnv]:
    """The environment class a name stands for: a built-in world of ``ENVS`` or a suite's ``PREFIX:GAME``.
    ConfigError for an unknown name; :class:`~selfevolve.envs.suites.Unavailable` (a ConfigError) for a suite's
    game that cannot run on this machine, with the reason."""
    if not isinstance(name, str):
        raise ConfigError(f"env name must be a string, got {name!r}")
    key = name.strip().lower()
    if key in ENVS:
        return ENVS[key]
    if ":" in key:
        from selfevolve.envs.suites import suite_class

        return suite_class(name)
    from selfevolve.envs.suites import FORMS

    raise ConfigError(f"unknown env {name!r}; allowed: {', '.join(sorted(ENVS))}, or a suite's game: {FORMS}")


def check_env_config(env_cls: type[TextEnv], env_name: str, options: dict, eval_options: dict | None) -> None:
    """``env.<option>`` and ``eval.env.<option>`` keys must be options of the class that is used (a registered
    one or the caller's own TextEnv subclass), checked before anything slow starts."""
    allowed = env_options(env_cls)
    for key in options:
        if key not in allowed:
            raise ConfigError(f"env.{key}: not an option of env {env_name!r}; allowed: {', '.join(['name', *allowed])}")
    for key in eval_options or {}:
        if key not in allowed:  # the environment is fixed by env.name: only its options may change
            raise ConfigError(f"eval.env.{key}: not an option of env {env_name!r}; allowed: {', '.join(allowed)}")


def _params(cls: type) -> tuple[dict[str, inspect.Parameter], bool]:
    """Keyword-settable constructor parameters, and whether the constructor takes ``**kwargs``."""
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return {}, True
    params, var_kw = {}, False
    for name, p in sig.parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            continue
        if p.kind == p.VAR_KEYWORD:
            var_kw = True
            continue
        params[name] = p
    return params, var_kw


def env_options(cls: type[TextEnv]) -> dict[str, Any]:
    """The constructor options of an environment class and their defaults (``inspect.Parameter.empty`` if none)."""
    return {name: p.default for name, p in _params(cls)[0].items()}


def _check_type(env_name: str, key: str, value: Any, default: Any) -> None:
    """A value must have the kind of its default (ints for ints, numbers for floats, lists for tuples...)."""
    if default is inspect.Parameter.empty or default is None:
        return
    ok = True
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif isinstance(default, (tuple, list)):
        ok = isinstance(value, (tuple, list))
    elif isinstance(default, str):
        ok = isinstance(value, str)
    if not ok:
        raise ConfigError(
            f"env {env_name!r}: option {key!r} must be of type {type(default).__name__} "
            f"(default {default!r}), got {value!r}"
        )


def make_env(name_or_class: str | type[TextEnv], **options: Any) -> TextEnv:
    """Build an environment from a name (see :func:`env_class`) or a :class:`TextEnv` subclass.

    Unknown names, unknown options and wrong-typed values raise :class:`~selfevolve.errors.ConfigError`
    naming the culprit and what is allowed.
    """
    if isinstance(name_or_class, str):
        cls = env_class(name_or_class)
    elif isinstance(name_or_class, type) and issubclass(name_or_class, TextEnv):
        cls = name_or_class
    else:
        raise ConfigError(
            f"env must be one of {', '.join(sorted(ENVS))} or a TextEnv subclass, got {name_or_class!r}"
        )
    env_name = getattr(cls, "name", cls.__name__)
    params, var_kw = _params(cls)
    for key, value in options.items():
        if key not in params:
            if var_kw:
                continue
            allowed = ", ".join(params) or "(none)"
            raise ConfigError(f"unknown option {key!r} for env {env_name!r}; allowed options: {allowed}")
        _check_type(env_name, key, value, params[key].default)
    try:
        return cls(**options)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"env {env_name!r}: bad options {options!r}: {e}") from e
