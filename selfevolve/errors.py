"""Errors the user can fix. The CLI prints their message and exits with status 2, without a traceback."""


class SelfEvolveError(Exception):
    """Base class of every error caused by the user's input (config, paths, names)."""


class ConfigError(SelfEvolveError):
    """A wrong configuration key or value. The message names the key and what is allowed."""


def unknown_name(kind: str, name: str, allowed) -> ConfigError:
    allowed = sorted(allowed)
    return ConfigError(f"unknown {kind} {name!r}; allowed: {', '.join(allowed)}")


# An error message is one line a person reads: a YAML alias bomb once made one of 226 MB (the repr of the value).
MAX_MESSAGE_CHARS = 1000


def bounded(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message`` cut to ``limit`` characters, saying how much was left out."""
    if len(message) <= limit:
        return message
    return f"{message[:limit]}... ({len(message) - limit:,} more characters)"


def short_repr(value, limit: int = 80) -> str:
    """``repr(value)`` of at most about ``limit`` characters, without building the whole repr of a huge (or
    exponentially shared) structure first."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxdict, r.maxtuple, r.maxset = 3, 6, 6, 6, 6
    r.maxstring, r.maxother, r.maxlong = limit, limit, limit
    return bounded(r.repr(value), limit)
