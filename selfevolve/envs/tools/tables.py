"""The tables world: ToolQA-like questions answered by loading, filtering and aggregating local tables.

The agent gets a question with one exact answer ("What percentage of Coastal flights were cancelled?"), and
tools over three generated tables (flights, employees, airports): load a table, list its columns, filter the
loaded rows, read a column's values, aggregate (count / sum / mean / min / max, optionally grouped), a
calculator, and ``finish(answer)``. The answer is checked by the world: numbers within a cent (rounding),
text case-insensitively.

The tools keep a small state, as ToolQA's do: the loaded table and the filters applied to it since it was
loaded. Filters accumulate (each narrows the selection); loading a table again starts over. There is no SQL
here: filters are Python comparisons on the rows, and the calculator parses arithmetic with ``ast`` (never
``eval``), so no argument can run code.
"""

from __future__ import annotations

import ast
import json
import math
import operator
from typing import Any, Literal

from selfevolve.envs.profile import Entity, EnvProfile
from selfevolve.envs.task_files import load_tasks
from selfevolve.envs.tools.base import ToolWorld, check_seed_option, operations, tool_prompt
from selfevolve.envs.tools.calls import ToolError, ToolSet, format_tool_call, tool
from selfevolve.envs.tools.tables_data import TABLES, tables
from selfevolve.envs.tools.tables_tasks import QUOTAS, generate_tasks
from selfevolve.types import Task

Op = Literal["==", "!=", ">", ">=", "<", "<=", "contains"]
Aggregate = Literal["count", "sum", "mean", "min", "max"]
PREVIEW_ROWS = 3
MAX_VALUES = 20


# ---------------------------------------------------------------------------------------------- calculator
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"round": round, "abs": abs, "min": min, "max": max}
_LIMIT = 1e15  # results beyond this are refused: '9**9**9' must not hang the rollout


def calculate_expression(expression: str) -> float | int:
    """The value of an arithmetic expression: numbers, + - * / // % **, parentheses, and round / abs / min /
    max. Parsed with ``ast`` and evaluated node by node; anything else (names, attributes, strings) is
    refused with :class:`ToolError`."""
    if len(expression) > 300:
        raise ToolError("the expression is too long (300 characters at most)")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: a null byte
        raise ToolError(f"cannot parse {expression!r} as arithmetic") from None
    try:
        value = _evaluate(tree.body)
    except (OverflowError, RecursionError):  # 1e6 ** 64.0; a few hundred nested unary minus signs
        raise ToolError("the result is out of range") from None
    if isinstance(value, float):
        value = round(value, 10)  # 0.1 + 0.2 -> 0.3
        if value.is_integer():
            value = int(value)
    return value


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        if not abs(node.value) <= _LIMIT:  # also NaN: 1e999 parses to inf
            raise ToolError("a number is out of range")
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1e6):
            raise ToolError("the power is too large")
        try:
            result = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ToolError("division by zero") from None
        if isinstance(result, complex) or abs(result) > _LIMIT:
            raise ToolError("the result is out of range")
        return result
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        if node.keywords or not node.args:
            raise ToolError(f"{node.func.id}() takes numbers, e.g. round(2.345, 2)")
        name, n = node.func.id, len(node.args)
        # what each function takes, checked here: min(5) or abs(1, 2) would raise a TypeError from Python itself
        if name == "abs" and n != 1:
            raise ToolError("abs() takes one number, e.g. abs(-3)")
        if name in ("min", "max") and n < 2:
            raise ToolError(f"{name}() takes two or more numbers, e.g. {name}(3, 5)")
        args = [_evaluate(a) for a in node.args]
        if node.func.id == "round" and (len(args) > 2 or (len(args) == 2 and not isinstance(args[1], int))):
            raise ToolError("round(x) or round(x, digits)")
        if node.func.id == "round" and len(args) == 2 and abs(args[1]) > 15:
            raise ToolError("round(x, digits) takes digits from -15 to 15")  # round(1, -10**8) computes 10**10**8
        return _FUNCTIONS[node.func.id](*args)
    raise ToolError(f"only numbers and + - * / // % ** ( ) round abs min max are allowed, not "
                    f"{type(node).__name__}")


