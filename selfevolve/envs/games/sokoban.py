"""Sokoban as a text world, in rooms of our own generator that are solvable by construction
(``envs/games/sokoban_rooms.py``: the generator, the drawing and :func:`solve`, a breadth-first search over
(player, boxes) states returning a shortest plan). With ``split`` holding ``synth`` the env plays the tasks
self-questioning wrote (``envs/games/sokoban_tasks.py``).
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from selfevolve.envs.base import StepResult, TextEnv
from selfevolve.envs.games.game_tasks import PlaysTasks, task_for
from selfevolve.envs.games.moves import answer_format, error_line, parse_moves
from selfevolve.envs.holdout import draw, split_bucket
# the rooms' helpers are re-exported for callers (``from selfevolve.envs.games.sokoban import solve``)
from selfevolve.envs.games.sokoban_rooms import (DELTAS, MIN_PLAN, MOVES, Pos, _add, generate_room,  # noqa: F401
                                           describe_positions, parse_room, render_room, room_key, solve)
from selfevolve.envs.games.sokoban_tasks import SOKOBAN_PROFILE, goal_cells, goal_test, is_solve_task, split_tasks
from selfevolve.errors import ConfigError
from selfevolve.types import Task

STEP_COST = -0.1
BOX_ON = 1.0
BOX_OFF = -1.0
SOLVED = 10.0

# A fixed hand-written room for the few-shot examples (not generated from any seed).
_EXAMPLE_ROOM = """\
# # # # # #
# _ _ _ _ #
# _ X _ O #
# _ P _ _ #
# _ _ _ _ #
# # # # # #"""


