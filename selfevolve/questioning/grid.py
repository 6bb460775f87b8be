"""Self-questioning in a grid game: what FrozenLake and Sokoban share; each brings its own small pieces
(a :class:`GridGame`: ``questioning/games.py`` for FrozenLake, ``questioning/sokoban.py`` for Sokoban).

The stages are the tool worlds' (``explore.py``, ``synthesize.py``, ``filters.py``, ``pipeline.py``). Here: the
game's pieces (:class:`GridGame`) and the exploration; the writers, the filters and the run are in
``grid_tasks.py``.

- **exploration** (:class:`GridExploration`): the policy plays a training seed's ordinary game with no goal, one
  answer per turn, its moves run one by one and the state after each logged. Breadth first: for
  ``breadth_steps`` turns the hint names the moves not tried yet from the current cell (when all were, those
  not used anywhere yet); depth afterwards (the game's hint). When the game ends, so does the exploration.
  What an exploration reached, with the moves that got there first, loops erased: :func:`erased_walks` (the
  template writer's tasks, evolve's hindsight tasks); with ``evolve.references=shortest`` each of those is
  replaced by the shortest move sequence to the same state that a breadth-first search over replays of the
  sandbox finds (:func:`shortest_walks`).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Any, Callable, Hashable, Iterable

from selfevolve.envs.base import StepResult, TextEnv
from selfevolve.envs.games.moves import parse_moves
from selfevolve.questioning.explore import ExplorationRecord
from selfevolve.questioning.filters import Execution

BREADTH_HINT = "Next, try a move you have not tried from this cell yet: {moves}."
BREADTH_HINT_ANYWHERE = "Next, try a move you have not used yet: {moves}."
ROW_COL = re.compile(r"row\s*(\d+)\s*[,;]?\s*(?:and\s+)?(?:col(?:umn)?|col\.)\s*(\d+)", re.I)
PAIR = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*\)")


STEP = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}  # a move's direction (row, column)


def cell_text(r: int, c: int) -> str:
    """A cell as requests name it: rows and columns count from 1 at the top left."""
    return f"row {r + 1}, column {c + 1}"


class GridGame(ABC):
    """A game's pieces for self-questioning. Subclasses set the texts and implement the abstract methods (a
    game missing one cannot be constructed)."""

    brief = ""  # the exploration's first line, above the board
    depth_hint = "Next, walk on to a cell you have not visited yet."
    writer_system = ""  # the writer's system prompt
    legend = ""  # the writer's caption of the board, e.g. "Map (P is the player at the start, ...):"
    ask = ""  # "Write {n} task{s}, each ... in at most {max_moves} moves."

    def check_options(self, options: dict) -> None:
        """Refuse env options the questioning cannot work with (a ConfigError/SelfEvolveError)."""

    def board_options(self, options: dict) -> dict:
        """The env options of the board the writer is shown."""
        return options

    @abstractmethod
    def player(self, world) -> tuple[int, int]:
        """The player's cell (row, column), 0-based."""

    @abstractmethod
    def state(self, world) -> Hashable:
        """The state after a move, for loop erasure (a move that changes nothing leaves it equal)."""

    @abstractmethod
    def after_move(self, world) -> Any:
        """What is logged of the state after each move (JSON)."""

    @abstractmethod
    def turn_fields(self, world, start, after: list) -> dict[str, Any]:
        """The game's fields of a turn's log entry, from the state before the turn and after each move."""

    @abstractmethod
    def result(self, world, start, after: list) -> str:
        """The result line of a valid turn (what the writer reads)."""

    @abstractmethod
    def logged_states(self, turn: dict) -> list[tuple[str, Hashable, bool]]:
        """``(move, state after it, whether a task may end there)`` for each move of a logged turn."""

    @abstractmethod
    def start_text(self, world, seed: int) -> str:
        """What the writer is told of the start, e.g. ``start: row 1, column 1``."""

    @abstractmethod
    def named_goal(self, query: str, world, seed: int) -> Hashable | None:
        """What a request names (its goal as the game reads it), None when nothing."""

    @abstractmethod
    def execute(self, world, seed: int, moves: list[str], aim) -> Execution:
        """Replay ``moves`` on a fresh game of ``seed``; ok only when they keep the game's rules and end where
        ``aim`` (the request's named goal) says. The execution's goal is the end state (the verifier)."""

    @abstractmethod
    def make_task(self, task_id: str, seed: int, goal: dict, moves: list[str], query: str):
        """The ``Task`` of a kept candidate, from its execution's goal."""

    @abstractmethod
    def template(self, record: ExplorationRecord, world, relabel: bool = False,
                 shortest: bool = False) -> list[dict[str, Any]]:
        """The template writer's candidates from one exploration (``questioning.writer=template``). ``relabel``
        (``evolve.hindsight=goal``): each reached state becomes the instance's own goal (hindsight goal
        relabelling), a candidate's ``"aim"`` the state (JSON) that :meth:`aim` reads back. ``shortest``
        (``evolve.references=shortest``): each reference is :func:`shortest_walks`'s."""

    def aim(self, value) -> Any:
        """A relabelled candidate's ``"aim"`` as :meth:`named_goal` would give it. Default: a cell."""
        return tuple(value)

    def report(self, records: list[ExplorationRecord], world) -> dict[str, Any]:
        """The game's own keys of ``report.json``."""
        return {}

    def shown_fatal(self, world, cell: tuple[int, int]) -> bool:
        """Whether the board shows ``cell`` as one that ends the game unsolved (FrozenLake: a hole). Default:
        none."""
        return False

    def shown_blocked(self, world, cell: tuple[int, int]) -> bool:
        """Whether the board shows ``cell`` as one the player cannot enter (Sokoban: a wall): a move there moves
        nothing. Default: none."""
        return False


