"""The filters a synthesized task must pass (AgentEvolver self-questioning, stage 3), each counted.

In order: the writer's reply must parse (``unparseable``); the query must not be a lexical duplicate of a task
kept before, of an earlier objective, of a held-out test request or of the writer's worked example — Jaccard
similarity ≥ 0.8 over lowercased word sets (``duplicate``); the reference must not be empty
(``empty_reference``); it must not mention what only test tasks are about (``held_out``: the shop's test
customers, their orders, the test variants); and it must **execute**: replayed call by call in a fresh copy of
the world, every call must be well-formed and accepted, and it must end with ``finish`` (``execution``); in a
tool world, a look-up's answer must be a value its calls returned (``ungrounded``: the writer's answer is its
own, and the verifier below is derived from it). The execution also gives the task its verifier — the goal the
world checks (``ToolWorld.derived_goal``: the answer, and for the shop the exact rows changed) — and the task is
then replayed once more as a task of the world, which must count it solved (``unverifiable`` otherwise).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from selfevolve.envs.tools.base import answers_match
from selfevolve.envs.tools.calls import format_tool_call
from selfevolve.lexical import jaccard

FILTERS = ("unparseable", "duplicate", "empty_reference", "held_out", "execution", "unverifiable")  # every world
# tool worlds also check a look-up's answer against what its reference's calls returned (:func:`grounded`)
TOOL_FILTERS = (*FILTERS[:-1], "ungrounded", FILTERS[-1])


def is_duplicate(query: str, others: list[str], threshold: float = 0.8) -> bool:
    """A query whose Jaccard similarity with any of ``others`` is ≥ ``threshold``."""
    return any(jaccard(query, o) >= threshold for o in others)


def diversity(queries: list[str]) -> float:
    """Mean pairwise Jaccard distance (1 − similarity) of the kept queries; 0 with fewer than two."""
    pairs = list(itertools.combinations(queries, 2))
    return sum(1 - jaccard(a, b) for a, b in pairs) / len(pairs) if pairs else 0.0


def mentions(marks: set[str], text: str) -> bool:
    """Whether ``text`` holds one of ``marks`` as a whole word/id (case-insensitive)."""
    low = text.casefold()
    return any(re.search(rf"(?<![a-z0-9]){re.escape(m.casefold())}(?![a-z0-9])", low) for m in marks)


@dataclass
class Execution:
    ok: bool
    reason: str = ""
    goal: dict[str, Any] | None = None
    results: list[str] = field(default_factory=list)  # the observations of the calls before finish


def scalars(value: Any) -> list[Any]:
    """Every string and number inside a JSON value (keys excluded)."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in scalars(v)]
    if isinstance(value, list):
        return [x for v in value for x in scalars(v)]
    return [] if value is None else [value]


def grounded(answer: Any, results: list[str]) -> bool:
    """Whether a look-up's final answer is something its reference's calls returned (``ungrounded`` otherwise):
    equal to a value in one of the JSON results, or, as a list ``"a, b"``, each part equal to one — equal as the
    worlds compare answers (:func:`~selfevolve.envs.tools.base.answers_match`), so grounding and the derived verifier
    agree on what an answer is. Execution only shows that a reference runs; the answer is the writer's own, and
    the 135M writer's are mostly invented (``How many rows of the table are there?`` → ``10`` after a call that
    returned ``"rows": 80``), which the derived verifier would then reward."""
    if not str(answer).strip():
        return False
    values = []
    for text in results:
        for line in text.splitlines():
            try:
                values += scalars(json.loads(line))
            except json.JSONDecodeError:
                continue
    if any(answers_match(answer, v) for v in values):
        return True
    parts = str(answer).split(",")
    return len(parts) > 1 and all(any(answers_match(p, v) for v in values) for p in parts)


def execute(world, seed: int, calls: list[dict[str, Any]]) -> Execution:
    """Replay ``calls`` in ``world`` reset to sandbox ``seed`` (the state the exploration saw): every call must
    be a well-formed call the world accepts, and the last must be ``finish``. Returns the derived goal."""
    if len(calls) > world.max_turns:
        return Execution(False, f"{len(calls)} calls: more than the world's max_turns ({world.max_turns})")
    world.reset(seed)
    results = []
    for k, c in enumerate(calls, 1):
        result = world.step(format_tool_call(c["name"], c["arguments"]))
        if not result.info.get("valid_action") or result.info.get("tool_error"):
            return Execution(False, f"call {k} ({c['name']}) failed: {result.observation[:120]}")
        if c["name"] == "finish":
            if k != len(calls):
                return Execution(False, f"finish is call {k} of {len(calls)}")
            return Execution(True, goal=json.loads(json.dumps(world.derived_goal(world.answer))), results=results)
        results.append(result.observation)
    return Execution(False, "the reference does not end with finish")


def verifies(world, task) -> bool:
    """The world, playing ``task`` (its goal derived by :func:`execute`), counts its own reference solved."""
    world.load(task)
    for c in task.solution:
        result = world.step(format_tool_call(c["name"], c["arguments"]))
        if result.done:
            return bool(result.info.get("success"))
    return False
