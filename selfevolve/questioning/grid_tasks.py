"""Self-questioning in a grid game, from the explorations on (``grid.py`` explores): the writers, the filters
and the run of ``selfevolve explore``.

- **the writers**: the LLM sees the game's board, moves and rules, the tasks already written and the
  exploration, and answers ``[{"query", "confidence", "action_sequence": ["move", ...]}]``; its one worked
  example is from a made-up warehouse game (other move names, so a copied example cannot execute).
  ``questioning.writer=template``: the game phrases states the exploration reached as requests, each with the
  exploration's own moves up to its first arrival there, loops erased (:func:`grid.erased_walks`).
- **the filters** (:func:`check`), in the tool worlds' order and counted under the same names: ``duplicate`` is
  a second task for the same seed and the same named goal, or a copy of the worked example; ``held_out`` a seed
  at or above ``eval.seed_offset``; ``execution`` a reference that, replayed move by move on a fresh game of the
  same seed, breaks the game's rules (the game's ``execute``); the verifier is the execution's end state, the
  exact goal state. ``unverifiable``: the env, playing the task, does not count the reference solved.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

from selfevolve.envs.games.moves import parse_moves
from selfevolve.lexical import jaccard
from selfevolve.questioning.filters import FILTERS
from selfevolve.questioning.grid import GridExploration, GridGame, board_shape


# ---------------------------------------------------------------------------------------------- writing
WRITER_EXAMPLE = (
    {"role": "user", "content": "Game: a robot in a warehouse grid; crates (#) block it.\nMoves: North, South, "
     "East, West\nWrite 1 task.\n\nMap:\nR . #\n. . .\n# . .\n\nExploration (start: row 1, column 1):\n"
     "1. East\n   Result: row 1, column 2: floor\n2. South\n   Result: row 2, column 2: floor\n"},
    {"role": "assistant", "content": '[{"query": "Drive the robot to row 2, column 2.", "confidence": 0.9, '
     '"action_sequence": ["East", "South"]}]'},
)
EXAMPLE_QUERY = json.loads(WRITER_EXAMPLE[1]["content"])[0]["query"]


def writer_messages(game: GridGame, profile, board: str, exploration_text: str, earlier: list[str], n: int,
                    max_moves: int, start: str) -> list[dict]:
    """The writer's prompt for one exploration: the game, its board, earlier tasks, what was found."""
    parts = [f"Game: {profile.background}", "Moves: " + ", ".join(o.name for o in profile.operations),
             "Rules: " + " ".join(profile.rules),
             game.ask.format(n=n, s="s" if n > 1 else "", max_moves=max_moves), f"{game.legend}\n{board}"]
    if earlier:
        parts.append("Tasks already written (write different ones):\n" + "\n".join(f"- {q}" for q in earlier[-10:]))
    parts.append(f"Exploration ({start}):\n{exploration_text}")
    return [{"role": "system", "content": game.writer_system}, *WRITER_EXAMPLE,
            {"role": "user", "content": "\n\n".join(parts)}]


def llm_candidates(llm, game: GridGame, env_cls, options: dict, world, records: list, n: int,
                   constrained: bool = False) -> tuple[list[tuple[int, dict]], int]:
    """The LLM writer's ``(sandbox seed, task)`` candidates from ``records`` (explorations with a valid move),
    ``n`` asked per exploration, and how many replies held no task list. ``constrained``: a local writer's
    replies are decoded under the task schema (``questioning/schema.py``)."""
    from selfevolve.envs import make_env
    from selfevolve.questioning.schema import game_tasks
    from selfevolve.questioning.synthesize import parse_tasks

    boards = make_env(env_cls, **game.board_options(options))
    max_moves = world.max_turns * world.moves_per_turn
    candidates: list[tuple[int, dict]] = []
    unparseable = 0
    for start in range(0, len(records), llm.batch_size):
        batch = records[start:start + llm.batch_size]
        earlier = [t["query"] for _, t in candidates]
        convs, grammars = [], []
        for r in batch:
            board = boards.reset(r.seed)
            convs.append(writer_messages(game, env_cls.profile, board, r.text(), earlier, n, max_moves,
                                         game.start_text(world, r.seed)))
            world.reset(r.seed)
            height, width = board_shape(world)
            grammars.append(game_tasks(world.moves, height, width, n, max_moves))
        use = grammars if constrained and llm.constrains else None
        replies = llm.chat(convs, purpose="write_tasks", grammars=use)
        for r, reply in zip(batch, replies):
            found = parse_tasks(reply, bare_steps=True)
            if found is None:
                unparseable += 1
                continue
            candidates += [(r.seed, t) for t in found[:n]]
    return candidates, unparseable



