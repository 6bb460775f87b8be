"""A tiny tool framework: typed Python functions become tools an agent calls by name.

Why: a tool world needs three things from every tool — a JSON schema to show the model (OpenAI / Hermes
function-calling style), a strict check of the arguments the model sends, and a way to run it that never
crashes the rollout. All three are derived here from the function itself (signature, type hints and a
Google-style docstring), so a tool is written once, as ordinary Python.

Tool calls use the Qwen / Hermes convention: JSON inside ``<tool_call>...</tool_call>``::

    <tool_call>
    {"name": "get_order", "arguments": {"order_id": "W1001"}}
    </tool_call>

:meth:`ToolSet.run` turns a reply text into an :class:`Outcome`. A reply without exactly one tool call,
malformed JSON, an unknown tool, or missing / extra / wrong-typed arguments give an error observation and
``valid=False`` (the world then applies its penalty); so do a reply longer than ``MAX_ACTION_CHARS``, JSON
nested too deeply and oversized integers (selfevolve/untrusted.py: the call is parsed in linear time). A tool that refuses the call for a domain reason raises
:class:`ToolError`; that is a *valid* call whose observation is the error message (the agent learns the rule).
Nothing raises out of :meth:`ToolSet.run`.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from selfevolve.untrusted import clean_text, loads_json, too_long


class ToolError(Exception):
    """Raised by a tool that refuses a well-formed call (unknown id, order not pending, ...).

    The message is shown to the agent as the observation; the call counts as valid (no format penalty).
    """


class CallError(ValueError):
    """A reply that is not a well-formed call of a known tool. The message is shown to the agent."""


# ---------------------------------------------------------------------------------------------- declaring
def tool(fn: Callable | None = None, *, name: str | None = None, writes: bool = False):
    """Mark a function or method as a tool. ``writes=True`` says it changes the world (used for state keys
    and shown in environment profiles). Usable bare (``@tool``) or with options (``@tool(writes=True)``)."""

    def mark(f: Callable) -> Callable:
        f.__tool__ = {"name": name or f.__name__, "writes": writes}
        return f

    return mark(fn) if fn is not None else mark


_PRIMITIVES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def json_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of a type hint: str/int/float/bool, Literal[...], X | None, unions of primitives,
    list[X] and dict. Anything else is a programming error in the tool's signature (raises TypeError)."""
    if hint in _PRIMITIVES:
        return {"type": _PRIMITIVES[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        kinds = {_PRIMITIVES[type(a)] for a in args}
        return {"type": kinds.pop() if len(kinds) == 1 else sorted(kinds), "enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return json_schema(options[0])
        if all(a in _PRIMITIVES for a in options):
            return {"type": [_PRIMITIVES[a] for a in options]}
        return {"anyOf": [json_schema(a) for a in options]}
    if origin in (list, tuple) or hint in (list, tuple):
        return {"type": "array", "items": json_schema(args[0])} if args else {"type": "array"}
    if origin is dict or hint is dict:
        return {"type": "object"}
    raise TypeError(f"unsupported type for a tool argument: {hint!r}")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {argument: description}).

    The description is the text before ``Args:``/``Returns:`` joined into one line; each ``name: text`` line
    under ``Args:`` (with indented continuation lines) describes an argument.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    section, current = "summary", None
    for line in lines:
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            section = "args"
            continue
        if re.fullmatch(r"(Returns|Raises|Yields|Examples?|Notes?):", stripped):
            section = "other"
            continue
        if section == "summary":
            summary.append(stripped)
        elif section == "args" and stripped:
            m = re.match(r"(\w+)\s*(?:\([^)]*\))?:\s*(.*)", stripped)
            if m and not line.startswith((" " * 8, "\t\t")):
                current = m.group(1)
                params[current] = m.group(2)
            elif current:
                params[current] += " " + stripped
    text = " ".join(" ".join(summary).split())
    return text, {k: " ".join(v.split()) for k, v in params.items()}


# ---------------------------------------------------------------------------------------------- tools
@dataclass(frozen=True)
class Tool:
    """One tool: its name, description, JSON schema of the arguments, and a strict argument validator."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable
    model: type[BaseModel] = field(repr=False)
    writes: bool = False
    method: bool = False  # the function takes the owner object (``self``) first

    @classmethod
    def from_function(cls, fn: Callable, name: str | None = None, writes: bool | None = None) -> "Tool":
        """Build a tool from a function (or an unbound method, whose ``self`` is skipped)."""
        marks = getattr(fn, "__tool__", {})
        name = name or marks.get("name") or fn.__name__
        writes = marks.get("writes", False) if writes is None else writes
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
        description, arg_docs = parse_docstring(fn.__doc__)
        params = list(sig.parameters.values())
        method = bool(params) and params[0].name == "self"
        if method:
            params = params[1:]
        properties: dict[str, Any] = {}
        required: list[str] = []
        fields: dict[str, Any] = {}
        for p in params:
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                raise TypeError(f"tool {name}: *args/**kwargs are not supported ({p.name})")
            if p.name not in hints:
                raise TypeError(f"tool {name}: argument {p.name!r} needs a type hint")
            schema = json_schema(hints[p.name])
            if p.name in arg_docs:
                schema["description"] = arg_docs[p.name]
            properties[p.name] = schema
            if p.default is p.empty:
                required.append(p.name)
                fields[p.name] = (hints[p.name], ...)
            else:
                fields[p.name] = (hints[p.name], p.default)
        parameters = {"type": "object", "properties": properties, "required": required}
        # strict: "3" is not an int and 1 is not a string (a model must learn the types); extra keys rejected
        model = create_model(f"{name}_arguments", __config__=ConfigDict(strict=True, extra="forbid"), **fields)
        return cls(name, description, parameters, fn, model, bool(writes), method)

    def schema(self) -> dict[str, Any]:
        """The OpenAI / Hermes function-calling schema of this tool."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Checked keyword arguments (defaults filled in), or :class:`CallError` naming what is wrong."""
        try:
            parsed = self.model.model_validate(arguments)
        except ValidationError as e:
            raise CallError(f"bad arguments for {self.name}: " + "; ".join(_explain(err) for err in e.errors()))
        return {k: getattr(parsed, k) for k in self.parameters["properties"]}


def _explain(err: dict[str, Any]) -> str:
    """One pydantic error as a short sentence for the model."""
    where = str(err["loc"][0]) if err["loc"] else "arguments"
    if err["type"] == "missing":
        return f"missing argument {where!r}"
    if err["type"] == "extra_forbidden":
        return f"unexpected argument {where!r}"
    return f"argument {where!r}: {err['msg'][0].lower()}{err['msg'][1:]}"


# ---------------------------------------------------------------------------------------------- calls
@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]

    def text(self) -> str:
        """The call as a model writes it (the Qwen / Hermes format)."""
        return format_tool_call(self.name, self.arguments)

    def key(self) -> str:
        """A canonical string of the call (sorted JSON): equal keys mean the same call."""
        return json.dumps({"name": self.name, "arguments": self.arguments}, sort_keys=True, ensure_ascii=False)


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"  # a reply's tool call sits between them


def _unfence(body: str) -> str:
    """The body without a Markdown code fence around it (```json ... ```). String operations, not a regex:
    ``\\s*```$`` rescans every run of whitespace from each of its positions (quadratic on a long one)."""
    body = body.strip()
    if body.startswith("```"):
        body = body[3:]
        if body.startswith("json"):
            body = body[4:]
    if body.endswith("```"):
        body = body[:-3]
    return body.strip()


def parse_tool_call(text: Any) -> ToolCall:
    """The one tool call in a reply, or :class:`CallError`.

    Text around the call is allowed (a model may reason first). A missing ``</tool_call>`` at the very end
    is tolerated (generation may stop on it); ``arguments`` may be an object or a JSON string of one (the
    OpenAI wire format), and may be left out for a tool without arguments.
    """
    if not isinstance(text, str):
        raise CallError("the reply is not text")
    problem = too_long(text)
    if problem:
        raise CallError(problem)
    text = clean_text(text)
    count = text.count(OPEN_TAG)
    if count == 0:
        raise CallError(f'no tool call found. Reply with {OPEN_TAG}{{"name": ..., "arguments": {{...}}}}{CLOSE_TAG}')
    if count > 1:
        raise CallError("make exactly one tool call per turn")
    body = text.split(OPEN_TAG, 1)[1]
    if CLOSE_TAG in body:
        body, rest = body.split(CLOSE_TAG, 1)
        if CLOSE_TAG in rest:
            raise CallError("make exactly one tool call per turn")
    body = _unfence(body)
    try:
        data = loads_json(body)  # bounded nesting and integers, cleaned strings (selfevolve/untrusted.py)
    except json.JSONDecodeError as e:
        raise CallError(f"the tool call is not valid JSON ({e.msg} at character {e.pos})") from None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise CallError('the tool call must be a JSON object {"name": "...", "arguments": {...}}')
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = loads_json(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise CallError("the tool call's arguments are not a JSON object") from None
    if not isinstance(arguments, dict):
        raise CallError("the tool call's arguments must be a JSON object")
    return ToolCall(data["name"], arguments)


@dataclass
class Outcome:
    """What running one reply gave.

    ``valid`` is False for replies that are not a well-formed call of a known tool (the world penalises
    them); ``error`` is True for those and for calls the tool refused (``ToolError``) or that crashed.
    ``call`` holds the validated call (arguments with defaults filled in) when there was one.
    """

    observation: str
    valid: bool
    error: bool
    call: ToolCall | None = None
    value: Any = None


def render_value(value: Any) -> str:
    """A tool's return value as observation text: strings as they are, everything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class ToolSet:
    """An ordered collection of tools with one entry point, :meth:`run`, that never raises."""

    def __init__(self, tools: Iterable[Tool | Callable]):
        self.tools: dict[str, Tool] = {}
        for t in tools:
            t = t if isinstance(t, Tool) else Tool.from_function(t)
            if t.name in self.tools:
                raise ValueError(f"two tools named {t.name!r}")
            self.tools[t.name] = t

    @classmethod
    def from_class(cls, klass: type, last: Iterable[str] = ("finish",)) -> "ToolSet":
        """The ``@tool`` methods of a class and its bases (a subclass's method overrides its base's), in
        definition order, with the names in ``last`` moved to the end."""
        found: dict[str, Callable] = {}
        for base in reversed(klass.__mro__):
            for attr, value in vars(base).items():
                if callable(value) and hasattr(value, "__tool__"):
                    found.pop(attr, None)
                    found[attr] = getattr(klass, attr)
        order = sorted(found, key=lambda a: a in tuple(last))
        return cls(Tool.from_function(found[a]) for a in order)

    def __iter__(self):
        return iter(self.tools.values())

    def __len__(self) -> int:
        return len(self.tools)

    def __contains__(self, name: object) -> bool:
        return name in self.tools

    def __getitem__(self, name: str) -> Tool:
        return self.tools[name]

    @property
    def names(self) -> list[str]:
        return list(self.tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self.tools.values()]

    def prompt_text(self) -> str:
        """The schemas one JSON object per line, as Qwen / Hermes chat templates list them in ``<tools>``."""
        return "\n".join(json.dumps(s, ensure_ascii=False) for s in self.schemas())

    def parse(self, text: Any) -> ToolCall:
        """Parse and validate a reply: a :class:`ToolCall` of a known tool with checked arguments, or
        :class:`CallError`."""
        call = parse_tool_call(text)
        if call.name not in self.tools:
            raise CallError(f"unknown tool {call.name!r}; the tools are: {', '.join(self.tools)}")
        return ToolCall(call.name, self.tools[call.name].validate(call.arguments))

    def run(self, text: Any, owner: Any = None) -> Outcome:
        """Parse, validate and run one reply; never raises. ``owner`` is the object the tool methods of
        :meth:`from_class` are called on."""
        try:
            call = self.parse(text)
        except CallError as e:
            return Outcome(f"Error: {e}", valid=False, error=True)
        t = self.tools[call.name]
        try:
            value = t.function(owner, **call.arguments) if t.method else t.function(**call.arguments)
        except ToolError as e:
            return Outcome(f"Error: {e}", valid=True, error=True, call=call)
        except Exception as e:  # a bug in a tool must not end the training run
            return Outcome(f"Error: {call.name} failed: {type(e).__name__}: {e}", valid=True, error=True, call=call)
        return Outcome(render_value(value), valid=True, error=False, call=call, value=value)
