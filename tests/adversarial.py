"""Adversarial model output, shared by tests/test_adversarial.py and benchmarks/bench_adversarial.py: the
committed corpus of cases that once crashed or stalled something, every parser of model text with the contract
it keeps, and the checks an environment step must pass.

The corpus (tests/data/adversarial_actions.jsonl) stores each case as ``parts``: ``[[fragment, times], ...]``
joined in order, so a megabyte case costs a line of the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from selfevolve.agent.context import parse_decision
from selfevolve.agent.parsing import parse_action, strip_think
from selfevolve.envs.base import StepResult, TextEnv
from selfevolve.envs.games.frozenlake import MOVES as LAKE_MOVES
from selfevolve.envs.games.moves import parse_moves
from selfevolve.envs.games.sokoban import MOVES as BOX_MOVES
from selfevolve.envs.tools.base import answers_match, parse_number
from selfevolve.envs.tools.calls import CallError, ToolCall, ToolError, parse_tool_call
from selfevolve.envs.tools.shop import ShopEnv
from selfevolve.envs.tools.tables import TablesEnv, calculate_expression
from selfevolve.experience.intent import parse_intent
from selfevolve.experience.navigation import parse_insights
from selfevolve.models.llm import parse_json_list
from selfevolve.questioning.synthesize import parse_tasks
from selfevolve.rewards.attribution import MAX_RATIONALE, parse_step_judgments
from selfevolve.rewards.judge import parse_reward
from selfevolve.untrusted import clean_text, loads_json

CORPUS = Path(__file__).parent / "data" / "adversarial_actions.jsonl"


def corpus() -> list[tuple[str, str]]:
    """``(name, text)`` of every committed case."""
    out = []
    for line in CORPUS.read_text().splitlines():
        case = json.loads(line)
        out.append((case["name"], "".join(fragment * times for fragment, times in case["parts"])))
    return out


def encodable(text: Any) -> bool:
    """Whether ``text`` is a str that UTF-8 can encode (what logs, SQLite and hashing need)."""
    if not isinstance(text, str):
        return False
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


# Pieces that parsers treat specially; the fuzz strategies and the benchmark's generator build actions from them.
FRAGMENTS = ["<think>", "</think>", "<answer>", "</answer>", "<ANSWER>", "<tool_call>", "</tool_call>", "```json",
             "```", "{", "}", "[", "]", '"', "\\", "\\u", "\\ud800", ":", ",", " ", "\n", "\t", "\x00", "9", "-",
             "1e999", "NaN", "Left", "Up", "Right", "Down", "finish", "get_order", "calculate", "round(", "**",
             '"name"', '"arguments"', "<reward>", "</reward>", "/100", "score:", "\u00b2", "\U0001f600"]
TOOLS = ["finish", "get_order", "find_user_by_email", "cancel_order", "calculate", "filter_rows", "load_table",
         "aggregate", "nope"]


def random_action(rng) -> str:
    """One adversarial action from ``rng`` (a ``random.Random``): a tag soup, a long repetition, a tool call
    around random (deep, huge-number, surrogate-laden) JSON, or random code points — for the benchmark, which
    needs many cheap samples where the tests use hypothesis."""
    kind = rng.randrange(4)
    if kind == 0:
        return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randrange(40)))
    if kind == 1:
        return rng.choice(FRAGMENTS) * rng.randrange(1, 20_000)
    if kind == 2:
        depth = rng.choice([1, 3, 30, 33, 2_000])
        leaf = rng.choice(['"\\ud800"', "9" * rng.choice([3, 40, 5_000]), "1e999", "NaN", '"x"', "[]"])
        args = '{"a": ' * depth + leaf + "}" * depth
        body = f'{{"name": "{rng.choice(TOOLS)}", "arguments": {args}}}'
        return f"<tool_call>{body}{rng.choice(['</tool_call>', '', '</tool_call></tool_call>'])}"
    return "".join(chr(rng.choice([rng.randrange(0x20, 0x7F), rng.randrange(0xD800, 0xE000), rng.randrange(0x110000)]))
                   for _ in range(rng.randrange(200)))


# ---- parsers: each returns None when its contract holds, else raises AssertionError ---------------------------
def _tool_call(parse: Callable[[str], ToolCall]) -> Callable[[str], None]:
    def check(text: str) -> None:
        try:
            call = parse(text)
        except CallError as e:
            assert encodable(str(e)), "unencodable error message"
            return
        assert isinstance(call, ToolCall) and encodable(call.key()), call

    return check


def _number(text: str) -> None:
    value = parse_number(text)
    assert value is None or isinstance(value, float), value


def _json(text: str) -> None:
    try:
        value = loads_json(text)
    except json.JSONDecodeError:
        return
    assert encodable(json.dumps(value, ensure_ascii=False, allow_nan=False))


def _calculator(text: str) -> None:
    try:
        value = calculate_expression(text)
    except ToolError:
        return
    assert isinstance(value, (int, float)) and math.isfinite(value), value


def _optional_list(fn: Callable[[str], Any]) -> Callable[[str], None]:
    def check(text: str) -> None:
        value = fn(text)
        assert value is None or (isinstance(value, list) and all(isinstance(v, dict) for v in value)), value

    return check


def _returns(fn: Callable[[str], Any], ok: Callable[[Any], bool]) -> Callable[[str], None]:
    def check(text: str) -> None:
        value = fn(text)
        assert ok(value), value

    return check


_INTENTS = list(ShopEnv.intents)

PARSERS: dict[str, Callable[[str], None]] = {
    "parse_action": _returns(parse_action, lambda v: isinstance(v, str)),
    "strip_think": _returns(strip_think, lambda v: isinstance(v, str)),
    "parse_tool_call": _tool_call(parse_tool_call),
    "shop.toolset.parse": _tool_call(ShopEnv.toolset.parse),
    "tables.toolset.parse": _tool_call(TablesEnv.toolset.parse),
    "parse_moves(frozenlake)": _returns(lambda t: parse_moves(t, LAKE_MOVES, 3), lambda v: v is None or
                                        (isinstance(v, list) and 1 <= len(v) <= 3)),
    "parse_moves(sokoban)": _returns(lambda t: parse_moves(t, BOX_MOVES, 1), lambda v: v is None or len(v) == 1),
    "judge.parse_reward": _returns(parse_reward, lambda v: v is None or (isinstance(v, int) and 0 <= v <= 100)),
    "attribution.parse_step_judgments": _returns(
        lambda t: parse_step_judgments(t, 4),
        lambda v: v[1] in ("numbered", "bare", "none") and len(v[0]) == 4 and all(
            label in ("GOOD", "BAD", None) and encodable(why) and len(why) <= MAX_RATIONALE for label, why in v[0])),
    "intent.parse_intent": _returns(lambda t: parse_intent(t, _INTENTS), lambda v: v is None or v in _INTENTS),
    "llm.parse_json_list": _optional_list(parse_json_list),
    "navigation.parse_insights": _optional_list(parse_insights),
    "questioning.parse_tasks": _optional_list(parse_tasks),
    "context.parse_decision": _returns(lambda t: parse_decision(t, 6), lambda v: v is None or isinstance(v, tuple)),
    "worlds.parse_number": _number,
    "worlds.answers_match": _returns(lambda t: (answers_match(t, "42.5"), answers_match(t, "delivered")),
                                     lambda v: all(isinstance(x, bool) for x in v)),
    "tables.calculate_expression": _calculator,
    "untrusted.loads_json": _json,
    "untrusted.clean_text": _returns(clean_text, encodable),
}


# ---- environments ---------------------------------------------------------------------------------------------
def check_step(env: TextEnv, action: str) -> StepResult:
    """Step ``env`` with ``action`` and check what every environment promises: a StepResult with encodable text,
    a finite reward, a bool validity (an invalid action costs the env's penalty), a JSON-serialisable info and
    an encodable state key — and, for tool worlds, no tool that failed with anything but a ToolError."""
    result = env.step(action)
    assert isinstance(result, StepResult)
    assert encodable(result.observation), "observation"
    assert isinstance(result.reward, float) and math.isfinite(result.reward), result.reward
    assert isinstance(result.done, bool)
    valid = result.info["valid_action"]
    assert isinstance(valid, bool) and isinstance(result.info["success"], bool)
    if not valid:
        assert result.reward == -env.invalid_penalty, result.reward
    assert encodable(json.dumps(result.info, ensure_ascii=False)), "info"
    assert encodable(env.state_key()) and encodable(env.render()), "state key or rendering"
    assert " failed: " not in result.observation, result.observation[:300]  # a tool bug, swallowed by ToolSet.run
    return result
