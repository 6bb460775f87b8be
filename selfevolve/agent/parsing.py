"""Turning the model's reply text into the action text an environment receives.

Two forms are accepted: a bare action (``Left``) and the reasoning form
``<think>...</think><answer>Left</answer>``. A reply that opens the reasoning form but never gives an answer
yields an empty action, which the environment treats as invalid (a penalty, never a crash).
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def parse_action(text: str) -> str:
    """The action inside ``<answer>``, else the reply without a closed ``<think>`` block, stripped."""
    m = _ANSWER.search(text)
    if m:
        return m.group(1).strip()
    if re.search(r"</?(think|answer)>", _THINK.sub("", text), re.IGNORECASE):
        return ""  # an unclosed tag: malformed
    return _THINK.sub("", text).strip()


def strip_think(text: str) -> str:
    """The reply without its closed ``<think>...</think>`` blocks (the reasoning context shows earlier replies
    this way)."""
    return _THINK.sub("", text).strip()
