"""Sokoban's rooms: drawing and reading them, the generator (solvable by construction) and the solver.

Generation (deterministic per seed): carve a random connected floor inside walls, put the boxes on their
targets and the player on a free cell, then play *backwards* for ``search_depth`` steps: the player walks and
sometimes pulls the box behind it. Each backward step is the exact inverse of a legal forward move (a walk or
a push), so the solved room is reachable from every state on the way. The start is the state on the way whose
boxes moved farthest from their targets; when no box ever left its target, or the room is solved in fewer than
``MIN_PLAN`` moves, the room is rejected and the generator draws again from the same seeded RNG.

:func:`solve` is a breadth-first search over (player, boxes) states returning a shortest plan (to a solved
room, or to any other goal given as a test of the player and the boxes).
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any, Callable

from selfevolve.errors import ConfigError

Pos = tuple[int, int]

MOVES = ("Up", "Down", "Left", "Right")
DELTAS: dict[str, Pos] = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
MIN_PLAN = 3  # generated rooms need at least this many moves when the generator can manage it

_SYMBOLS = {"#", "_", "O", "X", "√", "P", "S"}


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


def render_room(shape: Pos, walls, targets, boxes, player: Pos, marks=frozenset()) -> str:
    """The room in the observation symbols; ``marks``: cells drawn ``T`` while nothing stands on them (the
    cells a synthesized task names)."""
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
            elif p in marks:
                cells.append("T")
            else:
                cells.append("O" if p in targets else "_")
        rows.append(" ".join(cells))
    return "\n".join(rows)


def offset(frm: Pos, to: Pos) -> str:
    """Where ``to`` lies from ``frm`` in the moves' words: ``"2 Up, 1 Right"`` (rows first), ``"here"`` when equal."""
    dr, dc = to[0] - frm[0], to[1] - frm[1]
    parts = [f"{abs(dr)} {'Down' if dr > 0 else 'Up'}"] if dr else []
    parts += [f"{abs(dc)} {'Right' if dc > 0 else 'Left'}"] if dc else []
    return ", ".join(parts) or "here"


def describe_positions(player: Pos, boxes, aims, aim: str = "target") -> str:
    """The room's positions in words, for the ``positions`` observation. Each box is counted in moves from you,
    and the nearest of ``aims`` that no other box covers is counted from that box; ``aim`` names those cells
    (``"target"``, or ``"cell T"`` for a task's named cells). With ``aim="you"`` the one aim is a cell to stand
    on, counted from you. A small model reads "1 Up, 2 Right of you" more easily than it finds two symbols in a
    grid and subtracts their rows and columns."""
    if aim == "you":
        (cell,) = aims
        where = "you stand on it" if cell == tuple(player) else f"{offset(player, cell)} of you"
        return f"The cell T: {where}."
    lines = []
    for i, b in enumerate(sorted(boxes), 1):
        free = [t for t in aims if t == b or t not in boxes] or list(aims)
        nearest = min(free, key=lambda t: (abs(t[0] - b[0]) + abs(t[1] - b[1]), t))
        name = "The box" if len(boxes) == 1 else f"Box {i}"
        where = f"on its {aim}" if nearest == b else f"its {aim} {offset(b, nearest)} of it"
        lines.append(f"{name}: {offset(player, b)} of you; {where}.")
    return "\n".join(lines)


def room_key(room: dict[str, Any]) -> str:
    """A room's content key (``envs/holdout.py``): the room drawn with its boxes and the player at the start."""
    return render_room(tuple(room["shape"]), room["walls"], room["targets"], room["boxes"], tuple(room["player"]))


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


def solve(env_or_state: Any, max_depth: int = 100, max_states: int = 1_000_000,
          goal: Callable[[Pos, frozenset], bool] | None = None) -> list[str] | None:
    """Shortest list of moves that puts every box on a target, or None if none within ``max_depth``.

    ``env_or_state`` is a :class:`~selfevolve.envs.games.sokoban.SokobanEnv` (its current state), a room drawn in the
    observation symbols, or a dict as returned by :func:`parse_room`. Breadth-first search over (player,
    boxes) states; gives up (None) after ``max_states`` states. ``goal(player, boxes)``: the state to reach
    instead of a solved room; an env playing a synthesized task brings its own (``SokobanEnv.goal_test``).
    """
    if callable(getattr(env_or_state, "room_state", None)):
        room = env_or_state.room_state()
        goal = goal if goal is not None else env_or_state.goal_test()
    elif isinstance(env_or_state, str):
        room = parse_room(env_or_state)
    else:
        room = env_or_state
    h, w = room["shape"]
    walls, targets = room["walls"], frozenset(room["targets"])

    def free(p: Pos) -> bool:
        return 0 <= p[0] < h and 0 <= p[1] < w and p not in walls

    if goal is None:
        def goal(player: Pos, boxes: frozenset) -> bool:
            return boxes == targets

    start = (tuple(room["player"]), frozenset(map(tuple, room["boxes"])))
    if goal(*start):
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
            if goal(nxt, new_boxes):
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
