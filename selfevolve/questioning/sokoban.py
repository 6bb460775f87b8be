"""Self-questioning in Sokoban: explore a room, write "stand on cell (r, c)" / "push the box to cell (r, c)" /
"push the box onto the target" tasks, keep those whose reference runs. What all grid games share is in
``grid.py`` and ``grid_tasks.py``; Sokoban's own pieces are here:

- **exploration** (:class:`SokobanExploration`): a training seed's room with no goal. Depth hint: on to a cell
  not visited yet, or push the box somewhere new. Solving the room ends the exploration (the game ends there).
  Each turn logs ``"path"`` (your cell after each move), ``"boxes"`` (the boxes' cells after each move) and
  ``"solved"``.
- **a task** (:func:`selfevolve.envs.games.sokoban_tasks.room_task`): the start room of that training seed, the goal
  (your cell, or the cells of every box), the request and the reference moves. Sokoban plays it with
  ``env.tasks_file=PATH env.split=synth``.
- **the writers**: the LLM sees the room, the exploration's moves and where they left you and the box.
  ``questioning.writer=template`` (:func:`template_tasks`): every cell you first stood on becomes "Walk to row r,
  column c.", every new place of the box "Push the box to row r, column c." (all boxes on targets: "Push the box
  onto the target."), each with the exploration's own moves up to the first arrival there, loops erased over
  (your cell, the boxes' cells) states, so a move that moved nothing is never part of a reference.
- **execution** (:func:`execute`): the reference, replayed move by move on a fresh room of the same seed, must
  use only the four moves, never make a move that moves nothing (into a wall, or pushing a box against a wall or
  another box), not solve the room before its last move (the game ends there), fit the episode's moves, and end
  in the state the query names (:func:`named_goal`): you on the named cell (not your start), a box pushed onto
  the named cell, or every box on a target. The goal kept is that end state: your cell, or every box's cell.
"""

from __future__ import annotations

import re
from typing import Any

from selfevolve.envs.games.moves import parse_moves
from selfevolve.envs.games.sokoban import MOVES, SokobanEnv
from selfevolve.envs.games.sokoban_tasks import relabel_targets, room_rows, room_task
from selfevolve.questioning import grid
from selfevolve.questioning.explore import ExplorationRecord
from selfevolve.questioning.filters import Execution
from selfevolve.questioning.grid import PAIR, ROW_COL, GridExploration, GridGame, cell_text

BRIEF = ("There is no goal yet. Explore this room: walk around and push the box to find out where you can go and "
         "where the box can be moved.")
DEPTH_HINT = "Next, walk on to a cell you have not visited yet, or push the box somewhere new."
WRITER_SYSTEM = (
    "You write practice tasks for a player of a grid game. From what an explorer found, write tasks that ask "
    "the player to stand on a cell the explorer reached, or to push the box to a cell the explorer pushed it "
    "to, naming the cell by row and column (rows and columns count from 1 at the top left). Answer with a JSON "
    "list of objects {\"query\": \"the request\", \"confidence\": 0.0 to 1.0, \"action_sequence\": [\"move\", "
    "...]} and nothing else; the action sequence is the moves that do it from the start, using only the game's "
    "moves."
)
_CELL = re.compile(f"{ROW_COL.pattern}|{PAIR.pattern}", re.I)
_BOX = re.compile(r"\b(?:box|boxes|crate|crates)\b", re.I)
_SOLVE = re.compile(r"\btargets?\b|\bsolve", re.I)


def boxes_text(boxes) -> str:
    cells = sorted(tuple(b) for b in boxes)
    return ("the box at " if len(cells) == 1 else "boxes at ") + "; ".join(cell_text(*b) for b in cells)


def named_goal(query: str, shape: tuple[int, int]) -> tuple | None:
    """What a request names: ``("cell", (r, c))`` (stand there), ``("box", (r, c))`` (a box pushed there), or
    ``("solved",)`` (every box onto a target: a box and a target or "solve" named, no cell); None when nothing
    or a cell off the room. Cells are "row 2, column 3" or "(2, 3)", counted from 1; the last one named counts
    ("from row 2, column 2 to row 2, column 4" names the second)."""
    found = [m.groups() for m in _CELL.finditer(query)]
    cell = None
    if found:
        r, c = (int(x) - 1 for x in (found[-1][:2] if found[-1][0] is not None else found[-1][2:]))
        if not (0 <= r < shape[0] and 0 <= c < shape[1]):
            return None
        cell = (r, c)
    if _BOX.search(query):
        if cell is not None:
            return ("box", cell)
        return ("solved",) if _SOLVE.search(query) else None
    return None if cell is None else ("cell", cell)


