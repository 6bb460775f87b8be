"""The machinery every tool world shares: answer checking, the system prompt, the profile's operations and
:class:`ToolWorld`, a :class:`TextEnv` whose actions are tool calls (its tasks are read by ``envs/task_files.py``).

Why a base class: the shop and the tables worlds differ in their data and tools, but an episode is the same
thing in both — a user's request as the first observation, one tool call per turn, tool results (or error
messages) as observations, ``finish(answer)`` to end, and success decided by the world from a verifiable goal.
A new world only supplies its tools (``@tool`` methods), its tasks and its goal check.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from abc import abstractmethod
from collections import Counter
from typing import Any, ClassVar

from selfevolve.envs.base import StepResult, TextEnv
from selfevolve.envs.holdout import split_bucket
from selfevolve.envs.profile import Operation
from selfevolve.envs.task_files import SPLITS
from selfevolve.envs.tools.calls import CallError, ToolCall, ToolSet, format_tool_call, tool
from selfevolve.errors import ConfigError
from selfevolve.types import Task
from selfevolve.untrusted import too_long


_ORDER_SEED = 20261121  # fixed: the seed -> task map must never change between runs

def check_seed_option(world: str, option: str, value) -> int:
    """A data-seed constructor option must be a plain integer >= 0 (it picks the generated data)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{world} option {option!r} must be an integer >= 0, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------- answers
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*)?\.?\d+(?:[eE][-+]?\d+)?")
_EDGE = " \t\n\"'`*.,;:!?()[]{}"


def normalise_text(text: Any) -> str:
    """Case-folded, surrounding punctuation and quotes stripped, inner whitespace collapsed."""
    return " ".join(str(text).casefold().split()).strip(_EDGE)


def task_key(task: "Task") -> str:
    """A task's content key: its request as the agent reads it, normalised (case, spaces, edge punctuation)."""
    return normalise_text(task.instruction)


