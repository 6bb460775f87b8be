"""Which round's policy the run keeps: a validation set of the agent's own tasks, scored after every round.

The held-out test split is for evaluation only, so it cannot choose between rounds. Yet a round can end below
the one before it (FrozenLake, seed 5: 22/64 held out after round 1, 8/64 after round 2; docs/evolve.md), and
then the last round is not the policy worth keeping. ``evolve.keep=best`` keeps the round whose policy solves
most of a validation set written the way the pool is, from training instances no round explores:

- **written** once, before round 0 (:func:`build`): ``evolve.validation_explorations`` explorations of random
  moves (``hindsight.explore_randomly``, no model, so no round's policy shapes it) on training sandboxes from
  :data:`FIRST_SANDBOX` on, far beyond the sandboxes the rounds explore (round ``r`` starts at
  ``r × questioning.explorations``); their hindsight tasks go through the same writer, replay check and filters
  as the pool's, and those whose reference takes at least ``evolve.validation_min_moves`` moves are kept (the
  held-out maps take about six: the short tasks reward one repeated move);
- **scored** after each round's training (:func:`score`): greedy success on every validation task;
- **kept** (:func:`best_round`): the highest score, the latest round on a tie. The rounds still train on from the
  latest policy: a round scored lower is not undone, only not kept.

On FrozenLake's seeds 3–6 the score picked each run's best held-out round (docs/evolve.md, 'Keeping the best
round'). Tool worlds have no random explorer (their calls take arguments), so there the run keeps its last round
and says so.
"""

from __future__ import annotations

import time
from pathlib import Path

from selfevolve.envs import make_env
from selfevolve.envs.task_files import save_tasks
from selfevolve.errors import ConfigError
from selfevolve.evolve import hindsight

FIRST_SANDBOX = 100_000  # the validation explorations' first training sandbox; the rounds explore 0, 1, ...
FOLDER = "validation"
NO_GAME = "tool worlds have no random explorer (games only), so the run keeps its last round"


def check(cfg) -> None:
    """The rounds' exploration sandboxes must stay below the validation's."""
    used = cfg.evolve.rounds * cfg.questioning.explorations
    if cfg.evolve.keep == "best" and used > FIRST_SANDBOX:
        raise ConfigError(f"evolve.rounds x questioning.explorations = {used} exploration sandboxes reach the "
                          f"validation's, which start at {FIRST_SANDBOX}; lower them or set evolve.keep=last")


def build(cfg, env_cls, out: Path) -> dict:
    """Write the validation tasks to ``out/validation/tasks.jsonl``; return what was written (``tasks``: how
    many; ``skipped``: why none, in a tool world)."""
    exploration = hindsight.game_of(env_cls)
    if exploration is None:
        return {"skipped": NO_GAME}
    t0 = time.perf_counter()
    ev, q = cfg.evolve, cfg.questioning
    options = hindsight.train_options(cfg, env_cls)
    records = hindsight.explore_randomly(exploration, lambda: make_env(env_cls, **options),
                                         explorations=ev.validation_explorations, steps=q.steps,
                                         breadth_steps=q.breadth_steps, first_seed=FIRST_SANDBOX, seed=cfg.seed,
                                         masked=ev.explore_constrained)
    folder = out / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    from selfevolve.evolve.pool import TaskPool

    kept, written = hindsight.write_tasks(cfg, env_cls, records, None, set(), [], folder, TaskPool.key)
    tasks = [t for t, _, _ in kept if len(t.solution or []) >= ev.validation_min_moves]
    save_tasks(tasks, str(folder / "tasks.jsonl"))
    return {"tasks": len(tasks), "written": written["kept"], "min_moves": ev.validation_min_moves,
            "sandboxes": [FIRST_SANDBOX, FIRST_SANDBOX + ev.validation_explorations - 1],
            "seconds": round(time.perf_counter() - t0, 1)}


def score(cfg, env_cls, policy, out: Path, tasks: int) -> dict:
    """Greedy success of ``policy`` on the ``tasks`` validation tasks, each distinct map played once
    (``eval_tasks``: two sandboxes can hold the same map, and then the same task)."""
    from selfevolve.build import build_prompt
    from selfevolve.train.evaluate import evaluate

    t0 = time.perf_counter()
    options = {**cfg.env.options(), "split": "synth", "tasks_file": str(out / FOLDER / "tasks.jsonl")}
    builder = build_prompt(cfg, policy, make_env(env_cls, **options))
    m = evaluate(policy, env_cls, options, builder, episodes=tasks, seed_offset=0, batch=cfg.eval.batch)
    return {"success": m["eval/success"], "tasks": int(m["eval/tasks"]), "seconds": round(time.perf_counter() - t0, 1)}


def best_round(rounds: list[dict]) -> int | None:
    """The round with the highest validation success, the latest on a tie; None when no round was scored."""
    scored = [(r["validation"]["success"], r["round"]) for r in rounds if "success" in r.get("validation", {})]
    return max(scored)[1] if scored else None