# ---------------------------------------------------------------------------------------------- tools
def _kind(value: Any) -> str:
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else "text"


def _matches(cell: Any, op: str, value: Any) -> bool:
    """One filter test; text compares case-insensitively (ordering is alphabetical, which suits ISO dates)."""
    if isinstance(cell, str):
        cell, value = cell.casefold(), value.casefold()
        if op == "contains":
            return value in cell
    return {"==": operator.eq, "!=": operator.ne, ">": operator.gt, ">=": operator.ge, "<": operator.lt,
            "<=": operator.le}[op](cell, value)


class TablesTools:
    """The tables world's tools; a subclass provides ``data`` (table name -> rows), ``current`` (the loaded
    table or None) and ``filters`` (``[column, op, value]`` lists applied since it was loaded)."""

    data: dict[str, tuple[dict[str, Any], ...]]
    current: str | None
    filters: list[list[Any]]

    # ------------------------------------------------------------------ helpers (not tools)
    def _rows_of(self, table: str) -> tuple[dict[str, Any], ...]:
        if table not in self.data:
            raise ToolError(f"no table {table!r}; the tables are: {', '.join(self.data)}")
        return self.data[table]

    def _loaded(self) -> tuple[str, tuple[dict[str, Any], ...]]:
        if self.current is None:
            raise ToolError("no table is loaded: call load_table first")
        return self.current, self.data[self.current]

    def _column(self, column: str) -> str:
        table, rows = self._loaded()
        if column not in rows[0]:
            raise ToolError(f"table {table} has no column {column!r}; its columns are: {', '.join(rows[0])}")
        return _kind(rows[0][column])

    def _selection(self) -> list[dict[str, Any]]:
        _, rows = self._loaded()
        return [r for r in rows if all(_matches(r[c], op, v) for c, op, v in self.filters)]

    # ------------------------------------------------------------------ tools
    @tool
    def list_tables(self) -> list[dict[str, Any]]:
        """List the tables and how many rows each has."""
        return [{"table": name, "rows": len(rows)} for name, rows in self.data.items()]

    @tool
    def load_table(self, table: str) -> dict[str, Any]:
        """Load a table: later filters and aggregates work on it. Loading again clears the filters.

        Args:
            table: the table's name, e.g. "flights".
        """
        rows = self._rows_of(table.strip().lower())
        self.current, self.filters = table.strip().lower(), []
        return {"table": self.current, "rows": len(rows), "columns": list(rows[0])}

    @tool
    def list_columns(self, table: str) -> list[dict[str, Any]]:
        """List a table's columns with their type (number or text) and up to 5 example values.

        Args:
            table: the table's name, e.g. "employees".
        """
        rows = self._rows_of(table.strip().lower())
        out = []
        for column, first in rows[0].items():
            examples = list(dict.fromkeys(r[column] for r in rows))[:5]
            out.append({"column": column, "type": _kind(first), "examples": examples})
        return out

    @tool
    def filter_rows(self, column: str, op: Op, value: str | float) -> dict[str, Any]:
        """Keep only the loaded rows where `column op value` holds; filters add up until the next load_table.

        Args:
            column: the column to test, e.g. "origin".
            op: the comparison; "contains" looks for text inside a text column. Text compares ignoring case.
            value: the value to compare with, e.g. "BOS" or 120.
        """
        kind = self._column(column)
        if kind == "number":
            if op == "contains":
                raise ToolError(f"'contains' needs a text column; {column} holds numbers")
            try:
                value = float(value)
            except ValueError:
                raise ToolError(f"column {column} holds numbers; {value!r} is not a number") from None
        elif not isinstance(value, str):
            value = str(int(value)) if float(value).is_integer() else str(value)
        self.filters.append([column, op, value])
        selected = self._selection()
        return {"table": self.current, "rows": len(selected), "filters": [" ".join(map(str, f)) for f in self.filters],
                "first_rows": selected[:PREVIEW_ROWS]}

    @tool
    def get_value(self, column: str) -> dict[str, Any]:
        """Read a column's values in the selected rows (the first 20, in table order).

        Args:
            column: the column to read, e.g. "dep_time".
        """
        self._column(column)
        selected = self._selection()
        out: dict[str, Any] = {"column": column, "rows": len(selected),
                               "values": [r[column] for r in selected[:MAX_VALUES]]}
        if len(selected) > MAX_VALUES:
            out["more"] = len(selected) - MAX_VALUES
        return out

    @tool
    def aggregate(self, function: Aggregate, column: str | None = None, group_by: str | None = None) -> dict[str, Any]:
        """Count the selected rows, or sum / average / take the min or max of a column, overall or per group.

        Args:
            function: count, sum, mean, min or max.
            column: the column to aggregate (not needed for count).
            group_by: a column to group by: one result per distinct value.
        """
        if function != "count":
            if column is None:
                raise ToolError(f"{function} needs a column")
            if self._column(column) == "text" and function in ("sum", "mean"):
                raise ToolError(f"{function} needs a number column; {column} holds text")
        elif column is not None:
            self._column(column)
        if group_by is not None:
            self._column(group_by)
        selected = self._selection()
        if group_by is None:
            return {"function": function, "column": column, "rows": len(selected),
                    "value": _aggregate(function, column, selected)}
        groups: dict[Any, list[dict[str, Any]]] = {}
        for r in selected:
            groups.setdefault(r[group_by], []).append(r)
        return {"function": function, "column": column, "group_by": group_by,
                "groups": {str(k): _aggregate(function, column, groups[k]) for k in sorted(groups)}}

    @tool
    def calculate(self, expression: str) -> dict[str, Any]:
        """Evaluate arithmetic: numbers, + - * / // % ** and parentheses, round(x, digits), abs, min, max.

        Args:
            expression: e.g. "(12 / 80) * 100" or "round(95310.5 - 71240.25, 2)".
        """
        return {"expression": expression, "result": calculate_expression(expression)}