def parse_number(text: Any) -> float | None:
    """A number from an answer: the whole text ('$1,234.50', '12.5%') or else its only number ('the total is
    129.99'); None when there is no number or more than one (a list of guesses is not an answer), or when the
    text is longer than ``MAX_ACTION_CHARS``."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        try:
            return float(text)
        except OverflowError:  # an int beyond 1e308
            return None
    if too_long(str(text)):
        return None
    s = normalise_text(text).replace("$", "").replace("%", "").replace("usd", "").strip()
    try:
        return float(s.replace(",", ""))
    except ValueError:
        pass
    found = _NUMBER.findall(s)
    if len(found) != 1:
        return None
    try:
        return float(found[0].replace(",", ""))
    except ValueError:
        return None


def answers_match(answer: Any, expected: Any, tolerance: float = 0.01) -> bool:
    """Whether an answer equals the expected one: numbers within ``tolerance`` (a cent: expected answers are
    rounded to two decimals, and an agent rounding a value it got to 4 decimals may land one cent off),
    anything else by :func:`normalise_text` equality (case-insensitive)."""
    if expected is None:
        return True
    exp_num = parse_number(expected) if not isinstance(expected, str) or _is_number(expected) else None
    if exp_num is not None:
        got = parse_number(answer)
        return got is not None and abs(got - exp_num) <= tolerance + 1e-9
    return normalise_text(answer) == normalise_text(expected)


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------------- prompts
def tool_prompt(intro: str, toolset: ToolSet, example: str, listing: bool = True) -> str:
    """A tool world's system prompt: ``intro`` (the world and its rules), the call format shown on ``example``
    (a call as the model should write it) and the tools' schemas in ``<tools>``, one per line, as Qwen /
    Hermes chat templates list them. ``listing=False`` leaves the schemas out (``tool_instructions``: for chat
    templates that render them from the ``tools`` argument)."""
    text = (f"{intro.rstrip()}\n"
            f"Call exactly one tool per reply, as JSON inside tags:\n{example}\n"
            "The tool's result comes back as the next message.")
    return f"{text}\nTools:\n<tools>\n{toolset.prompt_text()}\n</tools>" if listing else text


def operations(toolset: ToolSet) -> tuple[Operation, ...]:
    """A profile's operations (``envs/profile.py``), read off a world's tools, so the profile cannot drift from them."""
    return tuple(Operation(t.name, t.description, tuple(t.parameters["properties"]), t.writes) for t in toolset)


# ---------------------------------------------------------------------------------------------- the world
def in_split(task_split: str, split: str) -> bool:
    """Whether a task of ``task_split`` belongs to the env option ``split`` ('all', or splits joined by '+')."""
    return split == "all" or task_split in split.split("+")


def _check_options(world: str, split: str, level: Any, levels: tuple[int, ...], max_turns: Any,
                   invalid_penalty: Any, tool_error_penalty: Any) -> None:
    if split != "all" and (not split or any(part not in SPLITS for part in split.split("+"))):
        raise ConfigError(f"{world} option 'split' must be 'all' or one of {', '.join(SPLITS)}, or several "
                          f"joined by '+' (e.g. 'train+synth'), got {split!r}")
    if level is not None and (isinstance(level, bool) or level not in levels):
        raise ConfigError(f"{world} option 'level' must be null or one of {list(levels)}, got {level!r}")
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise ConfigError(f"{world} option 'max_turns' must be an integer >= 1, got {max_turns!r}")
    for key, value in (("invalid_penalty", invalid_penalty), ("tool_error_penalty", tool_error_penalty)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{world} option {key!r} must be a number, got {value!r}")


class ToolWorld(TextEnv):
    """A :class:`TextEnv` whose actions are tool calls and whose episodes are :class:`Task` s.

    Subclasses define ``@tool`` methods (the world's tools; ``finish(answer)`` is inherited) and implement
    :meth:`all_tasks`; :meth:`goal_reached` too unless the goal is just an answer. Worlds with their own
    state (a database, a loaded table) set it up in :meth:`begin` and give it to snapshots and state keys in
    :meth:`world_snapshot`, :meth:`world_restore` and :meth:`world_key`. A subclass's ``__init__`` takes its
    options as plain keyword arguments (they become config keys) and stores any that :meth:`all_tasks` needs
    before calling ``super().__init__``.

    An episode: ``reset(seed)`` picks task ``seed % n`` of the env's split and level and returns its
    instruction. Each ``step`` takes one reply holding one tool call. Results come back as the observation
    (JSON or text). A reply that is not a well-formed call of a known tool gives ``"Error: ..."``, reward
    ``-invalid_penalty`` and ``info["valid_action"] = False``; a call the tool refuses (an unknown order id,
    an order that is not pending) gives ``"Error: ..."`` with reward ``-tool_error_penalty`` (0 by default)
    but is a valid action. ``finish(answer)`` ends the episode with reward 1.0 if :meth:`goal_reached`, else
    0. The episode also ends, unsolved, after ``max_turns`` steps.

    ``info`` always holds ``success``, ``valid_action``, ``intent``, ``level``, ``task_id``, ``tool_call``
    (``{"name", "arguments"}`` of the validated call, or None) and ``tool_error``.
    """

    name: ClassVar[str] = "toolworld"
    levels: ClassVar[tuple[int, ...]] = (1, 2, 3)
    toolset: ClassVar[ToolSet]  # built for each subclass by __init_subclass__
    intents: ClassVar[tuple[str, ...]] = ()  # the kinds of request (a world's profile lists them)
    profile: ClassVar[Any] = None  # the world described as data (envs/profile.py): self-questioning reads it

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.toolset = ToolSet.from_class(cls)
        cls.tools = cls.toolset.schemas()  # function calling through the chat template (agent/prompt.py)

    # A reply must hold one JSON tool call (~20-60 tokens); the trainer warns below this reply budget.
    min_new_tokens = 48

    def __init__(self, split: str = "train", level: int | None = None, max_turns: int = 10,
                 invalid_penalty: float = 0.1, tool_error_penalty: float = 0.0):
        _check_options(self.name, split, level, self.levels, max_turns, invalid_penalty, tool_error_penalty)
        self.split, self.level, self.max_turns = split, level, max_turns
        self.invalid_penalty, self.tool_error_penalty = float(invalid_penalty), float(tool_error_penalty)
        every = self.all_tasks()
        self.tasks = [t for t in every if in_split(t.split, split) and level in (None, t.level)]
        if split_bucket(split) == "test":  # held out means never seen: no request a training task makes too
            seen = {task_key(t) for t in every if t.split == "train"}
            self.tasks = [t for t in self.tasks if task_key(t) not in seen]
        self._seed_order: list[int] = []  # seed -> task permutation, built on first use (see task_for)
        if not self.tasks:
            raise ConfigError(f"{self.name}: no tasks for split={split!r} level={level!r}")
        self.task: Task | None = None
        self._clear()

    def _clear(self) -> None:
        self.turn, self.done, self.success, self.answer = 0, False, False, None
        self.observation = ""
        self.calls: list[str] = []  # keys of the calls that ran without error, in order
        self.writes: list[str] = []  # the same, for tools that change the world

    # ------------------------------------------------------------------ to implement
    @abstractmethod
    def all_tasks(self) -> list[Task]:
        """Every task of the world (all splits and levels)."""

    def goal_reached(self, answer: str) -> bool:
        """Whether the episode, ended with ``answer``, met ``self.task.goal``. Default: the answer matches."""
        return answers_match(answer, self.task.goal.get("answer"))

    def begin(self, task: Task) -> None:
        """Set up the world's state for a new episode of ``task`` (e.g. a fresh copy of a database)."""

    def derived_goal(self, answer: Any) -> dict[str, Any]:
        """The goal a task must have for the episode played so far, ended with ``answer``, to count as solved
        (self-questioning derives a synthesized task's verifier from running its reference). Default: the
        answer; worlds that also check their state add it (the shop: the rows changed)."""
        return {"answer": answer}

    def held_out_marks(self) -> set[str]:
        """Strings (ids, names) that only held-out tasks are about: a synthesized task that mentions one is
        dropped, so self-questioning never trains on test material. Default: none."""
        return set()

    def exploration_anchor(self, seed: int) -> str:
        """A record to start exploring from, shown to the explorer of sandbox ``seed`` (self-questioning), for
        a world whose operations all need an identifier no call can list: without one, an explorer can only
        guess ids. Never about held-out tasks. Default: none."""
        return ""

    def world_snapshot(self) -> Any:
        return None

    def world_restore(self, snap: Any) -> None:
        pass

    def world_key(self) -> str:
        return ""

    # ------------------------------------------------------------------ the tool every world has
    @tool
    def finish(self, answer: str | int | float) -> str | int | float:
        """End the episode with your final answer to the user.

        Args:
            answer: the final answer: just the requested value when the user asked a question (e.g.
                "delivered" or 42.5), otherwise a short confirmation.
        """
        return answer  # numbers are accepted too: models often write {"answer": 42.5}

    # ------------------------------------------------------------------ episodes
    def task_for(self, seed: int) -> Task:
        """The task a seed starts: a fixed shuffle of this env's split and level, indexed by ``seed % n``.

        The shuffle matters because tasks are stored grouped by intent: consecutive seeds (training's cursor,
        evaluation's ``eval.seed_offset + i``) would otherwise all fall on the same few intents."""
        if len(self._seed_order) != len(self.tasks):
            self._seed_order = list(range(len(self.tasks)))
            random.Random(_ORDER_SEED).shuffle(self._seed_order)
        return self.tasks[self._seed_order[int(seed) % len(self.tasks)]]

    def reset(self, seed: int) -> str:
        """Start :meth:`task_for` ``(seed)`` (same seed, same task)."""
        return self.load(self.task_for(seed))

    def content_key(self) -> str:
        """The task's content: its request, normalised (``envs/holdout.py``)."""
        return task_key(self.task) if self.task is not None else ""

    def load(self, task: Task | str) -> str:
        """Start an episode of a given task (or task id, searched in all splits). Returns the instruction."""
        if isinstance(task, str):
            by_id = {t.id: t for t in self.all_tasks()}
            if task not in by_id:
                raise KeyError(f"no task {task!r}")
            task = by_id[task]
        self.task = task
        self._clear()
        self.begin(task)
        self.observation = task.instruction
        return self.observation

    def render(self) -> str:
        return self.observation

    def demonstrate(self, task: Task) -> list[tuple[str, str]]:
        """The (observation, action) turns of the reference solution of ``task``: few-shot examples."""
        turns, observation = [], self.load(task)
        while (action := self.expert_action()) is not None:
            turns.append((observation, action))
            observation = self.step(action).observation
        return turns

    def _info(self, valid: bool, call: ToolCall | None = None, tool_error: bool = False) -> dict[str, Any]:
        task = self.task
        return {"success": self.success, "valid_action": valid, "intent": task.intent, "level": task.level,
                "task_id": task.id, "tool_call": None if call is None else {"name": call.name,
                                                                            "arguments": call.arguments},
                "tool_error": tool_error}

    def step(self, action: str) -> StepResult:
        if self.task is None:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:  # a finished episode changes nothing
            return StepResult(self.observation, 0.0, True, self._info(True))
        self.turn += 1
        outcome = self.toolset.run(action, owner=self)
        if not outcome.valid:
            reward = -self.invalid_penalty
        elif outcome.error:
            reward = -self.tool_error_penalty
        else:
            reward = 0.0
            key = outcome.call.key()
            self.calls.append(key)
            if self.toolset[outcome.call.name].writes:
                self.writes.append(key)
            if outcome.call.name == "finish":
                self.answer = outcome.call.arguments["answer"]
                self.success = bool(self.goal_reached(self.answer))
                self.done = True
                reward = 1.0 if self.success else 0.0
        if self.turn >= self.max_turns:
            self.done = True
        self.observation = outcome.observation
        if self.answer is not None:
            self.observation = f"Finished with the answer: {self.answer}"
        return StepResult(self.observation, reward, self.done, self._info(outcome.valid, outcome.call, outcome.error))

    # ------------------------------------------------------------------ experts, progress, keys
    def reference_calls(self) -> list[ToolCall]:
        """The task's reference solution as validated calls (defaults filled in, so keys compare)."""
        cached = self.__dict__.get("_reference")
        if cached is None or cached[0] is not self.task:
            try:
                calls = [self.toolset.parse(format_tool_call(c["name"], c["arguments"])) for c in self.task.solution]
            except CallError as e:  # a hand-written task with a typo: say which
                raise ValueError(f"task {self.task.id}: its reference solution has an invalid call: {e}") from None
            cached = self._reference = (self.task, calls)
        return cached[1]

    def reference_text(self) -> str:
        """The task's reference solution as text, one call per line (what an LLM judge compares with)."""
        if self.task is None:
            return ""
        return "\n".join(f"{c['name']}({json.dumps(c['arguments'], ensure_ascii=False)})" for c in self.task.solution)

    def _remaining(self) -> list[ToolCall]:
        """Reference calls not made yet (as a multiset: a call made once covers one occurrence)."""
        made = Counter(self.calls)
        left = []
        for call in self.reference_calls():
            if made[call.key()] > 0:
                made[call.key()] -= 1
            else:
                left.append(call)
        return left

    def expert_action(self) -> str | None:
        """The next call of the reference solution that has not been made yet (None when done).

        Following it from the start solves the task; after the agent's own calls it still proposes the
        remaining reference calls (which may no longer suffice if the agent changed the world wrongly).
        """
        if self.task is None or self.done:
            return None
        left = self._remaining()
        return left[0].text() if left else None

    def progress(self) -> float:
        """1.0 when solved, else the fraction of the reference calls made so far."""
        if self.task is None:
            return 0.0
        if self.success:
            return 1.0
        total = len(self.task.solution)
        return (total - len(self._remaining())) / total if total else 0.0

    def state_key(self) -> str:
        """Task, the distinct calls made (what the agent has learnt), the writes in order (the world's state),
        the world's own key and whether it is over. Equal keys mean equal states."""
        parts = [self.task.id if self.task else "", *sorted(set(self.calls)), "|", *self.writes, "|",
                 self.world_key(), str(self.done), str(self.success)]
        digest = hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]
        return f"{self.task.id if self.task else ''}:{digest}"

    # ------------------------------------------------------------------ snapshots
    _EPISODE = ("task", "turn", "done", "success", "answer", "observation", "calls", "writes")

    def snapshot(self) -> dict[str, Any]:
        """The episode's fields (lists copied; the task is shared, tasks are never changed) and the world's
        own state (:meth:`world_snapshot`)."""
        snap = {k: getattr(self, k) for k in self._EPISODE}
        snap["calls"], snap["writes"] = list(self.calls), list(self.writes)
        snap["world"] = self.world_snapshot()
        return snap

    def restore(self, snapshot: dict[str, Any]) -> None:
        for k in self._EPISODE:
            setattr(self, k, snapshot[k])
        self.calls, self.writes = list(snapshot["calls"]), list(snapshot["writes"])
        self.world_restore(snapshot["world"])
