"""FrozenLake's synthesized tasks (self-questioning, ``docs/questioning.md``): walk to a named target cell.

A target task is a training seed's map (its rows kept), a target cell and the reference moves; the environment
(``envs/games/frozenlake.py``) plays it when ``env.split`` includes ``synth``. The profile is what exploration and
the task writer read of the game.
"""

from __future__ import annotations

from typing import Any

from selfevolve.envs.games.game_tasks import split_tasks as game_split_tasks
from selfevolve.envs.profile import Entity, EnvProfile, Operation
from selfevolve.errors import ConfigError
from selfevolve.types import Task

MOVES = ("Left", "Down", "Right", "Up")  # gymnasium's action ids 0..3, in this order


def target_task(task_id: str, seed: int, desc: list[str], target: tuple[int, int], moves: list[str],
                instruction: str, split: str = "synth") -> Task:
    """A FrozenLake task of ``tasks_file``: the map of training seed ``seed`` (its rows kept, so the task does
    not depend on ``size``/``p_frozen``), the target cell (0-based row, column: the exact goal state, derived
    from running the reference), the reference moves and the request. Intent ``reach_goal`` when the target
    is G, else ``reach_cell`` (level 2 and 1)."""
    r, c = int(target[0]), int(target[1])
    goal_cell = desc[r][c] == "G"
    return Task(id=task_id, split=split, level=2 if goal_cell else 1,
                intent="reach_goal" if goal_cell else "reach_cell", instruction=instruction,
                goal={"seed": int(seed), "map": list(desc), "target": [r, c]}, solution=list(moves))


def relabel_goal(desc: list[str], cell: tuple[int, int]) -> list[str]:
    """Hindsight goal relabelling (Andrychowicz et al. 2017, HER): the map with its goal G moved onto ``cell``
    (a safe cell an exploration reached; the old G becomes ice). The ordinary game on it — "reach the goal G" —
    is the task the reached cell solves, in the form the held-out test asks."""
    r, c = int(cell[0]), int(cell[1])
    if desc[r][c] not in "FG":
        raise ValueError(f"only a safe cell can become the goal, not {desc[r][c]!r} at row {r + 1}, column {c + 1}")
    rows = [row.replace("G", "F") for row in desc]
    rows[r] = rows[r][:c] + "G" + rows[r][c + 1:]
    return rows


def names_another_cell(task: Task) -> bool:
    """Whether a target task asks for a cell other than its map's goal G (a request the board must mark T)."""
    r, c = task.goal["target"]
    return task.goal["map"][r][c] != "G"


def _check_task(task: Task) -> None:
    """A synthesized task must name a map, a safe target on it other than the start, and moves."""
    goal = task.goal if isinstance(task.goal, dict) else {}
    desc, target, seed = goal.get("map"), goal.get("target"), goal.get("seed")
    ok = (isinstance(seed, int) and not isinstance(seed, bool) and isinstance(desc, list) and desc
          and all(isinstance(row, str) and len(row) == len(desc[0]) for row in desc)
          and isinstance(target, list) and len(target) == 2 and all(isinstance(x, int) for x in target)
          and 0 <= target[0] < len(desc) and 0 <= target[1] < len(desc[0])
          and desc[target[0]][target[1]] in "FG" and isinstance(task.solution, list)
          and all(m in MOVES for m in task.solution))
    if not ok:
        raise ConfigError(f"frozenlake: task {task.id!r} is not a FrozenLake target task (goal needs seed, map "
                          f"and a safe target [row, column]; solution a list of moves {', '.join(MOVES)})")


def split_tasks(split: Any, tasks_file: str) -> tuple[list[Task], bool]:
    """The synthesized tasks a ``split`` plays (none without ``synth``) and whether it plays the ordinary game
    too (``envs/games/game_tasks.py``, shared with Sokoban)."""
    return game_split_tasks("frozenlake", split, tasks_file, _check_task)


FROZENLAKE_PROFILE = EnvProfile(
    name="frozenlake",
    background=(
        "A frozen lake drawn as a square grid of cells. The player starts on the top-left cell and moves one "
        "cell at a time, left, down, right or up. Cells are safe ice, holes, or the goal G. Rows and columns "
        "count from 1 at the top left."
    ),
    entities=(
        Entity("cell", "one square of the lake: the start, safe ice, a hole or the goal G", ("row", "column", "kind")),
        Entity("player", "the walker, standing on one cell", ("row", "column")),
    ),
    operations=tuple(Operation(m, f"move one cell {m.lower()}", (), True) for m in MOVES),
    rules=("Falling into a hole ends the game.", "Moving off the grid keeps you in place.",
           "Reaching the goal G ends the game."),
    intents=("reach_cell", "reach_goal"),
    extra={"task_preference": "reach cell (r, c): walk from the start to a named safe cell without falling into "
                              "a hole; or reach the goal G",
           "levels": {"1": "reach a safe cell", "2": "reach the goal G"}},
)