# ---------------------------------------------------------------------------------------------- exploring
class GridExploration(TextEnv):
    """A game with no goal, wrapped for exploring (subclasses set ``game``): the first observation is the brief
    above the board, and every board is followed by the breadth or depth hint. Each turn is logged as
    ``{"call": the answer, "valid", "repeat": False, "result", "moves": the moves run, ...the game's fields}``."""

    game: GridGame

    def __init__(self, world, breadth_steps: int = 4, max_turns: int = 8, entities: str = ""):
        self.world, self.breadth_steps, self.max_turns = world, breadth_steps, max_turns
        self.name = f"explore-{world.name}"
        self.instructions, self.examples = world.instructions, world.examples

    def reset(self, seed: int) -> str:
        board = self.world.reset(seed)  # the ordinary game of this training seed
        self.turn, self.tried, self.visited = 0, set(), {self.game.player(self.world)}
        self.over = False  # the exploration has ended (the rollout plays it no more)
        self.log: list[dict[str, Any]] = []
        return f"{self.game.brief}\n{board}\n{self.hint()}"

    def hint(self) -> str:
        kind, moves = self.suggested()
        if kind == "here":
            return BREADTH_HINT.format(moves=", ".join(moves))
        if kind == "anywhere":
            return BREADTH_HINT_ANYWHERE.format(moves=", ".join(moves))
        return self.game.depth_hint

    def suggested(self) -> tuple[str, list[str]]:
        """What the hint asks for and its moves: in breadth, the moves not tried from this cell (``"here"``),
        else those not used anywhere (``"anywhere"``); in depth (``"depth"``), the moves onto a cell not visited
        yet (one step in the move's direction; a move off the board or back is not one). The move list is
        what ``allowed_moves`` keeps when answers are masked to the hint (``selfevolve evolve``)."""
        moves, here = self.world.moves, self.game.player(self.world)
        if self.turn < self.breadth_steps:
            untried = [m for m in moves if (here, m) not in self.tried]
            if untried:
                return "here", untried
            anywhere = [m for m in moves if m not in {m for _, m in self.tried}]
            if anywhere:
                return "anywhere", anywhere
        shape = board_shape(self.world)
        fresh = [m for m in moves if (cell := (here[0] + STEP[m][0], here[1] + STEP[m][1])) not in self.visited
                 and 0 <= cell[0] < shape[0] and 0 <= cell[1] < shape[1]]
        return "depth", fresh

    def allowed_moves(self) -> list[str]:
        """The moves a masked explorer may answer with now: the hint's, less those onto a cell the board shows
        as fatal (a hole: the exploration would end there) or blocked (a wall: the move would move nothing);
        when that leaves none, those safe moves; then the hint's; then every move."""
        here, moves = self.game.player(self.world), list(self.world.moves)
        ahead = {m: (here[0] + STEP[m][0], here[1] + STEP[m][1]) for m in moves}
        safe = [m for m in moves if not self.game.shown_fatal(self.world, ahead[m])
                and not self.game.shown_blocked(self.world, ahead[m])]
        hinted = self.suggested()[1]
        return [m for m in hinted if m in safe] or safe or hinted or moves

    def step(self, action: str) -> StepResult:
        self.turn += 1
        world, game = self.world, self.game
        start = game.state(world)
        moves = parse_moves(action, world.moves, world.moves_per_turn)
        after: list = []
        if moves is None:  # the world's own error observation; nothing moves
            obs, _, world_done, _ = world.step(action)
            entry = {"call": action, "valid": False, "repeat": False, "result": obs.splitlines()[0], "moves": []}
        else:
            for m in moves:  # one by one, to log the state after each
                here = game.player(world)
                obs, _, world_done, _ = world.step(m)
                self.tried.add((here, m))
                self.visited.add(game.player(world))
                after.append(game.after_move(world))
                if world_done:
                    break
            moves = moves[:len(after)]
            entry = {"call": " ".join(moves), "valid": True, "repeat": False,
                     "result": game.result(world, start, after), "moves": moves}
        self.log.append({**entry, **game.turn_fields(world, start, after)})
        done = world_done or self.turn >= self.max_turns
        self.over = done
        return StepResult(obs if world_done else f"{obs}\n{self.hint()}", 0.0, done,
                          {"success": False, "valid_action": moves is not None, "moves": moves or []})


