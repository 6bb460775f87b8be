"""A round's new tasks: explore with the current policy, turn what the explorations reached into tasks, keep the
ones whose reference replays.

- **explore** (:func:`explore_round`): today's explorer (``questioning/explore.py``: batched, breadth then depth)
  on training instances only — the environment's ``split=train`` sandboxes, which never start a held-out map,
  room or request — with the policy being trained. In a game (``evolve.explore_constrained``) each answer is
  masked to one of the moves its hint names (constrained decoding, ``models/constrained.py``): in breadth a
  move not tried from this cell, in depth a move onto a cell not visited yet; a move onto a cell the board
  shows as a hole is left out while another remains (``GridExploration.allowed_moves``). The policy chooses
  among them; the hint becomes binding. The untrained 135M model answers the exploration prompt with pieces of
  the board 121 times in 124; masked to the four moves it said Down on nearly every turn (14 cells reached by 16
  explorations, all in the first two columns); masked to the hint's moves, 13 of 16 explorations fell into a
  hole within 4 answers (33 cells, none of them G). ``evolve.explorer=random`` (games) draws each move uniformly
  among the same allowed ones instead, with no model: a diagnostic of what a much larger pool does.
- **hindsight tasks** (:func:`write_tasks`): every state an exploration reached (a game: a cell stood on, a box
  pushed somewhere, a room solved), or value a call returned (a tool world: a look-up's field, a change's
  result), becomes a candidate; its reference is the loop-erased path that reached it (``grid.erased_walks``).
  With ``evolve.references=shortest`` a game's reference is instead the shortest move sequence to the same
  state that a breadth-first search over replays finds (``grid.shortest_walks``), when shorter.
  The template writer phrases it (``evolve.writer=template``, the default); ``llm`` asks the LLM writer
  (``questioning.llm``, with ``questioning.constrained``), ``both`` asks both. Each task records its writer.
- **verification and filters**: today's filters in order (duplicate, empty reference, held out, execution:
  the reference replayed in a fresh environment must reach the named state; tool worlds: grounded), then the
  environment, playing the kept task, must count its own reference solved (``unverifiable`` otherwise). A
  task already in the pool (the same goal and request) is a duplicate too.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections import Counter
from typing import Any

from selfevolve.envs import make_env
from selfevolve.errors import ConfigError
from selfevolve.models.constrained import Constrained, one_of
from selfevolve.questioning.explore import Exploration, ExplorationRecord, explore
from selfevolve.questioning.filters import FILTERS, TOOL_FILTERS


def game_of(env_cls):
    from selfevolve.questioning.pipeline import game_of as find

    return find(env_cls)


def train_options(cfg, env_cls) -> dict:
    """The environment of exploration and verification: the ordinary game or world on training instances
    (``split=train``; a ``tasks_file`` of the configuration is ignored: it would be someone else's tasks)."""
    from selfevolve.envs import env_options

    options = {**cfg.env.options(), "split": "train"}
    if "tasks_file" in env_options(env_cls):
        options["tasks_file"] = ""
    return options


def explore_round(cfg, env_cls, policy, builder, first_seed: int, seed: int) -> list[ExplorationRecord]:
    """``questioning.explorations`` explorations of ``questioning.steps`` turns on training sandboxes
    ``first_seed``, ``first_seed + 1``, ...; sampling seeded by ``seed``. With ``evolve.explorer=random``
    (games only) no model is asked: ``policy`` and ``builder`` may be None."""
    q, ev = cfg.questioning, cfg.evolve
    options = train_options(cfg, env_cls)
    exploration = game_of(env_cls)
    check_explorer(cfg, exploration)
    factory = lambda: make_env(env_cls, **options)  # noqa: E731
    if ev.explorer == "random":  # no model asked (policy and builder unused)
        return explore_randomly(exploration, factory, explorations=q.explorations, steps=q.steps,
                                breadth_steps=q.breadth_steps, first_seed=first_seed, seed=seed,
                                masked=ev.explore_constrained)
    builder = dataclasses.replace(builder, history=q.window)
    if exploration is None:  # a tool world: the explorer's reply prefill is its output-format aid
        profile = env_cls.profile
        entities = ", ".join(e.name.replace("_", " ") + "s" for e in profile.entities)
        return explore(policy, builder, factory, explorations=q.explorations, steps=q.steps,
                       breadth_steps=q.breadth_steps, entities=entities, seed=seed, first_seed=first_seed,
                       exploration=functools.partial(Exploration, prefill=q.prefill))
    made: list = []  # the explorations, in the rollout's order

    def make(world, breadth_steps, max_turns, entities=""):
        made.append(exploration(world, breadth_steps, max_turns, entities))
        return made[-1]

    run = functools.partial(explore, policy, builder, factory, explorations=q.explorations, steps=q.steps,
                            breadth_steps=q.breadth_steps, seed=seed, first_seed=first_seed, exploration=make)
    if not ev.explore_constrained:
        return run()

    def masked(n: int) -> Constrained:
        # the rollout asks the explorations still going, in order: each answers with one of its hint's moves
        active = [e for e in made if not e.over]
        if len(active) != n:
            raise RuntimeError(f"{n} replies asked of {len(active)} explorations still going")
        return Constrained(policy.tokenizer, [one_of(e.allowed_moves())() for e in active])

    with policy.constrained(masked):
        return run()


def check_explorer(cfg, exploration) -> None:
    """``evolve.explorer=random`` needs a game (``exploration``, from :func:`game_of`): a tool world's calls have
    arguments to write, which a uniform draw over moves cannot."""
    if exploration is None and cfg.evolve.explorer != "policy":
        raise ConfigError(f"evolve.explorer={cfg.evolve.explorer}: only games (frozenlake, sokoban) explore without "
                          f"the policy; {cfg.env.name!r} is a tool world (evolve.explorer=policy)")


def explore_randomly(exploration, factory, *, explorations: int, steps: int, breadth_steps: int, first_seed: int,
                     seed: int, masked: bool = True) -> list[ExplorationRecord]:
    """``evolve.explorer=random``: the same explorations as :func:`explore_round`'s (training sandboxes
    ``first_seed``, ``first_seed + 1``, ..., ``steps`` turns, the same hint), each move drawn uniformly among
    those the masked explorer may answer (``allowed_moves``; every move of the game with ``masked=False``) and
    no model asked. A diagnostic: it costs next to nothing, so it shows what a much larger pool would do."""
    rng = random.Random(f"evolve-random-explorer-{seed}")
    records = []
    for i in range(explorations):
        env = exploration(factory(), breadth_steps, steps, "")
        env.reset(first_seed + i)
        for _ in range(steps):
            moves = env.allowed_moves() if masked else list(env.world.moves)
            if env.step(rng.choice(moves)).done:
                break
        records.append(ExplorationRecord(seed=first_seed + i, turns=env.log))
    return records


def exploration_stats(records: list[ExplorationRecord], env_cls, cfg) -> dict[str, Any]:
    """What the explorations did: answers, valid ones, explorations with one, and the game's own counts."""
    out = {"explorations": len(records), "answers": sum(len(r.turns) for r in records),
           "valid_answers": sum(len(r.good_turns) for r in records),
           "explorations_with_a_valid_answer": sum(bool(r.good_turns) for r in records),
           "sandbox_seeds": [r.seed for r in records]}
    exploration = game_of(env_cls)
    if exploration is not None:
        out.update(exploration.game.report(records, make_env(env_cls, **train_options(cfg, env_cls))))
    return out


def write_tasks(cfg, env_cls, records: list[ExplorationRecord], policy, pool_keys: set[str], pool_requests: list[str],
                log_dir, key) -> tuple[list[tuple[Any, str, int]], dict[str, Any]]:
    """The round's kept tasks as ``(world task, writer, sandbox seed)`` and the writing report: candidates per
    writer, what each filter removed, what was kept. ``pool_keys``: the pool's task keys (``key(task)``); a
    kept task with one of them is a duplicate; ``pool_requests``: the pool's requests (a tool world's
    lexical duplicate check)."""
    q, ev = cfg.questioning, cfg.evolve
    options = train_options(cfg, env_cls)
    world = make_env(env_cls, **options)
    useful = [r for r in records if r.good_turns]
    exploration = game_of(env_cls)
    writers = ["template", "llm"] if ev.writer == "both" else [ev.writer]
    candidates: list[tuple[int, dict]] = []
    origin: dict[tuple[int, str], str] = {}
    unparseable = 0
    per_writer: dict[str, int] = {}
    for writer in writers:
        if writer == "template":
            found = [(r.seed, t) for r in useful for t in
                     (exploration.game.template(r, world, relabel=ev.hindsight == "goal",
                                                  shortest=ev.references == "shortest") if exploration is not None
                      else _tool_template(r, env_cls))]
        else:
            found, bad = _llm_write(cfg, env_cls, exploration, options, world, useful, policy, log_dir)
            unparseable += bad
        per_writer[writer] = len(found)
        for seed, t in found:
            origin.setdefault((seed, t["query"]), writer)
        candidates += found
    if exploration is not None:
        from selfevolve.questioning.grid_tasks import check

        kept, counts = check(exploration.game, world, lambda: make_env(env_cls, **options), candidates,
                             duplicate=q.duplicate, seed_offset=cfg.eval.seed_offset, name=env_cls.name)
        names = FILTERS
    else:
        from selfevolve.questioning.pipeline import check_tool_tasks

        kept, counts = check_tool_tasks(env_cls, options, world, candidates, q.duplicate, earlier=pool_requests)
        names = TOOL_FILTERS
    counts["unparseable"] = unparseable
    out = []
    seen = set(pool_keys)
    seeds = {(t["query"]): s for s, t in candidates}
    for task in kept:
        k = key(task)
        if k in seen:
            counts["duplicate"] += 1
            continue
        seen.add(k)
        seed = int(task.goal.get("seed", seeds.get(task.instruction, -1))) if isinstance(task.goal, dict) else -1
        out.append((task, origin.get((seed, task.instruction), writers[0]), seed))
    report = {"writers": writers, "candidates": len(candidates), "candidates_per_writer": per_writer,
              "removed": {f: int(counts[f]) for f in names}, "kept": len(out),
              "kept_per_writer": dict(Counter(w for _, w, _ in out)),
              "intents": dict(Counter(t.intent for t, _, _ in out))}
    return out, report


def _tool_template(record, env_cls) -> list[dict]:
    from selfevolve.questioning.synthesize import template_tasks

    return template_tasks(record, env_cls.profile, writes=True)


def _llm_write(cfg, env_cls, exploration, options, world, useful, policy, log_dir) -> tuple[list, int]:
    """The LLM writer's candidates (``questioning.llm``; constrained with ``questioning.constrained``)."""
    from selfevolve.models.llm import LLM

    q = cfg.questioning
    llm = LLM(q.llm, policy, log_dir=log_dir, max_new_tokens=q.max_new_tokens, dtype=cfg.model.dtype, seed=cfg.seed,
              api=cfg.llm_api)
    if exploration is not None:
        from selfevolve.questioning.grid_tasks import llm_candidates

        return llm_candidates(llm, exploration.game, env_cls, options, world, useful, q.tasks_per_exploration,
                              q.constrained)
    from selfevolve.questioning.pipeline import llm_tool_candidates

    return llm_tool_candidates(llm, env_cls, useful, q)
