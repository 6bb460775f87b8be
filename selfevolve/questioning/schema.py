"""The task writer's output schema as grammars for constrained decoding (``models/constrained.py``;
``questioning.constrained``): a local writer's reply is then always a JSON task list of the shape
``parse_tasks`` reads, whatever the model would have written instead.

- a grid game (:func:`game_tasks`): ``[{"query": "... row R, column C.", "confidence": 0.9, "action_sequence":
  ["Move", ...]}, ...]`` — the query's words are the model's, but it must end by naming a cell of the board (a
  task's goal must be a cell, ``games.named_target``), and the moves are the game's;
- a tool world (:func:`tool_tasks`): ``[{"query": "...", "confidence": 0.9, "action_sequence": [{"name": TOOL,
  "arguments": {REQUIRED: VALUE, ...}}, ..., {"name": "finish", "arguments": {"answer": "..."}}]}]`` — tool names
  from the world, each call with that tool's required arguments (strings as JSON strings, integers as digits),
  the last call ``finish``.

The grammars fix the format only; the filters (``filters.py``, ``grid_tasks.check``) still decide whether a task runs,
is grounded and verifies.
"""

from __future__ import annotations

from selfevolve.models.constrained import Free, Lit, OneOf

CONFIDENCES = ("0.5", "0.7", "0.9")
DIGITS = "0123456789"


def _more(i: int, n: int):
    """After item ``i`` of at most ``n``: another (", ") or the end ("]"); the last one must end."""
    if i == n - 1:
        yield Lit("]")
        return "]"
    return (yield OneOf([", ", "]"]))


def game_tasks(moves, height: int, width: int, n_tasks: int, max_moves: int, query_tokens: int = 12):
    """A grammar factory for a grid game's task list (see the module docstring)."""
    move_options = [f'"{m}"' for m in moves]

    def grammar():
        yield Lit("[")
        for i in range(n_tasks):
            yield Lit('{"query": "')
            yield Free(end=" row", max_tokens=query_tokens)
            # the separator is part of each option so that "1," and "10," are both reachable (prefix-free)
            yield OneOf([f" {r}," for r in range(1, height + 1)])
            yield Lit(" column")
            yield OneOf([f" {c}." for c in range(1, width + 1)])
            yield Lit('", "confidence": ')
            yield OneOf(CONFIDENCES)
            yield Lit(', "action_sequence": [')
            for j in range(max_moves):
                yield OneOf(move_options)
                if (yield from _more(j, max_moves)) == "]":
                    break
            yield Lit("}")
            if (yield from _more(i, n_tasks)) == "]":
                return
    return grammar


def tool_tasks(toolset, n_tasks: int, max_calls: int, query_tokens: int = 32, value_tokens: int = 12):
    """A grammar factory for a tool world's task list (see the module docstring)."""
    tools = [t for t in toolset if t.name != "finish"]

    def call_arguments(tool):
        schema = tool.parameters
        props = schema.get("properties", {})
        required = list(schema.get("required", []))
        yield Lit('", "arguments": {')
        for k, name in enumerate(required):
            last = k == len(required) - 1
            yield Lit(f'"{name}": ')
            if props.get(name, {}).get("type") in ("integer", "number"):
                # digits, ended by the token that follows a number here: "," before the next key, "}" at the end
                yield Free(end="}" if last else ",", max_tokens=6, only=DIGITS)
                if not last:
                    yield Lit(" ")
                continue
            yield Lit('"')
            yield Free(end='"', max_tokens=value_tokens)
            yield Lit("}" if last else ", ")
        if not required:
            yield Lit("}")

    def grammar():
        yield Lit("[")
        for i in range(n_tasks):
            yield Lit('{"query": "')
            yield Free(end='"', max_tokens=query_tokens)
            yield Lit(', "confidence": ')
            yield OneOf(CONFIDENCES)
            yield Lit(', "action_sequence": [')
            for j in range(max_calls):
                names = [t.name for t in tools] if j < max_calls - 1 else []
                yield Lit('{"name": "')
                name = yield OneOf([*names, "finish"])
                if name == "finish":
                    yield Lit('", "arguments": {"answer": "')
                    yield Free(end='"', max_tokens=value_tokens)
                    yield Lit("}}]")
                    break
                yield from call_arguments(toolset[name])
                yield Lit("}, ")
            yield Lit("}")
            if (yield from _more(i, n_tasks)) == "]":
                return
    return grammar