class SokobanEnv(PlaysTasks, TextEnv):
    """Sokoban in a generated room: push every box onto a target.

    Options:
        dim_room: (height, width) of the room including its border walls (each >= 5).
        num_boxes: number of boxes (and targets).
        max_turns: turn limit of an episode (enforced by the rollout).
        moves_per_turn: how many moves (1..k) one answer may hold; they run in order, their rewards are
            summed, and they stop when the room is solved.
        invalid_penalty: reward subtracted for an unparseable answer (which changes nothing).
        search_depth: backward-play steps of the generator (more steps: harder rooms).
        split: which episodes ``reset(seed)`` starts. ``train`` (the default) and ``test`` (what evaluation
            switches to) are the ordinary game, every box onto a target, in content-disjoint rooms: a seed whose
            room belongs to the other split redraws (``envs/holdout.py``), so no test room is ever a training
            room; ``train+test``: the seed's own room. ``synth``: the
            room tasks of ``tasks_file`` (written by ``selfevolve explore``, ``envs/games/sokoban_tasks.py``), task
            ``seed % n``. ``train+synth``: both, even seeds the ordinary game, odd seeds task ``(seed // 2) % n``.
        tasks_file: a JSONL file of synthesized tasks (a ``types.Task`` per line, ``envs/task_files.py``), read
            when ``split`` holds ``synth``.
        positions: add the positions in words under the room (``describe_positions``): each box counted in moves
            from you and its nearest target (a task's: its cell T) counted from the box, e.g. ``The box: 1 Up of
            you; its target 2 Right of it.`` Off by default, the grid alone, as RAGEN and the earlier figures.

    A synthesized task names a room (its seed and its rows), a goal and reference moves. Its first observation
    is the request line (``Request: ...``) above the room, which marks the named cells ``T`` while nothing
    stands on them. The episode is solved when the goal is reached: you on the named cell (the boxes anywhere),
    or the boxes exactly on the named cells (you anywhere); then it ends with +10. Moves cost the step as
    usual; the +1/-1 for a box onto/off a target count only when the goal is every box on a target (for other
    goals a target is just a cell), and a room solved on the way does not end a task whose goal is another.

    Observation: the room, one row per line, cells separated by a space: ``#`` wall, ``_`` floor,
    ``O`` target, ``X`` box, ``√`` box on a target, ``P`` player, ``S`` player on a target.
    Rewards per move: -0.1 step cost; +1 for pushing a box onto a target, -1 for pushing one off;
    +10 more when every box is on a target (done, success). Walking into a wall or pushing a box against a
    wall or another box leaves everything in place but is a valid move (it costs the step).
    """

    name = "sokoban"
    moves = MOVES
    instructions = (
        "Sokoban: you are P. Push every box X onto a target O. # is a wall, _ is floor, √ is a box on a "
        "target, S is you on a target. Walking into a box pushes it one cell if the cell behind it is free; "
        "boxes cannot be pulled. " + answer_format(MOVES, 1)
    )
    examples: list[tuple[str, str]] = []  # filled in below, from _EXAMPLE_ROOM
    positions = False
    POSITIONS_LINE = ("Under the room, each box's place is counted in moves from you, and its target's from the "
                      "box. ")

    def __init__(
        self,
        dim_room: tuple[int, int] | list = (6, 6),
        num_boxes: int = 1,
        max_turns: int = 10,
        moves_per_turn: int = 1,
        invalid_penalty: float = 0.1,
        search_depth: int = 30,
        split: str = "train",
        tasks_file: str = "",
        positions: bool = False,
    ):
        def integer(key: str, value: Any, low: int) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"sokoban option {key!r} must be an integer >= {low}, got {value!r}")
            return value

        if not isinstance(dim_room, (tuple, list)) or len(dim_room) != 2:
            raise ConfigError(f"sokoban option 'dim_room' must be [height, width], got {dim_room!r}")
        h, w = (integer("dim_room", v, 5) for v in dim_room)
        self.dim_room = (h, w)
        self.num_boxes = integer("num_boxes", num_boxes, 1)
        if self.num_boxes + 3 > (h - 2) * (w - 2):
            raise ConfigError(f"sokoban option 'num_boxes' is too large for dim_room={list(dim_room)}")
        self.max_turns = integer("max_turns", max_turns, 1)
        self.moves_per_turn = integer("moves_per_turn", moves_per_turn, 1)
        self.search_depth = integer("search_depth", search_depth, 1)
        if not isinstance(invalid_penalty, (int, float)) or isinstance(invalid_penalty, bool):
            raise ConfigError(f"sokoban option 'invalid_penalty' must be a number, got {invalid_penalty!r}")
        self.invalid_penalty = float(invalid_penalty)
        if not isinstance(positions, bool):
            raise ConfigError(f"sokoban option 'positions' must be true or false, got {positions!r}")
        self.positions = positions
        self.instructions = type(self).instructions.replace(
            answer_format(MOVES, 1), answer_format(MOVES, self.moves_per_turn)
        )
        self.split, self.tasks_file = split, str(tasks_file or "")
        self.synth_tasks, self.ordinary = split_tasks(split, self.tasks_file)
        if not all(is_solve_task(t) for t in self.synth_tasks):
            self.instructions = self.instructions.replace(
                answer_format(MOVES, self.moves_per_turn),
                "A request above the room may ask for something else instead: you standing on a cell, or a box "
                "pushed onto a cell, marked T. Then only that counts. " + answer_format(MOVES, self.moves_per_turn))
        if positions:  # said before the answer format, which the lines below replace as a whole
            self.instructions = self.instructions.replace("boxes cannot be pulled. ",
                                                          "boxes cannot be pulled. " + self.POSITIONS_LINE)
        self.examples = _examples(self.moves_per_turn, positions)
        self.task: Task | None = None  # the synthesized task being played (None: the ordinary game)
        self.marks: frozenset[Pos] = frozenset()
        self.shape: Pos = (h, w)
        self.walls: frozenset[Pos] = frozenset()
        self.targets: frozenset[Pos] = frozenset()
        self.boxes: set[Pos] = set()
        self.player: Pos = (0, 0)
        self.done = False
        self._start = ""  # the start room's content key (content_key())

    # ---------------------------------------------------------------- setup
    def reset(self, seed: int) -> str:
        """A generated room from ``seed`` (same seed, same room). With ``split`` holding ``synth``, the seed may
        pick a synthesized task instead (``envs/games/game_tasks.py``)."""
        task = task_for(self.synth_tasks, self.ordinary, seed)
        if task is not None:
            return self.play(task)
        # the split is by content: a seed whose room is not of this env's split redraws (envs/holdout.py)
        room = draw(int(seed), split_bucket(self.split),
                    lambda s: generate_room(s, self.dim_room, self.num_boxes, self.search_depth),
                    key=room_key, what=f"sokoban dim_room={list(self.dim_room)} num_boxes={self.num_boxes}")
        return self._set(room)

    def content_key(self) -> str:
        """The task's content: the start room drawn, and a synthesized task's goal (``envs/holdout.py``)."""
        if self.task is None:
            return self._start
        player, cells = goal_cells(self.task.goal)
        return f"{self._start}|goal " + (f"P{player}" if player is not None else f"B{sorted(cells)}")

    def play(self, task: Task) -> str:
        """Start a room task: its room, the request line above it, the named cells marked T."""
        self._set(parse_room("\n".join(task.goal["room"])))
        player, boxes = goal_cells(task.goal)
        self.task = task
        self.marks = frozenset([player]) if player is not None else \
            frozenset() if is_solve_task(task) else boxes
        self.done = self.success
        if is_solve_task(task):  # the room's own goal (relabelled, or solved by exploring): as a held-out room reads
            return self.render()
        return f"Request: {task.instruction}\n{self.render()}"

    def goal_test(self) -> Callable[[Pos, frozenset], bool] | None:
        """A synthesized task's goal as ``test(player, boxes)`` (what :func:`solve` searches for); None for the
        ordinary game (every box on a target)."""
        return None if self.task is None else goal_test(self.task.goal)

    def load(self, text: str) -> str:
        """Start an episode in a room drawn in the observation symbols; returns the observation."""
        return self._set(parse_room(text))

    def _set(self, room: dict[str, Any]) -> str:
        self.shape = tuple(room["shape"])
        self.walls = frozenset(room["walls"])
        self.targets = frozenset(room["targets"])
        self.boxes = set(room["boxes"])
        self.player = tuple(room["player"])
        self.done = self.boxes == set(self.targets)
        self.task, self.marks = None, frozenset()
        self._start = room_key(room)
        return self.render()

    def room_state(self) -> dict[str, Any]:
        return {"shape": self.shape, "walls": self.walls, "targets": self.targets, "boxes": set(self.boxes),
                "player": self.player}

    # ---------------------------------------------------------------- state
    @property
    def success(self) -> bool:
        if self.task is not None:
            return goal_test(self.task.goal)(self.player, frozenset(self.boxes))
        return bool(self.targets) and self.boxes == set(self.targets)

    def render(self) -> str:
        if not self.targets:
            return ""
        room = render_room(self.shape, self.walls, self.targets, self.boxes, self.player, self.marks)
        if not self.positions:
            return room
        player, cells = goal_cells(self.task.goal) if self.task is not None else (None, None)
        if player is not None:
            words = describe_positions(self.player, self.boxes, {player}, aim="you")
        elif cells is not None and not is_solve_task(self.task):
            words = describe_positions(self.player, self.boxes, cells, aim="cell T")
        else:
            words = describe_positions(self.player, self.boxes, self.targets)
        return f"{room}\n{words}"

    def expert_action(self) -> str | None:
        """The first move of a shortest solution (BFS), or None when solved or unsolvable."""
        plan = None if self.done else solve(self, max_depth=self.max_turns * self.moves_per_turn + 20)
        return plan[0] if plan else None

    def state_key(self) -> str:
        boxes = ";".join(f"{r},{c}" for r, c in sorted(self.boxes))
        key = f"P{self.player[0]},{self.player[1]}|B{boxes}"
        if self.task is None:
            return key
        player, goal = goal_cells(self.task.goal)
        aim = f"P{player[0]},{player[1]}" if player is not None else "B" + ";".join(f"{r},{c}" for r, c in sorted(goal))
        return f"{key}|goal {aim}"

    def progress(self) -> float:
        """Mean over boxes of 1 (on a target) or up to 0.5 for closeness to the nearest target. In a task, the
        goal's cells stand for the targets; for a cell to stand on: 1 − your distance to it ÷ the room's span."""
        if not self.targets:
            return 0.0
        span = max(1, sum(self.shape) - 4)
        aims = self.targets
        if self.task is not None:
            player, boxes = goal_cells(self.task.goal)
            if player is not None:
                dist = abs(self.player[0] - player[0]) + abs(self.player[1] - player[1])
                return max(0.0, 1.0 - dist / span)
            aims = boxes
        score = 0.0
        for b in self.boxes:
            if b in aims:
                score += 1.0
            else:
                dist = min(abs(b[0] - t[0]) + abs(b[1] - t[1]) for t in aims)
                score += 0.5 * max(0.0, 1.0 - dist / span)
        return min(1.0, score / len(self.boxes))

    # ---------------------------------------------------------------- step
    def _free(self, p: Pos) -> bool:
        return 0 <= p[0] < self.shape[0] and 0 <= p[1] < self.shape[1] and p not in self.walls

    def _move(self, move: str) -> float:
        d = DELTAS[move]
        reward = STEP_COST
        nxt = _add(self.player, d)
        if not self._free(nxt):
            return reward
        if nxt in self.boxes:
            beyond = _add(nxt, d)
            if not self._free(beyond) or beyond in self.boxes:
                return reward
            self.boxes.remove(nxt)
            self.boxes.add(beyond)
            shaping = self.task is None or self.task.intent == "solve_room"  # a task's goal: targets are cells
            if shaping and beyond in self.targets and nxt not in self.targets:
                reward += BOX_ON
            elif shaping and nxt in self.targets and beyond not in self.targets:
                reward += BOX_OFF
        self.player = nxt
        if self.success:
            self.done = True
            reward += SOLVED
        return reward

    def step(self, action: str) -> StepResult:
        if not self.targets:
            raise RuntimeError("call reset(seed) before step()")
        moves = parse_moves(action, MOVES, self.moves_per_turn)
        if moves is None:
            obs = f"{error_line(MOVES, self.moves_per_turn)}\n{self.render()}"
            return StepResult(obs, -self.invalid_penalty, self.done, self._info(False, []))
        if self.done:  # stepping a solved room changes nothing
            return StepResult(self.render(), 0.0, True, self._info(True, []))
        reward = 0.0
        executed: list[str] = []
        for move in moves:
            reward += self._move(move)
            executed.append(move)
            if self.done:
                break
        return StepResult(self.render(), round(reward, 10), self.done, self._info(True, executed))

    # ---------------------------------------------------------------- snapshots
    def snapshot(self) -> dict[str, Any]:
        """The state, deep-copied; the tasks (never changed) are shared, not copied."""
        snap = copy.deepcopy({k: v for k, v in self.__dict__.items() if k not in ("synth_tasks", "task")})
        snap["task"] = self.task
        return snap

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.__dict__.update(copy.deepcopy({k: v for k, v in snapshot.items() if k != "task"}))
        self.task = snapshot.get("task")


def _examples(k: int, positions: bool = False) -> list[tuple[str, str]]:
    """Two example turns in the fixed example room, each answered with moves on a shortest plan."""
    env = SokobanEnv.__new__(SokobanEnv)
    env.moves_per_turn, env.invalid_penalty, env.done, env.positions = 4, 0.0, False, positions
    first = env.load(_EXAMPLE_ROOM)  # plan: Left Up Right Right
    env.step("Left Up")
    second = env.render()
    if k == 1:
        return [(first, "Left"), (second, "Right")]
    return [(first, "Left Up"), (second, "Right Right")]


SokobanEnv.examples = _examples(1)


SokobanEnv.profile = SOKOBAN_PROFILE  # what self-questioning explores from (selfevolve/questioning/sokoban.py)
