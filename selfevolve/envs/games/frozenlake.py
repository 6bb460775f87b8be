"""FrozenLake as a text world: walk from the top-left corner to the goal without falling into a hole.

The rules and the (optionally slippery) dynamics are gymnasium's ``FrozenLakeEnv``; this module adds the text
interface: a compact grid observation, action parsing that never raises (``moves.py``, shared with Sokoban),
several moves per turn, exact snapshots (including the slippery RNG) and a progress heuristic. Its maps are drawn
in ``frozenlake_maps.py``.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as _GymFrozenLake

from selfevolve.envs.base import StepResult, TextEnv
from selfevolve.envs.games.frozenlake_maps import MAX_SIZE, check_drawable, gym_seed, map_key, random_map
# MOVES: gymnasium's action ids 0..3, in this order; the target-task helpers are re-exported for callers
from selfevolve.envs.games.frozenlake_tasks import (FROZENLAKE_PROFILE, MOVES, names_another_cell,  # noqa: F401
                                                    split_tasks, target_task)
from selfevolve.envs.games.game_tasks import PlaysTasks, task_for
from selfevolve.envs.games.moves import answer_format, error_line, parse_moves
from selfevolve.envs.holdout import draw, split_bucket
from selfevolve.errors import ConfigError
from selfevolve.types import Task


# A fixed hand-written map for the few-shot examples (not generated from any seed).
_EXAMPLE_MAP = ["SFFF", "HFHF", "FFFH", "HFFG"]


class FrozenLakeEnv(PlaysTasks, TextEnv):
    """FrozenLake on a random ``size`` x ``size`` map (start top-left, goal bottom-right).

    Options:
        size: side of the square map (>= 2).
        slippery: gymnasium's slippery ice: a move goes the intended way with probability 1/3 and slides to
            either side otherwise. Seeded by ``reset(seed)``, so episodes are reproducible.
        p_frozen: probability that a cell is frozen (safe) when the map is generated; the generator only
            returns maps with a path to the goal.
        max_turns: turn limit of an episode (enforced by the rollout).
        moves_per_turn: how many moves (1..k) one answer may hold; they run in order and stop when the
            episode ends.
        invalid_penalty: reward subtracted for an unparseable answer (which changes nothing).
        progress_reward: weight of a potential-based shaping term, coef * (phi(s') - phi(s)) per move, with
            phi = progress() (1 - normalised distance to the goal) and phi = 0 in a hole. Summed over an episode
            it is coef * phi(final): 0 for a fall, coef for the goal, in between for an unfinished walk — so a
            success stays the best outcome while unfinished walks still get a graded signal (0 disables it).
        bump_penalty: reward subtracted for a move into the edge of the map, which changes nothing (not applied
            on slippery ice, where a slide may do that by chance). Without it a policy that walks into a corner
            and stays there is a stable trap: "Down, Down, Down, ..." keeps half the progress at no cost.
        hints: add a line under the grid saying what each move leads to ("Left: edge. Down: hole. Right:
            ice. Up: edge."). The map is the same; the line spells out the player's neighbourhood, which a
            135M model cannot reliably read off a 2-D grid of symbols.
        split: which episodes ``reset(seed)`` starts. ``train`` (the default) and ``test`` (what evaluation
            switches to) are the ordinary game, reach G, on content-disjoint maps: a seed whose map belongs to
            the other split redraws (``envs/holdout.py``), so no test map is ever a training map; ``all`` or
            ``train+test``: the seed's own map. ``synth``: the target-cell tasks
            of ``tasks_file`` (written by ``selfevolve explore``, see :func:`target_task`), task ``seed % n``.
            ``train+synth``: both, even seeds the ordinary game, odd seeds task ``(seed // 2) % n``.
        tasks_file: a JSONL file of synthesized tasks (a ``types.Task`` per line, ``envs/task_files.py``), read
            when ``split`` holds ``synth``.

    A synthesized task names a map (its seed and its rows), a target cell and a reference move sequence. Its
    first observation is the request line (``Request: ...``) above the board, which marks the target ``T``;
    the episode is solved (reward 1) when the player stands on the target. A hole ends it unsolved as usual;
    so does G when G is not the target (the game ends there, as it always does).

    The defaults (several moves per turn allowed, shaping on) are chosen so that a 135M model learns within
    minutes on a CPU; ``moves_per_turn=1 progress_reward=0 bump_penalty=0`` is gymnasium's plain game.

    Observation: the grid, one row per line, cells separated by a space: ``P`` player, ``_`` frozen, ``O`` hole,
    ``G`` goal, ``X`` player fallen in a hole, ``√`` player on the goal.
    Reward: +1 on reaching the goal, 0 for any other valid move, ``-invalid_penalty`` for an invalid answer,
    plus the optional progress shaping.
    """

    name = "frozenlake"
    moves = MOVES
    instructions = (
        "FrozenLake: you are P on a frozen lake. Reach the goal G. _ is safe ice; O is a hole and "
        "falling in ends the game. Moving off the grid keeps you in place. " + answer_format(MOVES, 1)
    )
    examples: list[tuple[str, str]] = []  # filled in below, from _EXAMPLE_MAP

    def __init__(
        self,
        size: int = 4,
        slippery: bool = False,
        p_frozen: float = 0.8,
        max_turns: int = 8,
        moves_per_turn: int = 1,
        invalid_penalty: float = 0.1,
        progress_reward: float = 1.0,
        bump_penalty: float = 0.1,
        hints: bool = True,
        split: str = "train",
        tasks_file: str = "",
    ):
        if isinstance(size, bool) or not isinstance(size, int) or not 2 <= size <= MAX_SIZE:
            raise ConfigError(f"frozenlake option 'size' must be an integer from 2 to {MAX_SIZE}, got {size!r}")
        if not isinstance(p_frozen, (int, float)) or isinstance(p_frozen, bool) or not 0.0 < p_frozen <= 1.0:
            raise ConfigError(f"frozenlake option 'p_frozen' must be a number in (0, 1], got {p_frozen!r}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigError(f"frozenlake option 'max_turns' must be an integer >= 1, got {max_turns!r}")
        if isinstance(moves_per_turn, bool) or not isinstance(moves_per_turn, int) or moves_per_turn < 1:
            raise ConfigError(
                f"frozenlake option 'moves_per_turn' must be an integer >= 1, got {moves_per_turn!r}"
            )
        if not isinstance(invalid_penalty, (int, float)) or isinstance(invalid_penalty, bool):
            raise ConfigError(f"frozenlake option 'invalid_penalty' must be a number, got {invalid_penalty!r}")
        self.size = size
        self.slippery = bool(slippery)
        self.p_frozen = float(p_frozen)
        self.max_turns = max_turns
        self.moves_per_turn = moves_per_turn
        self.invalid_penalty = float(invalid_penalty)
        self.progress_reward = float(progress_reward)
        self.bump_penalty = float(bump_penalty)
        self.hints = bool(hints)
        self.split, self.tasks_file = split, str(tasks_file or "")
        self.synth_tasks, self.ordinary = split_tasks(split, self.tasks_file)
        if self.ordinary:  # settings that cannot draw a map (of this split) are refused now, not at the first reset
            check_drawable(size, self.p_frozen, split_bucket(split))
        self.task: Task | None = None  # the synthesized task being played (None: the ordinary game)
        self.target: tuple[int, int] | None = None
        self.instructions = self._instructions()
        self.examples = _examples(moves_per_turn, self.hints)
        self._gym: _GymFrozenLake | None = None
        self.desc: list[str] = []
        self.done = False

    # ---------------------------------------------------------------- setup
    def _instructions(self) -> str:
        text = (
            "FrozenLake: you are P on a frozen lake. Reach the goal G. _ is safe ice; O is a hole and "
            "falling in ends the game. Moving off the grid keeps you in place. "
        )
        if self.slippery:
            text += "The ice is slippery: a move may slide you sideways. "
        if any(names_another_cell(t) for t in self.synth_tasks):
            text += ("A request above the board may name another cell to reach instead, marked T: then only "
                     "standing on T counts. ")
        return text + answer_format(MOVES, self.moves_per_turn)

    def reset(self, seed: int) -> str:
        """A random map from ``seed`` (same seed, same map); the player starts top-left. With ``split``
        holding ``synth``, the seed may pick a synthesized task instead (:meth:`task_for`)."""
        task = self.task_for(seed)
        if task is not None:
            return self.play(task)
        # the split is by content: a seed whose map is not of this env's split redraws (envs/holdout.py)
        seed, desc = draw(gym_seed(seed), split_bucket(self.split),
                          lambda s: (gym_seed(s), random_map(self.size, self.p_frozen, gym_seed(s))),
                          key=lambda item: map_key(item[1]), what=f"frozenlake size={self.size} p_frozen={self.p_frozen}")
        return self.load(desc, seed=seed)

    def content_key(self) -> str:
        """The task's content: the map's rows, and a synthesized task's target (``envs/holdout.py``)."""
        key = map_key(self.desc)
        return key if self.target is None else f"{key}|T{self.target[0]},{self.target[1]}"

    def task_for(self, seed: int) -> Task | None:
        """The synthesized task a seed starts, or None for the ordinary game on the seed's map."""
        return task_for(self.synth_tasks, self.ordinary, seed)

    def play(self, task: Task) -> str:
        """Start a target-cell task: its map, the request line above the board, the target marked T. A task
        whose target is the map's G is the ordinary game of that map (a relabelled goal, or G found by
        exploring): no request line, so it reads exactly as a held-out map does."""
        goal = task.goal
        self.load(goal["map"], seed=goal["seed"])
        self.task, self.target = task, (int(goal["target"][0]), int(goal["target"][1]))
        if not names_another_cell(task):
            return self.render()
        return f"Request: {task.instruction}\n{self.render()}"

    def load(self, desc: list[str] | str, seed: int = 0) -> str:
        """Start an episode on a given map in gymnasium's letters (S start, F frozen, H hole, G goal).

        ``desc`` is a list of rows or one string with a row per line. Returns the observation.
        """
        if isinstance(desc, str):
            desc = [row.strip() for row in desc.strip().splitlines() if row.strip()]
        self.desc = [str(row) for row in desc]
        self._gym = _GymFrozenLake(desc=self.desc, is_slippery=self.slippery)
        self._gym.reset(seed=gym_seed(seed))
        self.done = False
        self.task, self.target = None, None
        return self.render()

    # ---------------------------------------------------------------- state
    @property
    def position(self) -> tuple[int, int]:
        if self._gym is None:
            return (0, 0)
        return divmod(int(self._gym.s), len(self.desc[0]))

    def _cell(self) -> str:
        r, c = self.position
        return self.desc[r][c]

    @property
    def success(self) -> bool:
        if self.target is not None:
            return self._gym is not None and self.position == self.target
        return self._gym is not None and self._cell() == "G"

    def _lost(self) -> bool:
        """On a cell that ends the episode unsolved: a hole, or G when a task's target is another cell."""
        cell = self._cell()
        return cell == "H" or (cell == "G" and self.target is not None and not self.success)

    def render(self) -> str:
        if self._gym is None:
            return ""
        pr, pc = self.position
        rows = []
        for r, row in enumerate(self.desc):
            cells = []
            for c, letter in enumerate(row):
                if self.target is not None and (r, c) == (pr, pc):
                    cells.append("√" if (r, c) == self.target else "X" if letter == "H" else "P")
                elif self.target is not None and (r, c) == self.target and letter != "G":
                    cells.append("T")
                elif (r, c) == (pr, pc):
                    cells.append({"H": "X", "G": "√"}.get(letter, "P"))
                else:
                    cells.append({"H": "O", "G": "G"}.get(letter, "_"))
            rows.append(" ".join(cells))
        if self.hints and not self.done:
            rows.append(self._neighbourhood())
        return "\n".join(rows)

    def _neighbourhood(self) -> str:
        """What each move leads to, in words: 'Left: edge. Down: hole. Right: ice. Up: edge.'"""
        r, c = self.position
        parts = []
        for move, (dr, dc) in zip(MOVES, ((0, -1), (1, 0), (0, 1), (-1, 0))):
            rr, cc = r + dr, c + dc
            if not (0 <= rr < len(self.desc) and 0 <= cc < len(self.desc[0])):
                what = "edge"
            elif self.target is not None and (rr, cc) == self.target and self.desc[rr][cc] != "G":
                what = "target"
            else:
                what = {"H": "hole", "G": "goal"}.get(self.desc[rr][cc], "ice")
            parts.append(f"{move}: {what}.")
        return " ".join(parts)

    def state_key(self) -> str:
        r, c = self.position
        target = "" if self.target is None else f",T{self.target[0]},{self.target[1]}"
        return f"{r},{c}" + target + (",done" if self.done else "")

    def progress(self) -> float:
        """1 − Manhattan distance to the goal ÷ the grid's span; 0 in a hole (no way on from there)."""
        if self._gym is not None and self._cell() == "H":
            return 0.0
        r, c = self.position
        n_rows, n_cols = len(self.desc) or self.size, len(self.desc[0]) if self.desc else self.size
        gr, gc = n_rows - 1, n_cols - 1
        for i, row in enumerate(self.desc):
            if "G" in row:
                gr, gc = i, row.index("G")
        if self.target is not None:  # a task's target instead of G; G itself ends the task unsolved
            if self._lost():
                return 0.0
            gr, gc = self.target
        span = (n_rows - 1) + (n_cols - 1)
        return max(0.0, min(1.0, 1.0 - (abs(gr - r) + abs(gc - c)) / span))

    def expert_action(self) -> str | None:
        """The first move of a shortest hole-free path to the goal (breadth-first search), or None. In a
        target-cell task: to the target, G counting as a hole when it is not the target."""
        if self._gym is None or self.done:
            return None
        n_rows, n_cols = len(self.desc), len(self.desc[0])
        start = self.position
        first: dict[tuple[int, int], str | None] = {start: None}
        queue = deque([start])
        while queue:
            r, c = queue.popleft()
            if ((r, c) == self.target) if self.target is not None else self.desc[r][c] == "G":
                return first[(r, c)]
            for move, (dr, dc) in zip(MOVES, ((0, -1), (1, 0), (0, 1), (-1, 0))):
                nxt = (r + dr, c + dc)
                if 0 <= nxt[0] < n_rows and 0 <= nxt[1] < n_cols and nxt not in first and self.desc[nxt[0]][nxt[1]] != "H" \
                        and not (self.target is not None and self.desc[nxt[0]][nxt[1]] == "G" and nxt != self.target):
                    first[nxt] = first[(r, c)] or move
                    queue.append(nxt)
        return None

    # ---------------------------------------------------------------- step
    def step(self, action: str) -> StepResult:
        if self._gym is None:
            raise RuntimeError("call reset(seed) before step()")
        moves = parse_moves(action, MOVES, self.moves_per_turn)
        if moves is None:
            error = error_line(MOVES, self.moves_per_turn)
            return StepResult(f"{error}\n{self.render()}", -self.invalid_penalty, self.done, self._info(False, []))
        if self.done:  # stepping a finished episode changes nothing
            return StepResult(self.render(), 0.0, True, self._info(True, []))
        reward = 0.0
        executed: list[str] = []
        before = self.progress()
        for move in moves:
            position = self._gym.s
            self._gym.step(MOVES.index(move))
            executed.append(move)
            if self._gym.s == position and not self.slippery:
                reward -= self.bump_penalty  # walked into the edge: a wasted move
            if self.target is not None:  # a target-cell task: the target, or a hole / G that is not it
                if self.success or self._lost():
                    self.done = True
                    reward += 1.0 if self.success else 0.0
                    break
                continue
            cell = self._cell()
            if cell in "GH":
                self.done = True
                reward += 1.0 if cell == "G" else 0.0
                break
        if self.progress_reward:
            reward += self.progress_reward * (self.progress() - before)
        return StepResult(self.render(), reward, self.done, self._info(True, executed))

    # ---------------------------------------------------------------- snapshots
    def snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = {"desc": list(self.desc), "done": self.done, "s": None, "lastaction": None, "rng": None}
        if self._gym is not None:
            snap["s"] = int(self._gym.s)
            snap["lastaction"] = self._gym.lastaction
            snap["rng"] = self._gym.np_random.bit_generator.state  # a fresh dict each call
        if self.task is not None:
            snap["task"] = self.task  # shared, never changed
        return snap

    def restore(self, snapshot: dict[str, Any]) -> None:
        desc = list(snapshot["desc"])
        self.task = snapshot.get("task")
        self.target = None if self.task is None else (int(self.task.goal["target"][0]), int(self.task.goal["target"][1]))
        if not desc:
            self._gym, self.desc, self.done = None, [], False
            return
        if self._gym is None or desc != self.desc:
            self.desc = desc
            self._gym = _GymFrozenLake(desc=self.desc, is_slippery=self.slippery)
            self._gym.reset(seed=0)
        self._gym.s = snapshot["s"]
        self._gym.lastaction = snapshot["lastaction"]
        self._gym.np_random.bit_generator.state = snapshot["rng"]
        self.done = bool(snapshot["done"])


def _examples(k: int, hints: bool = False) -> list[tuple[str, str]]:
    """Two example turns on the fixed example map, each answered with a move on a shortest safe path."""
    env = FrozenLakeEnv.__new__(FrozenLakeEnv)
    env.slippery, env.moves_per_turn, env.invalid_penalty, env.progress_reward = False, 4, 0.0, 0.0
    env.bump_penalty, env.hints = 0.0, hints
    first = env.load(_EXAMPLE_MAP)  # P at (0,0), hole below: go Right
    env.step("Right Down Down Right")  # to (2,2); the goal is down-right, a hole to the right
    second = env.render()
    if k == 1:
        return [(first, "Right"), (second, "Down")]
    return [(first, "Right Down"), (second, "Down Right")]


FrozenLakeEnv.examples = _examples(1)


FrozenLakeEnv.profile = FROZENLAKE_PROFILE  # what self-questioning explores from (selfevolve/questioning/games.py)
