"""Tool-use worlds: agents that call tools over many turns, on a real SQLite database and on local tables.

- :mod:`~selfevolve.envs.tools.calls`: typed Python functions as tools (JSON schemas from signatures and
  docstrings), ``<tool_call>`` parsing and safe execution;
- :mod:`~selfevolve.envs.tools.base`: :class:`ToolWorld`, the :class:`~selfevolve.envs.TextEnv` whose actions
  are tool calls, answer checking and the system prompt (a world's tasks are requests,
  :class:`selfevolve.types.Task`, read from task files: ``envs/task_files.py``);
- :mod:`~selfevolve.envs.tools.shop`: :class:`ShopEnv`, tau-bench-like customer service on SQLite;
- :mod:`~selfevolve.envs.tools.tables`: :class:`TablesEnv`, ToolQA-like questions over local tables.

Their profiles (``SHOP_PROFILE``, ``TABLES_PROFILE``) are :class:`~selfevolve.envs.profile.EnvProfile` data.
Before 0.2 this package was ``selfevolve.worlds``; the names are the same.
"""

from selfevolve.envs.profile import Entity, EnvProfile, Operation
from selfevolve.envs.task_files import load_tasks, save_tasks
from selfevolve.envs.tools.base import ToolWorld, answers_match
from selfevolve.envs.tools.calls import (
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
from selfevolve.envs.tools.shop import SHOP_PROFILE, ShopEnv
from selfevolve.envs.tools.tables import TABLES_PROFILE, TablesEnv
from selfevolve.types import Task

__all__ = [
    "SHOP_PROFILE", "TABLES_PROFILE", "CallError", "Entity", "EnvProfile", "Operation", "Outcome", "ShopEnv",
    "TablesEnv", "Task", "Tool", "ToolCall", "ToolError", "ToolSet", "ToolWorld", "answers_match",
    "format_tool_call", "load_tasks", "parse_tool_call", "save_tasks", "tool",
]
