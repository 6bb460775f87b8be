"""Errors the user can fix. The CLI prints their message and exits with status 2, without a traceback."""


class SelfEvolveError(Exception):
    """Base class of every error caused by the user's input (config, paths, names)."""


class ConfigError(SelfEvolveError):
    """A wrong configuration key or value. The message names the key and what is allowed."""


def unknown_name(kind: str, name: str, allowed) -> ConfigError:
    allowed = sorted(allowed)
    return ConfigError(f"unknown {kind} {name!r}; allowed: {', '.join(allowed)}")
