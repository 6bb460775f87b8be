"""The filters a synthesized task must pass (AgentEvolver self-questioning, stage 3), each counted.

In order: the writer's reply must parse (``unparseable``); the query must not be a lexical duplicate of a task
kept before, of an earlier objective, of a held-out test request or of the writer's worked example — Jaccard
similarity ≥ 0.8 over lowercased word sets (``duplicate``); the reference must not be empty
(``empty_reference``); it must not mention what only test tasks are about (``held_out``: the shop's test
customers, their orders, the test variants); and it must **execute**: replayed call by call in a fresh copy of
the world, every call must be well-formed and accepted, and it must end with ``finish`` (``execution``). The execution also gives the task its verifier — the goal the
world checks (``ToolWorld.derived_goal``: the answer, and for the shop the exact rows changed) — and the task is
then replayed once more as a task of the world, which must count it solved (``unverifiable`` otherwise).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from selfevolve.worlds.tools import format_tool_call

FILTERS = ("unparseable", "duplicate", "empty_reference", "held_out", "execution", "unverifiable")
_WORD = re.compile(r"[a-z0-9]+(?:['._@-][a-z0-9]+)*")


def words(text: str) -> set[str]:
    """Lowercased word tokens (ids and emails kept whole)."""
    return set(_WORD.findall(text.casefold()))


def jaccard(a: str, b: str) -> float:
    """|A ∩ B| / |A ∪ B| over the word sets of two texts (1.0 for two empty texts)."""
    x, y = words(a), words(b)
    return len(x & y) / len(x | y) if x | y else 1.0


def is_duplicate(query: str, others: list[str], threshold: float = 0.8) -> bool:
    """A query whose Jaccard similarity with any of ``others`` is ≥ ``threshold``."""
    return any(jaccard(query, o) >= threshold for o in others)


def mentions(marks: set[str], text: str) -> bool:
    """Whether ``text`` holds one of ``marks`` as a whole word/id (case-insensitive)."""
    low = text.casefold()
    return any(re.search(rf"(?<![a-z0-9]){re.escape(m.casefold())}(?![a-z0-9])", low) for m in marks)


@dataclass
class Execution:
    ok: bool
    reason: str = ""
    goal: dict[str, Any] | None = None


def execute(world, seed: int, calls: list[dict[str, Any]]) -> Execution:
    """Replay ``calls`` in ``world`` reset to sandbox ``seed`` (the state the exploration saw): every call must
    be a well-formed call the world accepts, and the last must be ``finish``. Returns the derived goal."""
    if len(calls) > world.max_turns:
        return Execution(False, f"{len(calls)} calls: more than the world's max_turns ({world.max_turns})")
    world.reset(seed)
    for k, c in enumerate(calls, 1):
        result = world.step(format_tool_call(c["name"], c["arguments"]))
        if not result.info.get("valid_action") or result.info.get("tool_error"):
            return Execution(False, f"call {k} ({c['name']}) failed: {result.observation[:120]}")
        if c["name"] == "finish":
            if k != len(calls):
                return Execution(False, f"finish is call {k} of {len(calls)}")
            return Execution(True, goal=json.loads(json.dumps(world.derived_goal(world.answer))))
    return Execution(False, "the reference does not end with finish")


def verifies(world, task) -> bool:
    """The world, playing ``task`` (its goal derived by :func:`execute`), counts its own reference solved."""
    world.load(task)
    for c in task.solution:
        result = world.step(format_tool_call(c["name"], c["arguments"]))
        if result.done:
            return bool(result.info.get("success"))
    return False
