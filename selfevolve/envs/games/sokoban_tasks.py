"""Sokoban's synthesized tasks (self-questioning, ``docs/questioning.md``): stand on a named cell, push the box
to a named cell, or push every box onto a target.

A room task is a training seed's start room (its rows kept), a goal and the reference moves. The goal is the
end state of the reference, as exact as the request names it: ``player`` (the cell you must stand on; the boxes
may be anywhere) or ``boxes`` (the cells every box must be on; you may stand anywhere). Every box on its target
is the ordinary game's goal, asked as a request. The environment (``envs/games/sokoban.py``) plays the tasks of
``tasks_file`` when ``env.split`` includes ``synth``. The profile is what exploration and the writer read.
"""

from __future__ import annotations

from typing import Any, Callable

from selfevolve.envs.games.game_tasks import split_tasks as game_split_tasks
from selfevolve.envs.games.sokoban_rooms import MOVES, Pos, parse_room, render_room
from selfevolve.envs.profile import Entity, EnvProfile, Operation
from selfevolve.errors import ConfigError
from selfevolve.types import Task

INTENTS = ("reach_cell", "move_box", "solve_room")
LEVELS = {"reach_cell": 1, "move_box": 2, "solve_room": 3}


def room_rows(room: dict[str, Any]) -> list[str]:
    """A room (``parse_room``'s dict) as compact rows of the observation symbols, one string per row."""
    drawn = render_room(room["shape"], room["walls"], room["targets"], room["boxes"], room["player"])
    return ["".join(row.split()) for row in drawn.splitlines()]


def relabel_targets(rows: list[str], boxes) -> list[str]:
    """Hindsight goal relabelling (Andrychowicz et al. 2017, HER): the room with its targets moved onto
    ``boxes`` (where an exploration left every box). The ordinary game on it — every box onto a target — is the
    task that end state solves, in the form the held-out test asks."""
    room = parse_room("\n".join(rows))
    return room_rows({**room, "targets": {(int(r), int(c)) for r, c in boxes}})


def is_solve_task(task: Task) -> bool:
    """Whether a room task asks for the room's own goal (every box on a target): the ordinary game of its room."""
    return task.intent == "solve_room"


def room_task(task_id: str, seed: int, rows: list[str], moves: list[str], instruction: str, *,
              player: Pos | None = None, boxes: list[Pos] | None = None, split: str = "synth") -> Task:
    """A Sokoban task of ``tasks_file``: the start room of training seed ``seed`` (its rows kept, so the task
    does not depend on ``dim_room``/``num_boxes``), the goal derived from running the reference (``player``: the
    cell to stand on, 0-based; or ``boxes``: the cells of every box), the reference moves and the request.
    Intent ``reach_cell`` (level 1) for a player goal, ``solve_room`` (3) when the boxes are the room's
    targets, else ``move_box`` (2)."""
    if (player is None) == (boxes is None):
        raise ValueError("a Sokoban task has a player goal or a boxes goal, exactly one")
    goal: dict[str, Any] = {"seed": int(seed), "room": list(rows)}
    if player is not None:
        intent = "reach_cell"
        goal["player"] = [int(player[0]), int(player[1])]
    else:
        cells = sorted((int(r), int(c)) for r, c in boxes)
        intent = "solve_room" if set(cells) == set(parse_room("\n".join(rows))["targets"]) else "move_box"
        goal["boxes"] = [list(b) for b in cells]
    return Task(id=task_id, split=split, level=LEVELS[intent], intent=intent, instruction=instruction, goal=goal,
                solution=list(moves))


def goal_cells(goal: dict[str, Any]) -> tuple[Pos | None, frozenset[Pos] | None]:
    """A task goal's player cell and box cells (one of them None)."""
    player = goal.get("player")
    boxes = goal.get("boxes")
    return (None if player is None else (int(player[0]), int(player[1])),
            None if boxes is None else frozenset((int(r), int(c)) for r, c in boxes))


def goal_test(goal: dict[str, Any]) -> Callable[[Pos, frozenset], bool]:
    """``test(player, boxes)``: whether a state reaches a task's goal."""
    player, boxes = goal_cells(goal)
    if player is not None:
        return lambda p, b: tuple(p) == player
    return lambda p, b: frozenset(b) == boxes


def _is_cell(x: Any) -> bool:
    return isinstance(x, list) and len(x) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in x)


def _check_task(task: Task) -> None:
    """A synthesized task must name a room, one goal on its floor (a cell to stand on, or as many box cells as
    the room has boxes), and moves."""
    goal = task.goal if isinstance(task.goal, dict) else {}
    rows, seed, player, boxes = goal.get("room"), goal.get("seed"), goal.get("player"), goal.get("boxes")
    room = None
    if isinstance(rows, list) and rows and all(isinstance(r, str) for r in rows):
        try:
            room = parse_room("\n".join(rows))
        except ValueError:
            room = None

    def floor(cell) -> bool:
        h, w = room["shape"]
        return _is_cell(cell) and 0 <= cell[0] < h and 0 <= cell[1] < w and tuple(cell) not in room["walls"]

    ok = (room is not None and isinstance(seed, int) and not isinstance(seed, bool)
          and (player is None) != (boxes is None)
          and (player is None or floor(player))
          and (boxes is None or isinstance(boxes, list) and len({tuple(b) for b in boxes if floor(b)}) == len(boxes)
               == len(room["boxes"]))
          and isinstance(task.solution, list) and all(m in MOVES for m in task.solution))
    if not ok:
        raise ConfigError(f"sokoban: task {task.id!r} is not a Sokoban room task (goal needs seed, room rows, and "
                          f"either player [row, column] or boxes [[row, column], ...] on the room's floor; "
                          f"solution a list of moves {', '.join(MOVES)})")


def split_tasks(split: Any, tasks_file: str) -> tuple[list[Task], bool]:
    """The synthesized tasks a ``split`` plays (none without ``synth``) and whether it plays the ordinary game
    too (``envs/games/game_tasks.py``, shared with FrozenLake)."""
    return game_split_tasks("sokoban", split, tasks_file, _check_task)


SOKOBAN_PROFILE = EnvProfile(
    name="sokoban",
    background=(
        "A Sokoban room drawn as a grid of cells inside walls. The player walks one cell at a time, up, down, "
        "left or right, and pushes a box by walking into it. Rows and columns count from 1 at the top left."
    ),
    entities=(
        Entity("cell", "one square of the room: a wall, floor, or a target for a box", ("row", "column", "kind")),
        Entity("box", "a box standing on a cell, perhaps on a target", ("row", "column", "on_target")),
        Entity("player", "the pusher, standing on one cell", ("row", "column")),
    ),
    operations=tuple(Operation(m, f"move one cell {m.lower()}, pushing a box there one cell further if the cell "
                                  f"behind it is free", (), True) for m in MOVES),
    rules=("Walls block the player and the boxes.",
           "Walking into a box pushes it one cell if the cell behind it is free floor; boxes cannot be pulled.",
           "When every box stands on a target the room is solved and the game ends."),
    intents=INTENTS,
    extra={"task_preference": "stand on cell (r, c); push the box to cell (r, c); or push every box onto a target",
           "levels": {"1": "stand on a cell", "2": "push the box to a cell", "3": "push every box onto a target"}},
)