def _aggregate(function: str, column: str | None, rows: list[dict[str, Any]]) -> Any:
    if function == "count":
        return len(rows)
    if not rows:
        raise ToolError(f"no rows are selected: nothing to {function}")
    values = [r[column] for r in rows]
    if function == "sum":
        return round(math.fsum(values), 4)
    if function == "mean":
        return round(math.fsum(values) / len(values), 4)
    return min(values) if function == "min" else max(values)


# ---------------------------------------------------------------------------------------------- the env
def _instructions(toolset: ToolSet, listing: bool = True) -> str:
    intro = (
        "You answer questions about the tables flights, employees and airports using the tools below. "
        "load_table picks a table; filter_rows narrows its rows (filters add up until you load a table again); "
        "get_value reads a column of the selected rows; aggregate counts or computes sum, mean, min or max, "
        "optionally per group; calculate does arithmetic.\n"
        "When you know the answer, call finish with just the answer: a number (rounded to 2 decimals unless the "
        "question says otherwise; no units) or a name exactly as it appears in the table."
    )
    return tool_prompt(intro, toolset, format_tool_call("load_table", {"table": "flights"}), listing)


class TablesEnv(TablesTools, ToolWorld):
    """Question answering over local tables (flights, employees, airports) with load / filter / aggregate tools.

    Options:
        split: "train", "test", "synth" (tasks written by self-questioning, from ``tasks_file``), "all", or several joined by "+" (e.g. "train+synth"): which questions ``reset(seed)`` draws from.
        level: None for both, 1 for the easy questions (one table, a look-up or one aggregate), 2 for the hard
            ones (several aggregates and the calculator, group-by, or two or three tables).
        max_turns: the turn limit; the episode ends unsolved when it is reached.
        invalid_penalty: reward subtracted for a reply that is not a well-formed call of a known tool.
        tool_error_penalty: reward subtracted when a tool refuses a call (no table loaded, an unknown column);
            0 by default.
        data_seed: the seed of the tables (and questions); 0 is the shipped world.
        tasks_file: a JSONL file of extra tasks (:meth:`Task.to_dict` per line) added to the generated ones.

    Observation: the question first, then each tool's result as JSON (errors as ``Error: ...``).
    Reward: 1.0 when ``finish`` gives the right answer, ``-invalid_penalty`` for an invalid reply, 0 otherwise.
    """

    name = "tables"
    levels = (1, 2)

    def __init__(self, split: str = "train", level: int | None = None, max_turns: int = 12,
                 invalid_penalty: float = 0.1, tool_error_penalty: float = 0.0, data_seed: int = 0,
                 tasks_file: str = ""):
        check_seed_option("tables", "data_seed", data_seed)
        self.data_seed, self.tasks_file = data_seed, str(tasks_file or "")
        self.current, self.filters = None, []
        super().__init__(split, level, max_turns, invalid_penalty, tool_error_penalty)

    @property
    def data(self) -> dict[str, tuple[dict[str, Any], ...]]:
        return tables(self.data_seed)  # shared and read-only: the tools never change a row

    def all_tasks(self) -> list[Task]:
        tasks = list(generate_tasks(self.data_seed))
        return tasks + (load_tasks(self.tasks_file) if self.tasks_file else [])

    def begin(self, task: Task) -> None:
        self.current, self.filters = None, []

    def world_snapshot(self) -> tuple[str | None, list[list[Any]]]:
        return self.current, [list(f) for f in self.filters]

    def world_restore(self, snap: tuple[str | None, list[list[Any]]]) -> None:
        self.current, self.filters = snap[0], [list(f) for f in snap[1]]

    def world_key(self) -> str:
        return json.dumps([self.current, self.filters])