def erased_walks(steps: Iterable[tuple[str, Hashable, bool]], start: Hashable) -> list[tuple[Hashable, list[str]]]:
    """Every state a walk reached (its start and unusable states left out), in order of first arrival, with
    the moves that got there first, loops erased: a move back onto a state of the current walk (one that changes
    nothing included) cuts the walk back to that state. The moves are the explorer's own."""
    walk: list[tuple[Hashable, str | None]] = [(start, None)]
    out, seen = [], {start}
    for move, state, usable in steps:
        states = [s for s, _ in walk]
        if state in states:
            del walk[states.index(state) + 1:]
        else:
            walk.append((state, move))
        if state not in seen and usable:
            seen.add(state)
            out.append((state, [m for _, m in walk[1:]]))
    return out


def walks(game: GridGame, record: ExplorationRecord, start: Hashable, world=None) -> list[tuple[Hashable, list[str]]]:
    """:func:`erased_walks` of one exploration; with ``world`` (the sandbox's game), :func:`shortest_walks` of
    them (FrozenLake: a state is the task's cell)."""
    found = erased_walks((s for turn in record.turns for s in game.logged_states(turn)), start)
    return found if world is None else shortest_walks(game, world, record.seed, found)


def shortest_walks(game: GridGame, world, seed: int, found: list[tuple[Hashable, list[str]]],
                   aim: Callable[[Hashable], Hashable] | None = None) -> list[tuple[Hashable, list[str]]]:
    """``found`` (:func:`walks`) with each reference replaced by a shortest move sequence to the first state with
    the same ``aim`` (what the task asks of the state; default the whole ``game.state``) when one is strictly
    shorter; the explorer's own moves are kept on a tie. The search is breadth first over replays of the
    sandbox's ordinary game (a fresh ``world.reset(seed)`` and the prefix replayed for every move tried; a state
    where the game ends is not expanded), to depth one below the longest reference: the environment itself finds
    the shorter path, no map is read. A path is recorded at the first arrival at its aim, so no shorter prefix of
    it reaches the aim (a Sokoban walk asks only for your cell: the shortest way to your cell and the boxes could
    pass that cell earlier). Why: a loop-erased walk still keeps the explorer's detours (in round 0 of ten
    FrozenLake runs, 6-18 of the longest third's 25-35 references were longer than the shortest safe path), and
    imitating a detour teaches moves the board does not call for."""
    aim = aim or (lambda state: state)
    (first,) = first_arrivals(game, world, seed, max((len(m) for _, m in found), default=0) - 1, [aim])
    return shorten(found, first, aim)


def first_arrivals(game: GridGame, world, seed: int, depth: int,
                   aims: list[Callable[[Hashable], Hashable]]) -> list[dict[Hashable, list[str]]]:
    """:func:`shortest_walks`' search, once for several aims: per aim, the moves of the first arrival (breadth
    first, so a shortest one) at each value within ``depth`` moves of the sandbox's start."""
    world.reset(seed)
    seen = {game.state(world)}
    firsts: list[dict[Hashable, list[str]]] = [{aim(game.state(world)): []} for aim in aims]
    frontier: list[list[str]] = [[]]
    for _ in range(max(depth, 0)):
        grown: list[list[str]] = []
        for prefix in frontier:
            for move in world.moves:
                world.reset(seed)
                for m in prefix:
                    world.step(m)
                world.step(move)
                state = game.state(world)
                if state in seen:
                    continue
                seen.add(state)
                for aim, first in zip(aims, firsts):
                    first.setdefault(aim(state), prefix + [move])
                if not world.done:
                    grown.append(prefix + [move])
        frontier = grown
    return firsts


def shorten(found: list[tuple[Hashable, list[str]]], first: dict[Hashable, list[str]],
            aim: Callable[[Hashable], Hashable]) -> list[tuple[Hashable, list[str]]]:
    """Each reference of ``found`` replaced by ``first``'s path to its aim when strictly shorter (a tie keeps
    the explorer's moves)."""
    out = []
    for state, moves in found:
        path = first.get(aim(state))
        out.append((state, path if path is not None and len(path) < len(moves) else moves))
    return out


def board_shape(world) -> tuple[int, int]:
    """Rows and columns of the board a game was just reset to (FrozenLake's map, Sokoban's room)."""
    if getattr(world, "desc", None):
        return len(world.desc), len(world.desc[0])
    return tuple(world.shape)

