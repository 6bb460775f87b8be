"""Lexical similarity of short texts: their word sets and the Jaccard similarity of those.

Near-duplicate checks that need no model: self-questioning's duplicate filter and diversity figure
(``questioning/``), and self-navigating's check that an insight does not copy the worked example
(``experience/navigation.py``).
"""

from __future__ import annotations

import re

# A word is a run of letters or digits of any script ([^\W_]: \w without the underscore), joined through ' . _ @ -
# so that ids and emails stay whole. ASCII-only tokens made every two requests without ASCII letters identical
# (Jaccard 1.0 over two empty sets) and cut "Café" to "caf".
_WORD = re.compile(r"[^\W_]+(?:['._@-][^\W_]+)*")


def words(text: str) -> set[str]:
    """Case-folded word tokens of any script (ids and emails kept whole): ``words("Café au lait")`` is
    ``{"café", "au", "lait"}``."""
    return set(_WORD.findall(text.casefold()))


def jaccard(a: str, b: str) -> float:
    """|A ∩ B| / |A ∪ B| over the word sets of two texts (1.0 for two empty texts)."""
    x, y = words(a), words(b)
    return len(x & y) / len(x | y) if x | y else 1.0
