"""Lexical similarity of short texts: their word sets and the Jaccard similarity of those.

Near-duplicate checks that need no model: self-questioning's duplicate filter and diversity figure
(``questioning/``), and self-navigating's check that an insight does not copy the worked example
(``experience/navigation.py``).
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9]+(?:['._@-][a-z0-9]+)*")


def words(text: str) -> set[str]:
    """Lowercased word tokens (ids and emails kept whole)."""
    return set(_WORD.findall(text.casefold()))


def jaccard(a: str, b: str) -> float:
    """|A ∩ B| / |A ∪ B| over the word sets of two texts (1.0 for two empty texts)."""
    x, y = words(a), words(b)
    return len(x & y) / len(x | y) if x | y else 1.0
