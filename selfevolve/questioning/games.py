"""Self-questioning in FrozenLake: explore a lake, write "reach cell (r, c)" tasks, keep those whose reference
walk runs. What all grid games share is in ``grid.py`` and ``grid_tasks.py``;
FrozenLake's own pieces are here:

- **exploration** (:class:`GameExploration`): a training seed's lake with no goal. Depth hint: on to a cell not
  visited yet. A fall into a hole (or reaching G, where the game also ends) ends the exploration; the cells
  before it still count. Each turn logs ``"path"`` (the cell after each move) and ``"cell"`` (the kind of the
  last one).
- **a task** (:func:`selfevolve.envs.games.frozenlake.target_task`): the map of that training seed, a target cell, the
  request and the reference moves. FrozenLake plays it with ``env.tasks_file=PATH env.split=synth``.
- **the writers**: the LLM sees the map, the exploration's moves and the cells they led to.
  ``questioning.writer=template`` (:func:`template_tasks`) turns every safe cell an exploration reached into
  "Walk from your start to row r, column c without falling into a hole", its reference the exploration's own
  moves up to the first arrival there with loops erased.
- **the filters** (:func:`check`): ``duplicate`` is a second task for the same map and the same target
  (coordinates make near-identical sentences, so lexical Jaccard would merge different cells; it still catches
  a copy of the worked example); ``execution`` (:func:`execute`) a reference that, replayed move by move on a
  fresh lake of the same seed, has an invalid move, falls into a hole, ends the game early, does not end on the
  cell the query names (the query must name one: row and column, or the goal) or does not fit the episode's
  turns; the verifier is the execution's end cell, the exact goal state.
"""

from __future__ import annotations

import re
from typing import Any

from selfevolve.envs.games.frozenlake import MOVES, FrozenLakeEnv, target_task
from selfevolve.envs.games.frozenlake_tasks import relabel_goal
from selfevolve.envs.games.moves import parse_moves
from selfevolve.errors import SelfEvolveError
from selfevolve.questioning import grid
from selfevolve.questioning.explore import ExplorationRecord
from selfevolve.questioning.filters import Execution
from selfevolve.questioning.grid import (BREADTH_HINT, BREADTH_HINT_ANYWHERE, PAIR, ROW_COL,  # noqa: F401
                                         GridExploration, GridGame, cell_text, erased_walks)

BRIEF = ("There is no goal yet. Explore this lake: walk around to find out which cells are safe ice and where "
         "the holes are.")
DEPTH_HINT = "Next, walk on to a cell you have not visited yet."
_KIND = {"S": "the start", "F": "ice", "H": "a hole", "G": "the goal G"}
_GOAL = re.compile(r"\bgoal\b|\bG\b")
WRITER_SYSTEM = (
    "You write practice tasks for a player of a grid game. From what an explorer found, write tasks that ask "
    "the player to reach one cell the explorer reached safely, naming it by row and column (rows and columns "
    "count from 1 at the top left). Answer with a JSON list of objects {\"query\": \"the request\", "
    "\"confidence\": 0.0 to 1.0, \"action_sequence\": [\"move\", ...]} and nothing else; the action sequence is "
    "the moves that reach the cell from the start, using only the game's moves."
)


def lake(world: FrozenLakeEnv, seed: int) -> list[str]:
    """The map (gymnasium's letters, a row per string) of a training seed's ordinary game."""
    world.reset(seed)
    return list(world.desc)


def named_target(query: str, desc: list[str]) -> tuple[int, int] | None:
    """The cell a request names (0-based): "row 2, column 3" or "(2, 3)" (counted from 1), or the goal G;
    None when it names none, or a cell off the map."""
    m = ROW_COL.search(query) or PAIR.search(query)
    if m:
        r, c = int(m.group(1)) - 1, int(m.group(2)) - 1
        return (r, c) if 0 <= r < len(desc) and 0 <= c < len(desc[0]) else None
    if _GOAL.search(query):
        return next(((r, row.index("G")) for r, row in enumerate(desc) if "G" in row), None)
    return None


def execute(world: FrozenLakeEnv, seed: int, moves: list[str], target: tuple[int, int] | None) -> Execution:
    """Replay ``moves`` one by one on a fresh lake of ``seed``: every move valid, no hole, the game not over
    before the last move, ending on ``target`` (the cell the query names), within the episode's turns. The
    goal derived from it is ``{"seed", "map", "target"}``: the end cell, the exact goal state."""
    limit = world.max_turns * world.moves_per_turn
    if len(moves) > limit:
        return Execution(False, f"{len(moves)} moves: more than max_turns x moves_per_turn ({limit})")
    if target is None:
        return Execution(False, "the query names no target cell (row and column, or the goal)")
    world.reset(seed)
    if world.task is not None:
        return Execution(False, "the world is not playing the ordinary game of this seed")
    for k, move in enumerate(moves, 1):
        if parse_moves(move, MOVES, 1) is None:
            return Execution(False, f"move {k} ({move!r}) is not one of {', '.join(MOVES)}")
        world.step(move)
        cell = world.desc[world.position[0]][world.position[1]]
        if cell == "H":
            return Execution(False, f"move {k} falls into the hole at {cell_text(*world.position)}")
        if world.done and k < len(moves):
            return Execution(False, f"the game ends at move {k} of {len(moves)} (the goal G)")
    if world.position == (0, 0) or world.position != tuple(target):
        return Execution(False, f"ends at {cell_text(*world.position)}, not on the named cell")
    return Execution(True, goal={"seed": int(seed), "map": list(world.desc), "target": list(world.position)})


