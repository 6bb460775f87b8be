"""Sokoban as a text world, with our own generator of rooms that are solvable by construction.

Generation (deterministic per seed): carve a random connected floor inside walls, put the boxes on their
targets and the player on a free cell, then play *backwards* for ``search_depth`` steps: the player walks and
sometimes pulls the box behind it. Each backward step is the exact inverse of a legal forward move (a walk or
a push), so the solved room is reachable from every state on the way. The start is the state on the way whose
boxes moved farthest from their targets; when no box ever left its target, or the room is solved in fewer than
``MIN_PLAN`` moves, the room is rejected and the generator draws again from the same seeded RNG.

:func:`solve` is a breadth-first search over (player, boxes) states returning a shortest plan.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

from selfevolve.envs.base import StepResult, TextEnv
from selfevolve.envs.frozenlake import answer_format, error_line, parse_moves
from selfevolve.errors import ConfigError

Pos = tuple[int, int]

MOVES = ("Up", "Down", "Left", "Right")
DELTAS: dict[str, Pos] = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}

STEP_COST = -0.1
BOX_ON = 1.0
BOX_OFF = -1.0
SOLVED = 10.0
MIN_PLAN = 3  # generated rooms need at least this many moves when the generator can manage it

_SYMBOLS = {"#", "_", "O", "X", "√", "P", "S"}

# A fixed hand-written room for the few-shot examples (not generated from any seed).
_EXAMPLE_ROOM = """\
# # # # # #
# _ _ _ _ #
# _ X _ O #
# _ P _ _ #
# _ _ _ _ #
# # # # # #"""


def _add(a: Pos, b: Pos) -> Pos:
    return (a[0] + b[0], a[1] + b[1])


def parse_room(text: str) -> dict[str, Any]:
    """Parse a room drawn in the observation symbols (cells optionally separated by spaces).

    Returns ``{"shape", "walls", "targets", "boxes", "player"}``; cells outside the drawing count as walls.
    """
    lines = [line.rstrip() for line in text.strip("\n").splitlines() if line.strip()]
    rows = [line.split() if " " in line.strip() else list(line.strip()) for line in lines]
    h, w = len(rows), max(len(r) for r in rows)
    walls, targets, boxes, player = set(), set(), set(), None
    for r, row in enumerate(rows):
        for c in range(w):
            ch = row[c] if c < len(row) else "#"
            if ch not in _SYMBOLS:
                raise ValueError(f"unknown Sokoban symbol {ch!r} at row {r}, column {c}")
            if ch == "#":
                walls.add((r, c))
            if ch in "O√S":
                targets.add((r, c))
            if ch in "X√":
                boxes.add((r, c))
            if ch in "PS":
                if player is not None:
                    raise ValueError("a Sokoban room has exactly one player")
                player = (r, c)
    if player is None:
        raise ValueError("a Sokoban room needs a player (P or S)")
    if len(boxes) != len(targets) or not boxes:
        raise ValueError(f"a Sokoban room needs as many boxes as targets (got {len(boxes)} and {len(targets)})")
    return {"shape": (h, w), "walls": frozenset(walls), "targets": frozenset(targets), "boxes": set(boxes),
            "player": player}


def render_room(shape: Pos, walls, targets, boxes, player: Pos) -> str:
    h, w = shape
    rows = []
    for r in range(h):
        cells = []
        for c in range(w):
            p = (r, c)
            if p in walls:
                cells.append("#")
            elif p == player:
                cells.append("S" if p in targets else "P")
            elif p in boxes:
                cells.append("√" if p in targets else "X")
            else:
                cells.append("O" if p in targets else "_")
        rows.append(" ".join(cells))
    return "\n".join(rows)