# ---------------------------------------------------------------------------------------------- filtering
def verifies(world, task) -> bool:
    """The env, playing ``task``, counts its own reference solved."""
    world.play(task)
    for move in task.solution:
        result = world.step(move)
        if result.done:
            return bool(result.info.get("success"))
    return False


def check(game: GridGame, world, fresh, candidates: list[tuple[int, dict]], *, duplicate: float, seed_offset: int,
          name: str) -> tuple[list, Counter]:
    """The filters over ``(seed, writer task)`` candidates, in order; the kept tasks and the counts.
    ``world`` replays references; ``fresh()`` gives a new env to verify a task in."""
    counts = Counter({f: 0 for f in FILTERS})
    kept, aims = [], set()
    for seed, t in candidates:
        moves = [c["name"] for c in t["action_sequence"]]
        # a hindsight-relabelled candidate carries the state it relabels as its goal (``"aim"``)
        aim = game.aim(t["aim"]) if t.get("aim") is not None else game.named_goal(t["query"], world, seed)
        if (seed, aim) in aims or jaccard(t["query"], EXAMPLE_QUERY) >= duplicate:
            counts["duplicate"] += 1
        elif not moves:
            counts["empty_reference"] += 1
        elif seed >= seed_offset:
            counts["held_out"] += 1
        elif not (run := game.execute(world, seed, moves, aim)).ok:
            counts["execution"] += 1
        else:
            canonical = [parse_moves(m, world.moves, 1)[0] for m in moves]
            task = game.make_task(f"{name}-synth-{len(kept):04d}", seed, run.goal, canonical, t["query"])
            if verifies(fresh(), task):
                kept.append(task)
                aims.add((seed, aim))
            else:
                counts["unverifiable"] += 1
    return kept, counts


# ---------------------------------------------------------------------------------------------- the run
def run_grid_questioning(cfg, env_cls, exploration: type[GridExploration], console=None) -> dict:
    """``selfevolve explore`` for a game: as :func:`selfevolve.questioning.pipeline.run_questioning`, with the
    game's pieces (``exploration.game``). Same files in ``questioning.out``; the report has the same keys plus
    the game's own."""
    from selfevolve.build import build_policy, build_prompt
    from selfevolve.envs import make_env
    from selfevolve.models.llm import LLM
    from selfevolve.questioning.explore import explorations, explore
    from selfevolve.questioning.filters import diversity
    from selfevolve.train.checkpoint import load_init_adapter
    from selfevolve.envs.task_files import save_tasks

    q, profile, game = cfg.questioning, env_cls.profile, exploration.game
    options = {**cfg.env.options(), "split": "train", "tasks_file": ""}  # explorations: the ordinary game
    game.check_options(options)
    world = make_env(env_cls, **options)  # bad options fail here, before anything is written
    out = Path(q.out)
    policy = build_policy(cfg)
    load_init_adapter(cfg, policy)  # model.init_from: explore with a trained adapter
    builder = dataclasses.replace(build_prompt(cfg, policy, world), history=q.window)
    say = console.print if console is not None else (lambda *a, **k: None)

    def run():
        say(f"exploring {env_cls.name}: {q.explorations} explorations x {q.steps} turns")
        return explore(policy, builder, lambda: make_env(env_cls, **options), explorations=q.explorations,
                       steps=q.steps, breadth_steps=q.breadth_steps, seed=cfg.seed, exploration=exploration)

    records = explorations(cfg, out, say, run)

    # ---- writing -----------------------------------------------------------------------------------------
    useful = [r for r in records if r.good_turns]
    counts_unparseable = 0
    candidates: list[tuple[int, dict]] = []
    say(f"writing tasks from {len(useful)} explorations with a valid move (writer: {q.writer})")
    if q.writer == "template":
        candidates = [(r.seed, t) for r in useful for t in game.template(r, world)]
    else:
        llm = LLM(q.llm, policy, log_dir=out, max_new_tokens=q.max_new_tokens, dtype=cfg.model.dtype,
                  seed=cfg.seed, api=cfg.llm_api)
        candidates, counts_unparseable = llm_candidates(llm, game, env_cls, options, world, useful,
                                                        q.tasks_per_exploration, q.constrained)

    # ---- filtering, report --------------------------------------------------------------------------------
    kept, counts = check(game, world, lambda: make_env(env_cls, **options), candidates, duplicate=q.duplicate,
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
        "operation_coverage": f"{len(ops_used)}/{len(world.moves)}", "operations_used": sorted(ops_used),
        "diversity": round(diversity([k.instruction for k in kept]), 3),
        **game.report(records, world),
        "tasks_file": str(out / "tasks.jsonl"),
    }
    Path(out / "report.json").write_text(json.dumps(report, indent=2))
    say(f"kept {len(kept)} of {len(candidates)} candidate tasks; removed: "
        + ", ".join(f"{k} {v}" for k, v in report["removed"].items()))
    return report