class FrozenLakeGame(GridGame):
    brief, depth_hint, writer_system = BRIEF, DEPTH_HINT, WRITER_SYSTEM
    legend = "Map (P is the player at the start, _ ice, O a hole, G the goal):"
    ask = "Write {n} task{s}, each reaching a different cell of the exploration in at most {max_moves} moves."

    def check_options(self, options: dict) -> None:
        if options.get("slippery"):
            raise SelfEvolveError("selfevolve explore on FrozenLake needs env.slippery=false: a reference walk "
                                  "must replay the same way")

    def board_options(self, options: dict) -> dict:
        return {**options, "hints": False}

    def shown_fatal(self, world, cell: tuple[int, int]) -> bool:
        """A hole: the board shows it (``O``) and stepping on it ends the game."""
        r, c = cell
        return 0 <= r < len(world.desc) and 0 <= c < len(world.desc[0]) and world.desc[r][c] == "H"

    def player(self, world) -> tuple[int, int]:
        return world.position

    state = player

    def after_move(self, world) -> list[int]:
        return list(world.position)

    def turn_fields(self, world, start, after: list) -> dict[str, Any]:
        r, c = world.position
        return {"path": after, "cell": world.desc[r][c]}

    def result(self, world, start, after: list) -> str:
        kind = world.desc[world.position[0]][world.position[1]]
        return f"{cell_text(*world.position)}: {_KIND[kind]}" + (
            " (fell in; the exploration ends)" if kind == "H" else " (the game ends here)" if kind == "G" else "")

    def logged_states(self, turn: dict) -> list:
        path = turn.get("path", [])
        return [(m, tuple(p), not (turn["cell"] == "H" and tuple(p) == tuple(path[-1])))
                for m, p in zip(turn.get("moves", []), path)]

    def start_text(self, world, seed: int) -> str:
        return f"start: {cell_text(0, 0)}"

    def named_goal(self, query: str, world, seed: int):
        return named_target(query, lake(world, seed))

    def execute(self, world, seed: int, moves: list[str], aim) -> Execution:
        return execute(world, seed, moves, aim)

    def make_task(self, task_id: str, seed: int, goal: dict, moves: list[str], query: str):
        """A request for the goal G whose reference ends on another cell: hindsight goal relabelling, G moves
        onto the cell it reached (:func:`relabel_goal`)."""
        desc, target = goal["map"], tuple(goal["target"])
        if named_target(query, desc) != target:  # "the goal G", reached elsewhere
            desc = relabel_goal(desc, target)
        return target_task(task_id, seed, desc, target, moves, query)

    def template(self, record: ExplorationRecord, world, relabel: bool = False,
                 shortest: bool = False) -> list[dict[str, Any]]:
        return template_tasks(record, lake(world, record.seed), relabel=relabel, world=world if shortest else None)

    def report(self, records: list[ExplorationRecord], world) -> dict[str, Any]:
        return {"cells_reached": sum(len(reached(r)) for r in records),
                "falls": sum(any(t.get("cell") == "H" for t in r.turns) for r in records)}


FROZENLAKE_GAME = FrozenLakeGame()


class GameExploration(GridExploration):
    """A FrozenLake with no goal, wrapped for exploring; each turn logged as ``{"call", "valid", "repeat",
    "result", "moves", "path": [[r, c], ...] after each move, "cell": the kind of the last cell}``."""

    game = FROZENLAKE_GAME


def reached(record: ExplorationRecord, start: tuple[int, int] = (0, 0),
            world: FrozenLakeEnv | None = None) -> list[tuple[tuple[int, int], list[str]]]:
    """Every cell an exploration stood on (its start and holes left out), in order of first arrival, with the
    moves that got there first, loops erased (:func:`grid.erased_walks`; a bump into the edge is a loop); with
    ``world``, the shortest moves there instead when shorter (:func:`grid.shortest_walks`)."""
    return grid.walks(FROZENLAKE_GAME, record, start, world)


def template_tasks(record: ExplorationRecord, desc: list[str], relabel: bool = False,
                   world: FrozenLakeEnv | None = None) -> list[dict[str, Any]]:
    """``questioning.writer=template`` for FrozenLake: each safe cell the exploration reached becomes "Walk from
    your start to row r, column c without falling into a hole" (the goal G: "to the goal G"), its reference the
    loop-erased moves of :func:`reached`. With ``relabel`` (``evolve.hindsight=goal``) every such cell becomes
    the goal G instead: "Walk from your start to the goal G without falling into a hole", ``"aim"`` the cell,
    the map's G moved onto it when the task is made (:meth:`FrozenLakeGame.make_task`). With ``world`` (the
    game of the exploration's sandbox; ``evolve.references=shortest``) each reference is the shortest one
    replays find (:func:`grid.shortest_walks`). Deterministic; no model involved."""
    out = []
    for (r, c), moves in reached(record, world=world):
        where = "the goal G" if relabel or desc[r][c] == "G" else cell_text(r, c)
        task = {"query": f"Walk from your start to {where} without falling into a hole.", "confidence": 1.0,
                "action_sequence": [{"name": m, "arguments": {}} for m in moves]}
        if relabel:
            task["aim"] = [r, c]
        out.append(task)
    return out
