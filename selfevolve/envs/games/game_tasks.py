"""What the grid games share about synthesized tasks (self-questioning, ``docs/questioning.md``): which
episodes an ``env.split`` plays, and reading the tasks of ``env.tasks_file``.

A game (FrozenLake, Sokoban) plays its ordinary game by default. With ``split`` holding ``synth`` it plays the
tasks of ``tasks_file`` (written by ``selfevolve explore``): ``synth`` alone, task ``seed % n``;
``train+synth``, even seeds the ordinary game and odd seeds task ``(seed // 2) % n``. Each game checks its own
task format (``check``).
"""

from __future__ import annotations

from typing import Any, Callable

from selfevolve.envs.task_files import SPLITS, load_tasks
from selfevolve.errors import ConfigError
from selfevolve.types import Task


def split_tasks(env_name: str, split: Any, tasks_file: str,
                check: Callable[[Task], None]) -> tuple[list[Task], bool]:
    """The synthesized tasks a ``split`` plays (none without ``synth``) and whether it plays the ordinary game
    too. ``check(task)`` raises a ConfigError for a task that is not the game's."""
    parts = set(SPLITS) if split == "all" else set(str(split).split("+"))
    if not isinstance(split, str) or not split or not parts <= set(SPLITS):
        raise ConfigError(f"{env_name} option 'split' must be 'all' or one of {', '.join(SPLITS)}, or several "
                          f"joined by '+' (e.g. 'train+synth'), got {split!r}")
    ordinary = bool(parts & {"train", "test"})
    if "synth" not in parts:
        return [], True
    if not tasks_file:
        raise ConfigError(f"{env_name}: split={split!r} needs env.tasks_file=PATH (a tasks.jsonl written by "
                          f"selfevolve explore env.name={env_name})")
    try:
        tasks = [t for t in load_tasks(tasks_file) if t.split == "synth"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{env_name}: cannot read tasks_file {tasks_file!r}: {e}") from None
    if not tasks:
        raise ConfigError(f"{env_name}: tasks_file {tasks_file!r} holds no tasks of split 'synth'")
    for t in tasks:
        check(t)
    return tasks, ordinary


def task_for(tasks: list[Task], ordinary: bool, seed: int) -> Task | None:
    """The synthesized task a seed starts, or None for the ordinary game of the seed."""
    if not tasks:
        return None
    seed = int(seed)
    if not ordinary:
        return tasks[seed % len(tasks)]
    return tasks[(seed // 2) % len(tasks)] if seed % 2 else None


class PlaysTasks:
    """What a game that plays synthesized tasks adds to its step info and to the judge's view: the task being
    played (``self.task``, None for the ordinary game) names itself in ``info`` and gives its reference moves."""

    task: Task | None = None

    def _info(self, valid: bool, moves: list[str]) -> dict[str, Any]:
        info = {"success": self.success, "valid_action": valid, "moves": moves}
        if self.task is not None:
            info.update(task_id=self.task.id, intent=self.task.intent, level=self.task.level)
        return info

    def reference_text(self) -> str:
        """A synthesized task's reference moves (what an LLM judge compares with); empty for the game."""
        return " ".join(self.task.solution) if self.task is not None else ""