def execute(world: SokobanEnv, seed: int, moves: list[str], aim: tuple | None) -> Execution:
    """Replay ``moves`` one by one on a fresh room of ``seed`` (see the module docstring for the rules). The goal
    derived from it is ``{"seed", "room": the start rows, "player": [r, c]}`` or ``{..., "boxes": [[r, c], ...]}``:
    the end state, as exact as the query names it."""
    limit = world.max_turns * world.moves_per_turn
    if len(moves) > limit:
        return Execution(False, f"{len(moves)} moves: more than max_turns x moves_per_turn ({limit})")
    if aim is None:
        return Execution(False, "the query names no goal (a cell to stand on or to push the box to, by row and "
                                "column; or the box onto its target)")
    world.reset(seed)
    if world.task is not None:
        return Execution(False, "the world is not playing the ordinary game of this seed")
    rows, start_player, start_boxes = room_rows(world.room_state()), world.player, frozenset(world.boxes)
    for k, move in enumerate(moves, 1):
        canon = parse_moves(move, MOVES, 1)
        if canon is None:
            return Execution(False, f"move {k} ({move!r}) is not one of {', '.join(MOVES)}")
        before = (world.player, frozenset(world.boxes))
        world.step(canon[0])
        if (world.player, frozenset(world.boxes)) == before:
            return Execution(False, f"move {k} ({canon[0]}) from {cell_text(*world.player)} moves nothing (a wall, "
                                    "or a box that cannot move)")
        if world.done and k < len(moves):
            return Execution(False, f"the room is solved at move {k} of {len(moves)}: the game ends there")
    boxes = frozenset(world.boxes)
    if aim[0] == "cell":
        if world.player != aim[1] or world.player == start_player:
            return Execution(False, f"ends at {cell_text(*world.player)}, not on the named cell (or where it "
                                    "started)")
        goal: dict[str, Any] = {"player": list(world.player)}
    elif aim[0] == "box":
        if aim[1] not in boxes - start_boxes:
            return Execution(False, f"no box was pushed onto {cell_text(*aim[1])} ({boxes_text(boxes)})")
        goal = {"boxes": [list(b) for b in sorted(boxes)]}
    else:
        if not world.success:
            return Execution(False, f"the room is not solved at the end ({boxes_text(boxes)})")
        goal = {"boxes": [list(b) for b in sorted(boxes)]}
    return Execution(True, goal={"seed": int(seed), "room": rows, **goal})


class SokobanGame(GridGame):
    brief, depth_hint, writer_system = BRIEF, DEPTH_HINT, WRITER_SYSTEM
    legend = "Room (P is you at the start, # a wall, _ floor, X a box, O a target, √ a box on a target):"
    ask = ("Write {n} task{s}, each with a different goal from the exploration (a cell to stand on, or a cell to "
           "push the box to), in at most {max_moves} moves.")

    def player(self, world) -> tuple[int, int]:
        return world.player

    def shown_blocked(self, world, cell: tuple[int, int]) -> bool:
        return tuple(cell) in world.walls

    def state(self, world):
        return (world.player, frozenset(world.boxes))

    def after_move(self, world) -> list:
        return [list(world.player), [list(b) for b in sorted(world.boxes)]]

    def turn_fields(self, world, start, after: list) -> dict[str, Any]:
        return {"path": [p for p, _ in after], "boxes": [b for _, b in after], "solved": bool(world.success)}

    def result(self, world, start, after: list) -> str:
        states = [start] + [(tuple(p), frozenset(map(tuple, b))) for p, b in after]
        blocked = sum(a == b for a, b in zip(states, states[1:]))
        text = f"you at {cell_text(*world.player)}; {boxes_text(world.boxes)}"
        if states[-1][1] != start[1]:
            text += " (pushed the box)"
        if blocked:
            text += f" ({blocked} move{'s' if blocked > 1 else ''} moved nothing)"
        if world.success:
            text += " (every box is on a target: the room is solved; the exploration ends)"
        return text

    def logged_states(self, turn: dict) -> list:
        return [(m, (tuple(p), frozenset(map(tuple, b))), True)
                for m, p, b in zip(turn.get("moves", []), turn.get("path", []), turn.get("boxes", []))]

    def start_text(self, world, seed: int) -> str:
        world.reset(seed)
        return f"start: you at {cell_text(*world.player)}; {boxes_text(world.boxes)}"

    def named_goal(self, query: str, world, seed: int):
        world.reset(seed)
        return named_goal(query, world.shape)

    def execute(self, world, seed: int, moves: list[str], aim) -> Execution:
        return execute(world, seed, moves, aim)

    def make_task(self, task_id: str, seed: int, goal: dict, moves: list[str], query: str):
        """A request to solve the room whose reference leaves the boxes elsewhere: hindsight goal relabelling,
        the targets move onto the boxes (:func:`relabel_targets`)."""
        rows = goal["room"]
        if named_goal(query, (len(rows), len(rows[0]))) == ("solved",) and goal.get("boxes") is not None:
            rows = relabel_targets(rows, goal["boxes"])
        return room_task(task_id, seed, rows, moves, query, player=goal.get("player"), boxes=goal.get("boxes"))

    def aim(self, value) -> tuple:
        """A relabelled candidate's aim, ``["box", [r, c]]``: a box pushed onto that cell."""
        return (value[0], tuple(value[1]))

    def template(self, record: ExplorationRecord, world, relabel: bool = False,
                 shortest: bool = False) -> list[dict[str, Any]]:
        return template_tasks(record, world, relabel=relabel, shortest=shortest)

    def report(self, records: list[ExplorationRecord], world) -> dict[str, Any]:
        """``cells_reached``: cells stood on other than the start; ``box_positions``: places of the boxes other
        than the start; ``solved``: explorations that solved the room; ``moved_nothing``: moves that moved
        nothing (summed over explorations)."""
        cells = places = idle = 0
        for r in records:
            world.reset(r.seed)
            start = self.state(world)
            found = grid.walks(self, r, start)
            cells += len({s[0] for s, _ in found} - {start[0]})
            places += len({s[1] for s, _ in found} - {start[1]})
            before = start
            for turn in r.turns:
                for _, state, _ in self.logged_states(turn):
                    idle += state == before
                    before = state
        return {"cells_reached": cells, "box_positions": places,
                "solved": sum(any(t.get("solved") for t in r.turns) for r in records), "moved_nothing": idle}


