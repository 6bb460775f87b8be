"""Tool-use worlds: agents that call tools over many turns, on a real SQLite database and on local tables.

- :mod:`~selfevolve.worlds.tools`: typed Python functions as tools (JSON schemas from signatures and
  docstrings), ``<tool_call>`` parsing and safe execution;
- :mod:`~selfevolve.worlds.base`: :class:`ToolWorld`, the :class:`~selfevolve.envs.TextEnv` whose actions are
  tool calls, and task files (a world's tasks are requests: :class:`selfevolve.types.Task`);
- :mod:`~selfevolve.worlds.shop`: :class:`ShopEnv`, tau-bench-like customer service on SQLite;
- :mod:`~selfevolve.worlds.tables`: :class:`TablesEnv`, ToolQA-like questions over local tables;
- :mod:`~selfevolve.worlds.profile`: environment profiles (``SHOP_PROFILE``, ``TABLES_PROFILE``) as data.
"""

import selfevolve.envs  # noqa: F401  (first: it registers the worlds, see the import cycle note there)
from selfevolve.types import Task
from selfevolve.worlds.base import ToolWorld, answers_match, load_tasks, save_tasks
from selfevolve.worlds.profile import Entity, EnvProfile, Operation
from selfevolve.worlds.shop import SHOP_PROFILE, ShopEnv
from selfevolve.worlds.tables import TABLES_PROFILE, TablesEnv
from selfevolve.worlds.tools import (
    CallError,
    Outcome,
    Tool,
    ToolCall,
    ToolError,
    ToolSet,
    format_tool_call,
    parse_tool_call,
    tool,
)

__all__ = [
    "SHOP_PROFILE", "TABLES_PROFILE", "CallError", "Entity", "EnvProfile", "Operation", "Outcome", "ShopEnv",
    "TablesEnv", "Task", "Tool", "ToolCall", "ToolError", "ToolSet", "ToolWorld", "answers_match",
    "format_tool_call", "load_tasks", "parse_tool_call", "save_tasks", "tool",
]
