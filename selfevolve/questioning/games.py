"""Self-questioning in a game (FrozenLake): explore a lake, write "reach cell (r, c)" tasks, keep those whose
reference walk runs.

The stages are the tool worlds' (``explore.py``, ``synthesize.py``, ``filters.py``, ``pipeline.py``); what
differs in a game lives here:

- **exploration** (:class:`GameExploration`): the policy walks a training seed's lake with no goal, one answer
  per turn. Breadth first: for ``breadth_steps`` turns the hint names the moves not tried yet from the current
  cell (or, when all four were, not tried anywhere yet); depth afterwards: on to a cell not visited yet. A fall
  into a hole (or reaching G, where the game also ends) ends the exploration; the cells before it still count.
- **a task** (:func:`selfevolve.envs.frozenlake.target_task`): the map of that training seed, a target cell, the
  request and the reference moves. FrozenLake plays it with ``env.tasks_file=PATH env.split=synth``.
- **the writer**: the LLM sees the map, the exploration's moves and the cells they led to, and answers
  ``[{"query", "confidence", "action_sequence": ["Right", "Down", ...]}]``; its one worked example is from a
  made-up warehouse game (other move names, so a copied example cannot execute). ``questioning.writer=template``
  (:func:`template_tasks`) instead turns every safe cell an exploration reached into "Walk from your start to
  row r, column c without falling into a hole", its reference the exploration's own moves up to the first
  arrival there with loops erased.
- **the filters** (:func:`check`), in the tool worlds' order and counted under the same names: ``duplicate`` is
  a second task for the same map and the same target (coordinates make near-identical sentences, so lexical
  Jaccard would merge different cells; it still catches a copy of the worked example), ``held_out`` a map seed
  at or above ``eval.seed_offset``, ``execution`` a reference that, replayed move by move on a fresh lake of the
  same seed, has an invalid move, falls into a hole, ends the game early, does not end on the cell the query
  names (the query must name one: row and column, or the goal) or does not fit the episode's turns; the
  verifier is the execution's end cell, the exact goal state. ``unverifiable``: the env, playing the task,
  does not count the reference solved.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from selfevolve.envs.base import StepResult, TextEnv
from selfevolve.envs.frozenlake import MOVES, FrozenLakeEnv, parse_moves, target_task
from selfevolve.questioning.explore import ExplorationRecord
from selfevolve.questioning.filters import FILTERS, Execution, jaccard

BRIEF = ("There is no goal yet. Explore this lake: walk around to find out which cells are safe ice and where "
         "the holes are.")
BREADTH_HINT = "Next, try a move you have not tried from this cell yet: {moves}."
BREADTH_HINT_ANYWHERE = "Next, try a move you have not used yet: {moves}."
DEPTH_HINT = "Next, walk on to a cell you have not visited yet."
_STEP = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
_KIND = {"S": "the start", "F": "ice", "H": "a hole", "G": "the goal G"}


def is_game(env_cls) -> bool:
    """Whether self-questioning treats ``env_cls`` as a game (this module) rather than a tool world."""
    return isinstance(env_cls, type) and issubclass(env_cls, FrozenLakeEnv)


def lake(world: FrozenLakeEnv, seed: int) -> list[str]:
    """The map (gymnasium's letters, a row per string) of a training seed's ordinary game."""
    world.reset(seed)
    return list(world.desc)


def cell_text(r: int, c: int) -> str:
    """A cell as requests name it: rows and columns count from 1 at the top left."""
    return f"row {r + 1}, column {c + 1}"


# ---------------------------------------------------------------------------------------------- exploring
class GameExploration(TextEnv):
    """A FrozenLake with no goal, wrapped for exploring: the first observation is the brief above the board,
    and every board is followed by the breadth or depth hint. Each turn is logged as ``{"call": the answer,
    "valid", "repeat": False, "result": where it led, "moves": the moves run, "path": [[r, c], ...] after each
    move, "cell": the kind of the last cell}``."""

    def __init__(self, world: FrozenLakeEnv, breadth_steps: int = 4, max_turns: int = 8, entities: str = ""):
        self.world, self.breadth_steps, self.max_turns = world, breadth_steps, max_turns
        self.name = f"explore-{world.name}"
        self.instructions, self.examples = world.instructions, world.examples

    def reset(self, seed: int) -> str:
        board = self.world.reset(seed)  # the ordinary game's lake of this training seed
        self.turn, self.tried, self.visited = 0, set(), {self.world.position}
        self.log: list[dict[str, Any]] = []
        return f"{BRIEF}\n{board}\n{self.hint()}"

    def hint(self) -> str:
        if self.turn < self.breadth_steps:
            here = [m for m in MOVES if (self.world.position, m) not in self.tried]
            if here:
                return BREADTH_HINT.format(moves=", ".join(here))
            anywhere = [m for m in MOVES if m not in {m for _, m in self.tried}]
            if anywhere:
                return BREADTH_HINT_ANYWHERE.format(moves=", ".join(anywhere))
        return DEPTH_HINT

    def step(self, action: str) -> StepResult:
        self.turn += 1
        start = self.world.position
        obs, _, world_done, info = self.world.step(action)
        valid, moves = bool(info.get("valid_action")), list(info.get("moves") or [])
        path, pos = [], start
        for m in moves:  # the positions after each move (the world ran them in order)
            self.tried.add((pos, m))
            dr, dc = _STEP[m]
            nxt = (pos[0] + dr, pos[1] + dc)
            pos = nxt if 0 <= nxt[0] < len(self.world.desc) and 0 <= nxt[1] < len(self.world.desc[0]) else pos
            path.append(list(pos))
            self.visited.add(pos)
        kind = self.world.desc[pos[0]][pos[1]]
        if not valid:
            result = obs.splitlines()[0]
        else:
            result = f"{cell_text(*pos)}: {_KIND[kind]}" + (" (fell in; the exploration ends)" if kind == "H" else
                                                            " (the game ends here)" if kind == "G" else "")
        self.log.append({"call": action if not valid else " ".join(moves), "valid": valid, "repeat": False,
                         "result": result, "moves": moves, "path": path, "cell": kind})
        done = world_done or self.turn >= self.max_turns
        return StepResult(obs if world_done else f"{obs}\n{self.hint()}", 0.0, done,
                          {"success": False, "valid_action": valid, "moves": moves})


# ---------------------------------------------------------------------------------------------- writing
WRITER_SYSTEM = (
    "You write practice tasks for a player of a grid game. From what an explorer found, write tasks that ask "
    "the player to reach one cell the explorer reached safely, naming it by row and column (rows and columns "
    "count from 1 at the top left). Answer with a JSON list of objects {\"query\": \"the request\", "
    "\"confidence\": 0.0 to 1.0, \"action_sequence\": [\"move\", ...]} and nothing else; the action sequence is "
    "the moves that reach the cell from the start, using only the game's moves."
)
WRITER_EXAMPLE = (
    {"role": "user", "content": "Game: a robot in a warehouse grid; crates (#) block it.\nMoves: North, South, "
     "East, West\nWrite 1 task.\n\nMap:\nR . #\n. . .\n# . .\n\nExploration (start: row 1, column 1):\n"
     "1. East\n   Result: row 1, column 2: floor\n2. South\n   Result: row 2, column 2: floor\n"},
    {"role": "assistant", "content": '[{"query": "Drive the robot to row 2, column 2.", "confidence": 0.9, '
     '"action_sequence": ["East", "South"]}]'},
)
EXAMPLE_QUERY = json.loads(WRITER_EXAMPLE[1]["content"])[0]["query"]


def writer_messages(profile, board: str, exploration_text: str, earlier: list[str], n: int,
                    max_moves: int = 8) -> list[dict]:
    """The writer's prompt for one exploration of a lake: the game, its map, earlier tasks, what was found."""
    parts = [f"Game: {profile.background}", "Moves: " + ", ".join(o.name for o in profile.operations),
             "Rules: " + " ".join(profile.rules),
             f"Write {n} task{'s' if n > 1 else ''}, each reaching a different cell of the exploration in at "
             f"most {max_moves} moves.",
             f"Map (P is the player at the start, _ ice, O a hole, G the goal):\n{board}"]
    if earlier:
        parts.append("Tasks already written (write different ones):\n" + "\n".join(f"- {q}" for q in earlier[-10:]))
    parts.append(f"Exploration (start: {cell_text(0, 0)}):\n{exploration_text}")
    return [{"role": "system", "content": WRITER_SYSTEM}, *WRITER_EXAMPLE,
            {"role": "user", "content": "\n\n".join(parts)}]


def reached(record: ExplorationRecord, start: tuple[int, int] = (0, 0)) -> list[tuple[tuple[int, int], list[str]]]:
    """Every cell an exploration stood on (its start and holes left out), in order of first arrival, with the
    moves that got there first, loops erased: a move back onto a cell of the current walk (a bump into the
    edge included) cuts the walk back to that cell. The moves are the explorer's own, through cells it saw."""
    walk: list[tuple[tuple[int, int], str | None]] = [(start, None)]
    out, seen = [], {start}
    for turn in record.turns:
        for move, pos, in zip(turn.get("moves", []), turn.get("path", [])):
            pos = tuple(pos)
            cells = [p for p, _ in walk]
            if pos in cells:
                del walk[cells.index(pos) + 1:]
            else:
                walk.append((pos, move))
            if pos not in seen and not (turn["cell"] == "H" and pos == tuple(turn["path"][-1])):
                seen.add(pos)
                out.append((pos, [m for _, m in walk[1:]]))
    return out


def template_tasks(record: ExplorationRecord, desc: list[str]) -> list[dict[str, Any]]:
    """``questioning.writer=template`` for a game: each safe cell the exploration reached becomes "Walk from
    your start to row r, column c without falling into a hole" (the goal G: "to the goal G"), its reference the
    loop-erased moves of :func:`reached`. Deterministic; no model involved."""
    out = []
    for (r, c), moves in reached(record):
        where = "the goal G" if desc[r][c] == "G" else cell_text(r, c)
        out.append({"query": f"Walk from your start to {where} without falling into a hole.", "confidence": 1.0,
                    "action_sequence": [{"name": m, "arguments": {}} for m in moves]})
    return out


# ---------------------------------------------------------------------------------------------- filtering
_ROW_COL = re.compile(r"row\s*(\d+)\s*[,;]?\s*(?:and\s+)?(?:col(?:umn)?|col\.)\s*(\d+)", re.I)
_PAIR = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_GOAL = re.compile(r"\bgoal\b|\bG\b")


def named_target(query: str, desc: list[str]) -> tuple[int, int] | None:
    """The cell a request names (0-based): "row 2, column 3" or "(2, 3)" (counted from 1), or the goal G;
    None when it names none, or a cell off the map."""
    m = _ROW_COL.search(query) or _PAIR.search(query)
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


def verifies(world: FrozenLakeEnv, task) -> bool:
    """The env, playing ``task``, counts its own reference solved."""
    world.play(task)
    for move in task.solution:
        result = world.step(move)
        if result.done:
            return bool(result.info.get("success"))
    return False


def check(world, fresh, candidates: list[tuple[int, dict]], *, duplicate: float, seed_offset: int,
          name: str = "frozenlake") -> tuple[list, Counter]:
    """The filters over ``(map seed, writer task)`` candidates, in order; the kept tasks and the counts.
    ``world`` replays references; ``fresh()`` gives a new env to verify a task in."""
    counts = Counter({f: 0 for f in FILTERS})
    kept, targets = [], set()
    for seed, t in candidates:
        moves = [c["name"] for c in t["action_sequence"]]
        target = named_target(t["query"], lake(world, seed))
        if (seed, target) in targets or jaccard(t["query"], EXAMPLE_QUERY) >= duplicate:
            counts["duplicate"] += 1
        elif not moves:
            counts["empty_reference"] += 1
        elif seed >= seed_offset:
            counts["held_out"] += 1
        elif not (run := execute(world, seed, moves, target)).ok:
            counts["execution"] += 1
        else:
            task = target_task(f"{name}-synth-{len(kept):04d}", seed, run.goal["map"], run.goal["target"],
                               [parse_moves(m, MOVES, 1)[0] for m in moves], t["query"])
            if verifies(fresh(), task):
                kept.append(task)
                targets.add((seed, target))
            else:
                counts["unverifiable"] += 1
    return kept, counts


# ---------------------------------------------------------------------------------------------- the run
def run_game_questioning(cfg, env_cls, console=None) -> dict:
    """``selfevolve explore`` for a game: as :func:`selfevolve.questioning.pipeline.run_questioning`, with the
    pieces above. Same files in ``questioning.out``; the report has the same keys plus ``cells_reached`` and
    ``falls``."""
    from selfevolve.envs import make_env
    from selfevolve.errors import SelfEvolveError
    from selfevolve.models.llm import LLM
    from selfevolve.questioning.explore import explore
    from selfevolve.questioning.pipeline import diversity, fresh_out, save_explorations
    from selfevolve.questioning.synthesize import parse_tasks
    from selfevolve.train.build import build_policy, build_prompt, load_init_adapter
    from selfevolve.worlds.base import save_tasks

    q, profile = cfg.questioning, env_cls.profile
    options = {**cfg.env.options(), "split": "train", "tasks_file": ""}  # explorations: the ordinary game
    if options.get("slippery"):
        raise SelfEvolveError("selfevolve explore on FrozenLake needs env.slippery=false: a reference walk must "
                              "replay the same way")
    out = fresh_out(q.out)
    policy = build_policy(cfg)
    load_init_adapter(cfg, policy)  # model.init_from: explore with a trained adapter
    world = make_env(env_cls, **options)
    builder = dataclasses.replace(build_prompt(cfg, policy, world), history=q.window)
    say = console.print if console is not None else (lambda *a, **k: None)
    say(f"exploring {env_cls.name}: {q.explorations} explorations x {q.steps} turns")
    records = explore(policy, builder, lambda: make_env(env_cls, **options), explorations=q.explorations,
                      steps=q.steps, breadth_steps=q.breadth_steps, seed=cfg.seed, exploration=GameExploration)
    save_explorations(out, records)

    # ---- writing -----------------------------------------------------------------------------------------
    useful = [r for r in records if r.good_turns]
    counts_unparseable = 0
    candidates: list[tuple[int, dict]] = []
    say(f"writing tasks from {len(useful)} explorations with a valid move (writer: {q.writer})")
    if q.writer == "template":
        candidates = [(r.seed, t) for r in useful for t in template_tasks(r, lake(world, r.seed))]
    else:
        llm = LLM(q.llm, policy, log_dir=out, max_new_tokens=q.max_new_tokens, dtype=cfg.model.dtype,
                  seed=cfg.seed, api=cfg.llm_api)
        boards = make_env(env_cls, **{**options, "hints": False})
        for start in range(0, len(useful), llm.batch_size):
            batch = useful[start:start + llm.batch_size]
            earlier = [t["query"] for _, t in candidates]
            replies = llm.chat([writer_messages(profile, boards.reset(r.seed), r.text(), earlier,
                                                q.tasks_per_exploration, world.max_turns * world.moves_per_turn)
                                for r in batch], purpose="write_tasks")
            for r, reply in zip(batch, replies):
                found = parse_tasks(reply, bare_steps=True)
                if found is None:
                    counts_unparseable += 1
                    continue
                candidates += [(r.seed, t) for t in found[:q.tasks_per_exploration]]

    # ---- filtering, report --------------------------------------------------------------------------------
    kept, counts = check(world, lambda: make_env(env_cls, **options), candidates, duplicate=q.duplicate,
                         seed_offset=cfg.eval.seed_offset, name=env_cls.name)
    counts["unparseable"] = counts_unparseable
    save_tasks(kept, str(out / "tasks.jsonl"))
    ops_used = {m for k in kept for m in k.solution}
    report = {
        "env": env_cls.name, "writer": q.writer, "explorations": len(records),
        "explorations_with_a_working_call": len(useful),
        "calls": sum(len(r.turns) for r in records), "working_calls": sum(len(r.good_turns) for r in records),
        "writer_calls": 0 if q.writer == "template" else len(useful),
        "candidates": len(candidates), "removed": {f: counts[f] for f in FILTERS}, "kept": len(kept),
        "intent_coverage": sorted({k.intent for k in kept} & set(profile.intents)),
        "intents": dict(Counter(k.intent for k in kept)),
        "operation_coverage": f"{len(ops_used)}/{len(MOVES)}", "operations_used": sorted(ops_used),
        "diversity": round(diversity([k.instruction for k in kept]), 3),
        "cells_reached": sum(len(reached(r)) for r in records),
        "falls": sum(any(t.get("cell") == "H" for t in r.turns) for r in records),
        "tasks_file": str(out / "tasks.jsonl"),
    }
    Path(out / "report.json").write_text(json.dumps(report, indent=2))
    say(f"kept {len(kept)} of {len(candidates)} candidate tasks; removed: "
        + ", ".join(f"{k} {v}" for k, v in report["removed"].items()))
    return report
