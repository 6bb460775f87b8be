"""Turning the model's reply text into the action text an environment receives.

Two forms are accepted: a bare action (``Left``) and the reasoning form
``<think>...</think><answer>Left</answer>``. A reply that opens the reasoning form but never gives an answer
yields an empty action, which the environment treats as invalid (a penalty, never a crash).

The tags are found by one pass over the tag positions, not by ``<think>.*?</think>``-style patterns: those
rescan the rest of the text from every unclosed tag, which took over 20 s on a 1 MB reply of ``<answer>``s.
"""

from __future__ import annotations

import re

_ANSWER_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
_THINK_TAG = re.compile(r"<(/?)think>", re.IGNORECASE)
_ANY_TAG = re.compile(r"</?(?:think|answer)>", re.IGNORECASE)


def _answer(text: str) -> str | None:
    """The text between the first ``<answer>`` and the first ``</answer>`` after it (what a non-greedy
    ``<answer>(.*?)</answer>`` search finds: if the first opening tag has no closing tag after it, no later
    one has either), or None."""
    opening = _ANSWER_OPEN.search(text)
    if opening is None:
        return None
    closing = _ANSWER_CLOSE.search(text, opening.end())
    return None if closing is None else text[opening.end():closing.start()]


def _without_think(text: str) -> str:
    """``text`` without its closed ``<think>...</think>`` blocks, as ``re.sub(r"<think>.*?</think>", "")``
    would give: a block runs from an opening tag to the first closing tag after it; a closing tag outside a
    block and a last, unclosed block stay."""
    kept, pos, opened = [], 0, None
    for tag in _THINK_TAG.finditer(text):
        closing = bool(tag.group(1))
        if opened is None and not closing:
            opened = tag.start()
        elif opened is not None and closing:
            kept.append(text[pos:opened])
            pos, opened = tag.end(), None
    kept.append(text[pos:])
    return "".join(kept)


def parse_action(text: str) -> str:
    """The action inside ``<answer>``, else the reply without a closed ``<think>`` block, stripped."""
    if not isinstance(text, str):
        return ""
    answer = _answer(text)
    if answer is not None:
        return answer.strip()
    rest = _without_think(text)
    if _ANY_TAG.search(rest):
        return ""  # an unclosed tag: malformed
    return rest.strip()


def strip_think(text: str) -> str:
    """The reply without its closed ``<think>...</think>`` blocks (the reasoning context shows earlier replies
    this way)."""
    return _without_think(text).strip()
