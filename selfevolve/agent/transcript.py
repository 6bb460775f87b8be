"""An episode as text: the request, then each action and the world's answer.

One format for every reader of a finished or partial episode: SEER embeds it on both sides of its similarity
(a history H_t and a stored trajectory, ``experience/records.py``), and the LLM judge reads it
(``rewards/judge.py``).
"""

from __future__ import annotations

from selfevolve.agent.parsing import parse_action
from selfevolve.types import Step

MAX_RESULT_CHARS = 600  # a result longer than this is cut in the embedded text (MiniLM reads 256 word pieces)


def history_text(query: str, steps: list[Step]) -> str:
    """``Request: ...`` then ``Action: ... / Result: ...`` per step (the text E_H and E_τ embed)."""
    lines = [f"Request: {query}"]
    for s in steps:
        lines.append(f"Action: {parse_action(s.action_text)}")
        obs = s.observation if len(s.observation) <= MAX_RESULT_CHARS else s.observation[:MAX_RESULT_CHARS] + "…"
        lines.append(f"Result: {obs}")
    return "\n".join(lines)
