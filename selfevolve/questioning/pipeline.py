"""``selfevolve explore``: explore a world, write tasks from what was found, keep those that pass the filters.

Writes to ``questioning.out``: ``explorations.jsonl`` (every exploration, every call and result),
``llm_calls.jsonl`` (every writer and intent call), ``tasks.jsonl`` (the kept tasks as the world's tasks, split
``synth``, with reference solution and derived goal) and ``report.json`` (how many each filter removed, intent
and operation coverage, diversity). Train on the tasks with ``env.tasks_file=OUT/tasks.jsonl env.split=synth``,
or mixed with the world's own training tasks with ``env.split=train+synth``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import Counter
from pathlib import Path

from selfevolve.envs import make_env
from selfevolve.envs.task_files import save_tasks
from selfevolve.errors import SelfEvolveError
from selfevolve.experience.intent import classify
from selfevolve.models.llm import LLM
from selfevolve.questioning.explore import Exploration, explorations, explore
from selfevolve.questioning.filters import (TOOL_FILTERS, diversity, execute, grounded, is_duplicate, mentions,
                                           verifies)
from selfevolve.questioning.synthesize import (EXAMPLE_QUERY, WRITER_OPENING, parse_tasks, template_tasks,
                                              writer_messages)
from selfevolve.types import Task


def world_of(cfg):
    """The configured environment class, which must be a tool world or a game with a profile."""
    from selfevolve.build import resolve_env

    env_cls = resolve_env(cfg, None)
    if getattr(env_cls, "profile", None) is None:
        raise SelfEvolveError(f"selfevolve explore needs a world with a profile (env.name=shop, tables, "
                              f"frozenlake or sokoban); {cfg.env.name!r} has none")
    return env_cls


def game_of(env_cls):
    """The exploration class of a grid game (``grid.py``: FrozenLake, Sokoban), None for a tool world."""
    from selfevolve.envs import FrozenLakeEnv, SokobanEnv
    from selfevolve.questioning.games import GameExploration
    from selfevolve.questioning.sokoban import SokobanExploration

    games = ((FrozenLakeEnv, GameExploration), (SokobanEnv, SokobanExploration))
    return next((x for cls, x in games if isinstance(env_cls, type) and issubclass(env_cls, cls)), None)


def llm_tool_candidates(llm, env_cls, records: list, q) -> tuple[list[tuple[int, dict]], int]:
    """The LLM writer's ``(sandbox seed, task)`` candidates from tool-world explorations (``q``: the
    questioning settings) and how many replies held no task list. With ``q.constrained``, a local writer's
    replies are decoded under the task schema (``questioning/schema.py``)."""
    from selfevolve.questioning.schema import tool_tasks

    candidates: list[tuple[int, dict]] = []
    unparseable = 0
    grammar = tool_tasks(env_cls.toolset, q.tasks_per_exploration, max(2, q.num_ops + 1))
    constrained = q.constrained and llm.constrains
    for start in range(0, len(records), llm.batch_size):
        batch = records[start:start + llm.batch_size]
        earlier = [t["query"] for _, t in candidates]
        replies = llm.chat([writer_messages(env_cls.profile, r.text(), earlier, q.tasks_per_exploration, q.num_ops)
                            for r in batch], purpose="write_tasks",
                           prefix=WRITER_OPENING if q.writer_prefill and not constrained else "",
                           grammars=[grammar] * len(batch) if constrained else None)
        for r, reply in zip(batch, replies):
            found = parse_tasks(reply)
            if found is None:
                unparseable += 1
                continue
            candidates += [(r.seed, t) for t in found[:q.tasks_per_exploration]]
    return candidates, unparseable


def check_tool_tasks(env_cls, options: dict, world, candidates: list[tuple[int, dict]], duplicate: float,
                     earlier: list[str] = ()) -> tuple[list[Task], Counter]:
    """The filters over a tool world's ``(sandbox seed, writer task)`` candidates, in order (``filters.py``):
    the kept tasks (ids ``{world}-synth-NNNN``, intent ``unknown``) and how many each filter removed.
    ``earlier``: requests kept before (another round's), which a new one must not duplicate."""
    counts = Counter({f: 0 for f in TOOL_FILTERS})
    held_out = [t.instruction for t in make_env(env_cls, **{**options, "split": "test"}).tasks]
    marks = world.held_out_marks()
    kept: list[Task] = []
    for seed, t in candidates:
        calls = t["action_sequence"]
        if is_duplicate(t["query"], [k.instruction for k in kept] + list(earlier) + held_out + [EXAMPLE_QUERY],
                        duplicate):
            counts["duplicate"] += 1
        elif not calls:
            counts["empty_reference"] += 1
        elif mentions(marks, t["query"] + json.dumps(calls, ensure_ascii=False)):
            counts["held_out"] += 1
        elif not (run := execute(world, seed, calls)).ok:
            counts["execution"] += 1
        elif not (writes := any(env_cls.toolset[c["name"]].writes for c in calls)) \
                and not grounded(calls[-1]["arguments"].get("answer", ""), run.results):
            counts["ungrounded"] += 1  # a look-up whose answer none of its calls returned
        else:
            task = Task(id=f"{env_cls.name}-synth-{len(kept):04d}", split="synth",
                        level=env_cls.levels[min(int(writes), len(env_cls.levels) - 1)], intent="unknown",
                        instruction=t["query"], goal=run.goal, solution=calls)
            if verifies(make_env(env_cls, **options), task):
                kept.append(task)
            else:
                counts["unverifiable"] += 1
    return kept, counts


def run_questioning(cfg, console=None) -> dict:
    from selfevolve.build import build_policy, build_prompt
    from selfevolve.train.checkpoint import load_init_adapter

    q = cfg.questioning
    env_cls = world_of(cfg)
    exploration = game_of(env_cls)
    if exploration is not None:  # a game: FrozenLake (games.py), Sokoban (sokoban.py), the rest in grid*.py
        from selfevolve.questioning.grid_tasks import run_grid_questioning

        return run_grid_questioning(cfg, env_cls, exploration, console)
    profile = env_cls.profile
    options = {**cfg.env.options(), "split": "train"}  # sandboxes are training seeds
    out = Path(q.out)

    policy = build_policy(cfg)
    load_init_adapter(cfg, policy)  # model.init_from: explore with a trained adapter
    world = make_env(env_cls, **options)
    builder = dataclasses.replace(build_prompt(cfg, policy, world), history=q.window)
    say = console.print if console is not None else (lambda *a, **k: None)
    entities = ", ".join(e.name.replace("_", " ") + "s" for e in profile.entities)

    def run():
        say(f"exploring {env_cls.name}: {q.explorations} explorations x {q.steps} calls")
        return explore(policy, builder, lambda: make_env(env_cls, **options), explorations=q.explorations,
                       steps=q.steps, breadth_steps=q.breadth_steps, entities=entities, seed=cfg.seed,
                       exploration=functools.partial(Exploration, prefill=q.prefill))

    records = explorations(cfg, out, say, run)

    # ---- writing -----------------------------------------------------------------------------------------
    llm = LLM(q.llm, policy, log_dir=out, max_new_tokens=q.max_new_tokens, dtype=cfg.model.dtype, seed=cfg.seed,
              api=cfg.llm_api)
    useful = [r for r in records if r.good_turns]
    counts = Counter({f: 0 for f in TOOL_FILTERS})
    candidates: list[tuple[int, dict]] = []  # (sandbox seed, task)
    say(f"writing tasks from {len(useful)} explorations with a working call (writer: {q.writer})")
    if q.writer == "template":
        candidates = [(r.seed, t) for r in useful for t in template_tasks(r, profile)]
    else:
        candidates, counts["unparseable"] = llm_tool_candidates(llm, env_cls, useful, q)

    # ---- filtering -----------------------------------------------------------------------------------------
    kept, found = check_tool_tasks(env_cls, options, world, candidates, q.duplicate)
    counts.update({k: v for k, v in found.items() if k != "unparseable"})

    # ---- intents, report ---------------------------------------------------------------------------------
    if kept and env_cls.intents:
        found, _ = classify(llm, [k.instruction for k in kept], list(env_cls.intents))
        kept = [dataclasses.replace(k, intent=i or "unknown") for k, i in zip(kept, found)]
    save_tasks(kept, str(out / "tasks.jsonl"))
    ops_used = {c["name"] for k in kept for c in k.solution} - {"finish"}
    all_ops = {o.name for o in profile.operations} - {"finish"}
    report = {
        "env": env_cls.name, "writer": q.writer, "explorations": len(records),
        "explorations_with_a_working_call": len(useful),
        "calls": sum(len(r.turns) for r in records), "working_calls": sum(len(r.good_turns) for r in records),
        "writer_calls": 0 if q.writer == "template" else len(useful),
        "candidates": len(candidates), "removed": dict(counts), "kept": len(kept),
        "intent_coverage": sorted({k.intent for k in kept} & set(env_cls.intents)),
        "intents": dict(Counter(k.intent for k in kept)),
        "operation_coverage": f"{len(ops_used & all_ops)}/{len(all_ops)}", "operations_used": sorted(ops_used),
        "diversity": round(diversity([k.instruction for k in kept]), 3),
        "tasks_file": str(out / "tasks.jsonl"),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    say(f"kept {len(kept)} of {len(candidates)} candidate tasks; removed: "
        + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return report
