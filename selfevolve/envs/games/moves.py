"""The grid games' answers (FrozenLake, Sokoban): parsing a reply into moves, never raising, and the lines that
tell the model how to answer."""

from __future__ import annotations

import re
import string
from typing import Any

from selfevolve.untrusted import too_long

_STRIP = string.punctuation + string.whitespace + "\"'`*«»“”‘’"
_SPLIT = re.compile(r"[\s,;]+")


def parse_moves(text: Any, names: tuple[str, ...], k: int) -> list[str] | None:
    """Parse an action text into 1..k move names (canonical spelling), or None when it is invalid.

    Case-insensitive; moves are separated by spaces, commas or semicolons; punctuation around a move
    ("Left.", "*Up*") is tolerated. Empty text, an unknown word, more than ``k`` moves or a text longer than
    ``MAX_ACTION_CHARS`` give None. Never raises.
    """
    if not isinstance(text, str) or too_long(text):
        return None
    lookup = {n.lower(): n for n in names}
    out: list[str] = []
    for token in _SPLIT.split(text.strip()):
        token = token.strip(_STRIP)
        if not token:
            continue
        name = lookup.get(token.lower())
        if name is None:
            return None
        out.append(name)
    if not out or len(out) > k:
        return None
    return out


def answer_format(names: tuple[str, ...], k: int) -> str:
    """The answer-format sentence used in instructions and error lines."""
    if k == 1:
        return f"Answer with one word: {', '.join(names[:-1])} or {names[-1]}."
    return f"Answer with 1 to {k} moves separated by spaces, each one of: {', '.join(names)}."


def error_line(names: tuple[str, ...], k: int) -> str:
    """The one-line message that precedes the grid after an invalid answer."""
    if k == 1:
        return f"Invalid action. Answer with one of: {', '.join(names)}."
    return f"Invalid action. Answer with 1 to {k} moves separated by spaces, each one of: {', '.join(names)}."