def generate_room(
    seed: int, dim_room: Pos = (6, 6), num_boxes: int = 1, search_depth: int = 30, max_tries: int = 200
) -> dict[str, Any]:
    """A solvable room from ``seed`` (see the module docstring); same seed, same room."""
    rng = random.Random(int(seed))
    h, w = dim_room
    interior = [(r, c) for r in range(1, h - 1) for c in range(1, w - 1)]
    n_floor = max(num_boxes + 3, round(0.7 * len(interior)))
    fallback = None
    for _ in range(max_tries):
        # 1. a random connected floor: a random walk inside the border walls
        pos = rng.choice(interior)
        floor = {pos}
        while len(floor) < n_floor:
            nxt = _add(pos, DELTAS[rng.choice(MOVES)])
            if 1 <= nxt[0] <= h - 2 and 1 <= nxt[1] <= w - 2:
                pos = nxt
                floor.add(pos)
        cells = sorted(floor)
        # 2. boxes on their targets, the player on a free cell
        picks = rng.sample(cells, num_boxes + 1)
        targets = frozenset(picks[:-1])
        boxes = set(targets)
        player = picks[-1]
        # 3. play backwards: walk, and pull the box behind the player with probability 0.8. Every state on
        # the way is a valid start; keep the one whose boxes moved farthest from their own targets.
        home = {b: b for b in boxes}  # box position -> the target it started on
        best, best_score = None, 0
        d = DELTAS[rng.choice(MOVES)]
        for _ in range(search_depth):
            if rng.random() < 0.5:  # keep going the same way half of the time: longer pulls
                d = DELTAS[rng.choice(MOVES)]
            nxt = _add(player, d)
            if nxt not in floor or nxt in home:
                continue
            behind = (player[0] - d[0], player[1] - d[1])
            if behind in home and rng.random() < 0.8:
                home[player] = home.pop(behind)
            player = nxt
            off = sum(b not in targets for b in home)
            score = off * sum(abs(b[0] - t[0]) + abs(b[1] - t[1]) for b, t in home.items())
            if score >= best_score and score > 0:
                best, best_score = (set(home), player), score
        if best is None:
            continue  # no box ever left its target: draw again
        walls = frozenset((r, c) for r in range(h) for c in range(w) if (r, c) not in floor)
        room = {"shape": (h, w), "walls": walls, "targets": targets, "boxes": best[0], "player": best[1]}
        # 4. prefer rooms that are not one or two moves from solved (the plan is at most search_depth long)
        n_moves = len(solve(room, max_depth=search_depth) or [])
        if n_moves >= MIN_PLAN:
            return room
        if fallback is None or n_moves > fallback[0]:
            fallback = (n_moves, room)
    if fallback is not None:
        return fallback[1]
    raise ConfigError(
        f"sokoban: could not generate a room with dim_room={dim_room}, num_boxes={num_boxes}, "
        f"search_depth={search_depth}; use a larger room or fewer boxes"
    )


def solve(env_or_state: Any, max_depth: int = 100, max_states: int = 1_000_000) -> list[str] | None:
    """Shortest list of moves that puts every box on a target, or None if none within ``max_depth``.

    ``env_or_state`` is a :class:`SokobanEnv` (its current state), a room drawn in the observation symbols,
    or a dict as returned by :func:`parse_room`. Breadth-first search over (player, boxes) states;
    gives up (None) after ``max_states`` states.
    """
    if isinstance(env_or_state, SokobanEnv):
        room = env_or_state.room_state()
    elif isinstance(env_or_state, str):
        room = parse_room(env_or_state)
    else:
        room = env_or_state
    h, w = room["shape"]
    walls, targets = room["walls"], frozenset(room["targets"])

    def free(p: Pos) -> bool:
        return 0 <= p[0] < h and 0 <= p[1] < w and p not in walls

    start = (tuple(room["player"]), frozenset(map(tuple, room["boxes"])))
    if start[1] == targets:
        return []
    parent: dict[Any, Any] = {start: None}
    frontier = deque([(start, 0)])
    while frontier:
        state, depth = frontier.popleft()
        if depth >= max_depth:
            continue
        player, boxes = state
        for move in MOVES:
            d = DELTAS[move]
            nxt = _add(player, d)
            if not free(nxt):
                continue
            new_boxes = boxes
            if nxt in boxes:
                beyond = _add(nxt, d)
                if not free(beyond) or beyond in boxes:
                    continue
                new_boxes = (boxes - {nxt}) | {beyond}
            child = (nxt, new_boxes)
            if child in parent:
                continue
            parent[child] = (state, move)
            if new_boxes == targets:
                plan = []
                node = child
                while parent[node] is not None:
                    node, m = parent[node]
                    plan.append(m)
                return plan[::-1]
            if len(parent) >= max_states:
                return None
            frontier.append((child, depth + 1))
    return None