TablesEnv.instructions = _instructions(TablesEnv.toolset)
TablesEnv.tool_instructions = _instructions(TablesEnv.toolset, listing=False)


def _examples() -> list[tuple[str, str]]:
    """A three-turn episode on a question no task asks (count a department's employees)."""
    env = TablesEnv()
    n = str(sum(r["department"] == "Support" for r in env.data["employees"]))
    return env.demonstrate(Task("tables-example", split="train", level=1, intent="example",
                                instruction="How many employees work in the Support department?",
                                goal={"answer": n}, solution=[
                                    {"name": "load_table", "arguments": {"table": "employees"}},
                                    {"name": "filter_rows",
                                     "arguments": {"column": "department", "op": "==", "value": "Support"}},
                                    {"name": "finish", "arguments": {"answer": n}}]))


TablesEnv.examples = _examples()


def _columns(table: str) -> tuple[str, ...]:
    return tuple(tables(0)[table][0])


TABLES_PROFILE = EnvProfile(
    name="tables",
    background=(
        "Three small tables of a travel company's records: flights (two weeks of March 2024: date, flight "
        "number, airline, origin and destination airport codes, departure time, duration, distance, delay in "
        "minutes, whether cancelled), employees (name, department, title, city, salary in dollars, hire year, "
        "manager) and airports (code, city, state). Employees work in the cities the airports serve. Questions "
        "have one exact answer found by loading a table, filtering it and aggregating, sometimes across tables "
        "and with arithmetic."
    ),
    entities=(
        Entity("flight", "one scheduled flight on one date", _columns("flights")),
        Entity("employee", "a person in the company directory", _columns("employees")),
        Entity("airport", "an airport and the city it serves", _columns("airports")),
    ),
    operations=operations(TablesEnv.toolset),
    rules=("Filters apply to the loaded table and add up until a table is loaded again.",
           "Text comparisons ignore case; numbers are compared as numbers.",
           "Answers are a number (rounded to 2 decimals) or a name as it appears in the table."),
    intents=tuple(dict.fromkeys(intent for _, intent in QUOTAS)),
    extra={"tables": list(TABLES), "levels": {"1": "easy: one table, a look-up or one aggregate",
                                              "2": "hard: several steps, the calculator, group-by or several tables"}},
)
TablesEnv.intents = TABLES_PROFILE.intents  # the declared intent set (SEER's intent classifier chooses among them)
TablesEnv.profile = TABLES_PROFILE  # what self-questioning explores from (selfevolve/questioning/)
