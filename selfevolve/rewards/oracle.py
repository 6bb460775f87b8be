"""Ground truth for self-attributing (``rewards/attribution.py``): step labels from the environments that know the
truth, and how far a judge's labels agree with them.

:class:`Oracle` replays a trajectory from its task seed and labels each step from the state before and after it:

- FrozenLake: GOOD iff the step reduced the breadth-first distance to the goal over safe ice (a hole is BAD; a
  synthesized task's goal is its target cell, G then ending it unsolved);
- Sokoban: GOOD iff the step reduced the length of a shortest solution (``envs.games.sokoban.solve``, cached per
  state); a push into a dead end (no solution any more) is BAD;
- tool worlds: GOOD iff the call succeeded and is part of the reference solution or equivalent to it — the same
  tool giving the same result as a reference call not yet matched gave when the reference solution was
  replayed (so ``"water bottle"`` for ``"Water Bottle"`` counts, and a count taken before the filter it needs
  does not); ``finish`` is GOOD iff it solved the task.

:func:`agreement` measures a judge against it: step accuracy, balanced accuracy and earliest-error accuracy on
failed trajectories.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from selfevolve.agent.parsing import parse_action
from selfevolve.envs.base import TextEnv
from selfevolve.envs.games.frozenlake import FrozenLakeEnv
from selfevolve.envs.games.sokoban import SokobanEnv, solve
from selfevolve.envs.tools.base import ToolWorld
from selfevolve.errors import ConfigError

GOOD, BAD = "GOOD", "BAD"
CACHE_LIMIT = 100_000  # oracle cache entries (maps, rooms) before a cache starts over: bounded memory in long runs


# ---- the oracles -----------------------------------------------------------------------------------------------
class OracleMismatch(RuntimeError):
    """Replaying a trajectory from its seed did not pass through the states the rollout recorded (an environment
    that is not deterministic given its seed has no oracle)."""


def lake_distances(desc: list[str], target: tuple[int, int] | None = None) -> dict[tuple[int, int], int]:
    """Breadth-first distance of every cell to the nearest goal over non-hole cells (holes and cells cut off
    from the goal are absent). ``target``: a synthesized task's cell instead of G; G, where the game ends
    unsolved for such a task, then counts as a hole."""
    rows, cols = len(desc), len(desc[0]) if desc else 0
    goals = [tuple(target)] if target is not None else \
        [(r, c) for r in range(rows) for c in range(cols) if desc[r][c] == "G"]
    blocked = "HG" if target is not None else "H"
    dist = {g: 0 for g in goals}
    queue = deque(goals)
    while queue:
        r, c = queue.popleft()
        for dr, dc in ((0, -1), (1, 0), (0, 1), (-1, 0)):
            nxt = (r + dr, c + dc)
            if 0 <= nxt[0] < rows and 0 <= nxt[1] < cols and nxt not in dist and desc[nxt[0]][nxt[1]] not in blocked:
                dist[nxt] = dist[(r, c)] + 1
                queue.append(nxt)
    return dist


class Oracle:
    """Ground-truth step labels for the environments that know the truth (FrozenLake, Sokoban, tool worlds).

    A trajectory is replayed in a private environment from its task seed (``reset(seed)``, then each step's
    action as the rollout parsed it); the state key before each step must equal the one the rollout recorded,
    else :class:`OracleMismatch`. Nothing extra is carried by the rollout. Distances are cached per state
    (FrozenLake: per map; Sokoban: per (player, boxes) state, the shortest-solution search being the cost;
    tool worlds: the reference solution's results per task)."""

    def __init__(self, env: TextEnv):
        if not self.supports(env):
            raise ConfigError(f"no attribution oracle for env {getattr(env, 'name', type(env).__name__)!r}; "
                              f"oracles exist for frozenlake, sokoban and the tool worlds (shop, tables)")
        self.env = env
        self._lake: dict[tuple[str, ...], dict[tuple[int, int], int]] = {}
        self._box: dict[str, int | None] = {}
        self._reference: dict[str, list[tuple[str, str]]] = {}

    @staticmethod
    def supports(env: TextEnv) -> bool:
        return isinstance(env, (FrozenLakeEnv, SokobanEnv, ToolWorld))

    def labels(self, traj) -> list[dict[str, Any]]:
        """``{"label", "rationale"}`` of every step of ``traj``."""
        env = self.env
        env.reset(traj.task.seed)
        if isinstance(env, ToolWorld):
            return self._tool_labels(traj)
        measure = self._lake_distance if isinstance(env, FrozenLakeEnv) else self._box_distance
        out = []
        for t, step in enumerate(traj.steps):
            self._check(step, t)
            before = measure()
            result = env.step(parse_action(step.action_text))
            after = measure()
            out.append(self._game_label(result.info, before, after))
        return out

    def _check(self, step, t: int) -> None:
        key = str(self.env.state_key())
        if step.state_key and key != step.state_key:
            raise OracleMismatch(f"replaying step {t + 1} of a {self.env.name} trajectory from its seed reached "
                                 f"state {key!r}, but the rollout recorded {step.state_key!r}")

    # -- games: distance to the goal (FrozenLake) or to a solved room (Sokoban), None when unreachable
    def _lake_distance(self) -> int | None:
        env = self.env
        key = (tuple(env.desc), env.target)  # a synthesized task's target cell (selfevolve evolve's pool)
        if key not in self._lake:
            if len(self._lake) >= CACHE_LIMIT:
                self._lake.clear()
            self._lake[key] = lake_distances(env.desc, env.target)
        return self._lake[key].get(env.position)  # a hole has no distance

    def _box_distance(self) -> int | None:
        env = self.env
        # walls, targets, boxes and player: the state key alone would mix up rooms; the state key adds a task's goal
        key = (env.render(), env.state_key())
        if key not in self._box:
            if len(self._box) >= CACHE_LIMIT:
                self._box.clear()
            plan = solve(env, max_depth=200)
            self._box[key] = None if plan is None else len(plan)
        return self._box[key]

    def _game_label(self, info: dict, before: int | None, after: int | None) -> dict[str, Any]:
        task = isinstance(self.env, FrozenLakeEnv) or getattr(self.env, "task", None) is not None  # a Sokoban task
        goal = "the goal" if task else "a solved room"
        if not info.get("valid_action", True):
            return {"label": BAD, "rationale": "invalid action: nothing changed"}
        if info.get("success"):
            return {"label": GOOD, "rationale": f"reached {goal}"}
        if before is None:
            return {"label": BAD, "rationale": f"{goal} could no longer be reached"}
        if after is None:
            what = "fell into a hole" if isinstance(self.env, FrozenLakeEnv) else "no solution is left"
            return {"label": BAD, "rationale": what}
        return {"label": GOOD if after < before else BAD,
                "rationale": f"distance to {goal} {before} -> {after}"}

    # -- tool worlds: the reference solution's calls and results
    def _reference_results(self) -> list[tuple[str, str]]:
        """(tool name, result) of each reference call, replayed from the task's start; the world is reset to
        the start afterwards."""
        env = self.env
        task = env.task
        if task.id not in self._reference:
            results = []
            for call in env.reference_calls():
                res = env.step(call.text())
                results.append((call.name, res.observation))
            self._reference[task.id] = results
            env.load(task)
        return self._reference[task.id]

    def _tool_labels(self, traj) -> list[dict[str, Any]]:
        env = self.env
        left = list(self._reference_results())  # (name, result) not matched yet
        out = []
        for t, step in enumerate(traj.steps):
            self._check(step, t)
            result = env.step(parse_action(step.action_text))
            info = result.info
            call = info.get("tool_call") or {}
            name = call.get("name")
            if not info.get("valid_action", True):
                out.append({"label": BAD, "rationale": "not a valid tool call"})
            elif info.get("tool_error"):
                out.append({"label": BAD, "rationale": f"{name} failed"})
            elif name == "finish":
                out.append({"label": GOOD, "rationale": "finished with the right result"} if info.get("success")
                           else {"label": BAD, "rationale": "finished with a wrong result"})
            elif (name, result.observation) in left:
                left.remove((name, result.observation))
                out.append({"label": GOOD, "rationale": f"{name}: a reference call (same result)"})
            else:
                out.append({"label": BAD, "rationale": f"{name}: not in the reference solution, or repeated"})
        return out


# ---- agreement with the oracle ---------------------------------------------------------------------------------
def first_bad(labels: list[bool]) -> int | None:
    """Index of the first BAD (False) step, or None."""
    return next((i for i, good in enumerate(labels) if not good), None)


def agreement(predicted: list[list[bool]], truth: list[list[bool]], failed: list[bool]) -> dict[str, float]:
    """A judge's step labels (True = GOOD) against the oracle's, over trajectories:

    - ``accuracy``: share of steps labelled as the oracle labels them;
    - ``good_recall`` / ``bad_recall``: share of the oracle's GOOD (BAD) steps the judge calls GOOD (BAD);
    - ``balanced_accuracy``: the mean of those recalls over the classes the oracle uses (a judge that calls every
      step GOOD scores 0.5, whatever the share of GOOD steps);
    - ``first_error_accuracy``: over failed trajectories in which the oracle finds a BAD step, the share where
      the judge's first BAD step is the oracle's first (the earliest error; Who&When's step-level accuracy);
      absent when there is no such trajectory.

    Also ``steps``, ``good_share`` (the judge's) and ``oracle_good_share``."""
    if len(predicted) != len(truth) or len(truth) != len(failed):
        raise ValueError(f"{len(predicted)} judged, {len(truth)} oracle and {len(failed)} outcome lists")
    pairs = [(p, o) for ps, os_ in zip(predicted, truth) for p, o in zip(ps, os_, strict=True)]
    n = len(pairs)
    out: dict[str, float] = {"steps": n}
    if n:
        out["accuracy"] = sum(p == o for p, o in pairs) / n
        out["good_share"] = sum(p for p, _ in pairs) / n
        out["oracle_good_share"] = sum(o for _, o in pairs) / n
        recalls = []
        for cls, key in ((True, "good_recall"), (False, "bad_recall")):
            truth_cls = [p for p, o in pairs if o == cls]
            if truth_cls:
                out[key] = sum(p == cls for p in truth_cls) / len(truth_cls)
                recalls.append(out[key])
        out["balanced_accuracy"] = sum(recalls) / len(recalls)
    errors = [(first_bad(p), first_bad(o)) for p, o, f in zip(predicted, truth, failed)
              if f and first_bad(o) is not None]
    if errors:
        out["first_error_accuracy"] = sum(p == o for p, o in errors) / len(errors)
        out["failed_with_error"] = len(errors)
    return out