SOKOBAN_GAME = SokobanGame()


class SokobanExploration(GridExploration):
    """A Sokoban room with no goal, wrapped for exploring; each turn logged as ``{"call", "valid", "repeat",
    "result", "moves", "path": [[r, c], ...] your cell after each move, "boxes": [[[r, c], ...], ...] the boxes
    after each move, "solved"}``."""

    game = SOKOBAN_GAME


def template_tasks(record: ExplorationRecord, world: SokobanEnv, relabel: bool = False,
                   shortest: bool = False) -> list[dict[str, Any]]:
    """``questioning.writer=template`` for Sokoban: each cell the exploration first stood on becomes "Walk to row
    r, column c.", each new place of the box "Push the box to row r, column c." (a box that moved, when several
    did: the one named), or "Push the box onto the target." when every box is on one; the reference is the
    loop-erased moves to that state (:func:`grid.erased_walks` over (your cell, the boxes) states). With
    ``relabel`` (``evolve.hindsight=goal``) only the box's places become tasks, each "Push the box onto the
    target." with ``"aim"`` the box's new cell: the room's targets move onto the boxes when the task is made
    (:meth:`SokobanGame.make_task`), so it is the ordinary game of a relabelled room. With ``shortest``
    (``evolve.references=shortest``) each reference is the shortest one replays find to what its task asks
    (:func:`grid.shortest_walks`): your cell for a walk, the boxes for a push. Deterministic; no model involved."""
    world.reset(record.seed)
    start_player, start_boxes = world.player, frozenset(world.boxes)
    targets, several = frozenset(world.targets), len(world.boxes) > 1
    cells, places, out = {start_player}, {start_boxes}, []
    found = grid.walks(SOKOBAN_GAME, record, (start_player, start_boxes))
    # a walk asks only for your cell, a push only for the boxes: each is shortened to its own aim, so that no
    # shorter prefix of its reference already meets the task (grid.shortest_walks)
    walk_refs, push_refs = [m for _, m in found], [m for _, m in found]
    if shortest:
        aims = [lambda s: s[0], lambda s: s[1]]  # your cell, the boxes: one search for both
        depth = max((len(m) for m in walk_refs), default=0) - 1
        by_cell, by_boxes = grid.first_arrivals(SOKOBAN_GAME, world, record.seed, depth, aims)
        walk_refs = [m for _, m in grid.shorten(found, by_cell, aims[0])]
        push_refs = [m for _, m in grid.shorten(found, by_boxes, aims[1])]
    for ((player, boxes), _), walk_moves, push_moves in zip(found, walk_refs, push_refs):
        if player not in cells and not relabel:
            cells.add(player)
            out.append({"query": f"Walk to {cell_text(*player)}.", "confidence": 1.0,
                        "action_sequence": [{"name": m, "arguments": {}} for m in walk_moves]})
        steps = [{"name": m, "arguments": {}} for m in push_moves]
        if boxes not in places:
            places.add(boxes)
            if relabel:
                out.append({"query": "Push every box onto a target." if several else "Push the box onto the target.",
                            "confidence": 1.0, "action_sequence": steps, "aim": ["box", list(min(boxes - start_boxes))]})
                continue
            if boxes == targets:
                query = "Push every box onto a target." if several else "Push the box onto the target."
            else:
                query = f"Push {'a' if several else 'the'} box to {cell_text(*min(boxes - start_boxes))}."
            out.append({"query": query, "confidence": 1.0, "action_sequence": steps})
    return out