class SokobanEnv(TextEnv):
    """Sokoban in a generated room: push every box onto a target.

    Options:
        dim_room: (height, width) of the room including its border walls (each >= 5).
        num_boxes: number of boxes (and targets).
        max_turns: turn limit of an episode (enforced by the rollout).
        moves_per_turn: how many moves (1..k) one answer may hold; they run in order, their rewards are
            summed, and they stop when the room is solved.
        invalid_penalty: reward subtracted for an unparseable answer (which changes nothing).
        search_depth: backward-play steps of the generator (more steps: harder rooms).

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

    def __init__(
        self,
        dim_room: tuple[int, int] | list = (6, 6),
        num_boxes: int = 1,
        max_turns: int = 10,
        moves_per_turn: int = 1,
        invalid_penalty: float = 0.1,
        search_depth: int = 30,
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
        self.instructions = type(self).instructions.replace(
            answer_format(MOVES, 1), answer_format(MOVES, self.moves_per_turn)
        )
        self.examples = _examples(self.moves_per_turn)
        self.shape: Pos = (h, w)
        self.walls: frozenset[Pos] = frozenset()
        self.targets: frozenset[Pos] = frozenset()
        self.boxes: set[Pos] = set()
        self.player: Pos = (0, 0)
        self.done = False

    # ---------------------------------------------------------------- setup
    def reset(self, seed: int) -> str:
        """A generated room from ``seed`` (same seed, same room)."""
        room = generate_room(seed, self.dim_room, self.num_boxes, self.search_depth)
        return self._set(room)

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
        return self.render()

    def room_state(self) -> dict[str, Any]:
        return {"shape": self.shape, "walls": self.walls, "targets": self.targets, "boxes": set(self.boxes),
                "player": self.player}

    # ---------------------------------------------------------------- state
    @property
    def success(self) -> bool:
        return bool(self.targets) and self.boxes == set(self.targets)

    def render(self) -> str:
        if not self.targets:
            return ""
        return render_room(self.shape, self.walls, self.targets, self.boxes, self.player)

    def expert_action(self) -> str | None:
        """The first move of a shortest solution (BFS), or None when solved or unsolvable."""
        plan = None if self.done else solve(self, max_depth=self.max_turns * self.moves_per_turn + 20)
        return plan[0] if plan else None

    def state_key(self) -> str:
        boxes = ";".join(f"{r},{c}" for r, c in sorted(self.boxes))
        return f"P{self.player[0]},{self.player[1]}|B{boxes}"

    def progress(self) -> float:
        """Mean over boxes of 1 (on a target) or up to 0.5 for closeness to the nearest target."""
        if not self.targets:
            return 0.0
        span = max(1, sum(self.shape) - 4)
        score = 0.0
        for b in self.boxes:
            if b in self.targets:
                score += 1.0
            else:
                dist = min(abs(b[0] - t[0]) + abs(b[1] - t[1]) for t in self.targets)
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
            if beyond in self.targets and nxt not in self.targets:
                reward += BOX_ON
            elif nxt in self.targets and beyond not in self.targets:
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

    def _info(self, valid: bool, moves: list[str]) -> dict[str, Any]:
        return {"success": self.success, "valid_action": valid, "moves": moves}


def _examples(k: int) -> list[tuple[str, str]]:
    """Two example turns in the fixed example room, each answered with moves on a shortest plan."""
    env = SokobanEnv.__new__(SokobanEnv)
    env.moves_per_turn, env.invalid_penalty, env.done = 4, 0.0, False
    first = env.load(_EXAMPLE_ROOM)  # plan: Left Up Right Right
    env.step("Left Up")
    second = env.render()
    if k == 1:
        return [(first, "Left"), (second, "Right")]
    return [(first, "Left Up"), (second, "Right Right")]


SokobanEnv.examples = _examples(1)
