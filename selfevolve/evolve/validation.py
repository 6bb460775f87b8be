"""Which round's policy the run keeps: a validation set of hindsight tasks, scored after every round.

The held-out test split is for evaluation only, so it cannot choose between rounds. Yet a round can end below
the one before it (FrozenLake, seed 5: 22/64 held out after round 1, 8/64 after round 2; docs/evolve.md), and
then the last round is not the policy worth keeping. ``evolve.keep=best`` keeps the round whose policy solves
most of a validation set written the way the pool is, from training instances no round explores:

- **written** once, before round 0 (:func:`build`): ``evolve.validation_explorations`` explorations of random
  moves (``hindsight.explore_randomly``: no model, so no round's policy shapes the set) on training sandboxes
  from :data:`FIRST_SANDBOX` on, beyond the ones the rounds explore (round ``r`` starts at
  ``r × questioning.explorations``). A sandbox holding the same map or room as one a round explores is left
  out: in FrozenLake no validation task can then also be a training task (a relabelled map keeps every cell of
  its map but G's); in Sokoban the rooms compared include their targets, which relabelling moves, so two rooms
  differing only there could still give one task (none did among the default's 48 and 48 rooms). Their
  hindsight tasks go through the template writer (always: a model writing them would shape the set), the
  replay check and the filters, as the pool's do; those whose reference takes at least
  ``evolve.validation_min_moves`` moves are kept (the held-out maps take about six; a first version of the
  set, scored on every task, gave seed 5's round 0, at 1/64 held out, 26 % against 32 % for round 1, at 22/64);
- **scored** after each round's training (:func:`score`): greedy success on every distinct validation task;
- **kept** (``report.best_round``): the highest score, the latest round on a tie. The rounds still train on from
  the latest policy: a round scored lower is not undone, only not kept.

Tool worlds have no random explorer (their calls take arguments), so there the run keeps its last round and
says so. Measured in docs/evolve.md, 'Keeping the best round'.
"""

from __future__ import annotations

import time
from pathlib import Path

from selfevolve.envs import make_env
from selfevolve.envs.task_files import save_tasks
from selfevolve.errors import ConfigError
from selfevolve.evolve import hindsight
from selfevolve.evolve.pool import TaskPool
from selfevolve.evolve.report import seconds_since

FIRST_SANDBOX = 100_000  # the validation explorations' first training sandbox; the rounds explore 0, 1, ...
FOLDER = "validation"
NO_GAME = "tool worlds have no random explorer (games only), so the run keeps its last round"


def check(cfg) -> None:
    """The rounds' exploration sandboxes must stay below the validation's."""
    if cfg.evolve.keep != "best":
        return
    used = cfg.evolve.rounds * cfg.questioning.explorations
    if used > FIRST_SANDBOX:
        raise ConfigError(f"evolve.rounds x questioning.explorations = {used} exploration sandboxes reach the "
                          f"validation's, which start at {FIRST_SANDBOX}; lower them or set evolve.keep=last")
    last = FIRST_SANDBOX + cfg.evolve.validation_explorations
    if cfg.eval.seed_offset <= last:  # the filters would drop every validation task as held out
        raise ConfigError(f"eval.seed_offset={cfg.eval.seed_offset} makes the validation sandboxes {FIRST_SANDBOX}-"
                          f"{last - 1} held-out seeds; raise it above {last} or set evolve.keep=last")


def build(cfg, env_cls, out: Path) -> dict:
    """Write the validation tasks to ``out/validation/tasks.jsonl``; return what was written (``tasks``: how
    many; ``skipped``: why none, in a tool world)."""
    exploration = hindsight.game_of(env_cls)
    if exploration is None:
        return {"skipped": NO_GAME}
    t0 = time.perf_counter()
    ev, q = cfg.evolve, cfg.questioning
    options = hindsight.train_options(cfg, env_cls)
    probe = make_env(env_cls, **options)

    def start(seed: int) -> str:  # a sandbox's map or room
        probe.reset(seed)
        return probe.content_key()

    explored = {start(s) for s in range(ev.rounds * q.explorations)}
    records = hindsight.explore_randomly(exploration, lambda: make_env(env_cls, **options),
                                         explorations=ev.validation_explorations, steps=q.steps,
                                         breadth_steps=q.breadth_steps, first_seed=FIRST_SANDBOX, seed=cfg.seed,
                                         masked=ev.explore_constrained)
    disjoint = [r for r in records if start(r.seed) not in explored]
    folder = out / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    template = cfg.model_copy(update={"evolve": ev.model_copy(update={"writer": "template"})})
    kept, written = hindsight.write_tasks(template, env_cls, disjoint, None, set(), [], folder, TaskPool.key)
    tasks = [t for t, _, _ in kept if len(t.solution or []) >= ev.validation_min_moves]
    save_tasks(tasks, str(folder / "tasks.jsonl"))
    return {"tasks": len(tasks), "written": written["kept"], "min_moves": ev.validation_min_moves,
            "sandboxes": [FIRST_SANDBOX, FIRST_SANDBOX + ev.validation_explorations - 1],
            "left_out": len(records) - len(disjoint), "seconds": seconds_since(t0)}


def score(cfg, env_cls, policy, out: Path, tasks: int, episodes_out: list | None = None) -> dict:
    """Greedy success of ``policy`` on the ``tasks`` validation tasks, each distinct task played once
    (``eval_tasks``: two sandboxes can hold the same map, and then the same task), and the episodes' mean shaped
    reward (recorded beside it: it separates rounds that solve as many tasks). ``episodes_out`` receives the
    greedy trajectories."""
    from selfevolve.build import build_prompt
    from selfevolve.train.evaluate import evaluate

    t0 = time.perf_counter()
    options = {**cfg.env.options(), "split": "synth", "tasks_file": str(out / FOLDER / "tasks.jsonl")}
    builder = build_prompt(cfg, policy, make_env(env_cls, **options))
    m = evaluate(policy, env_cls, options, builder, episodes=tasks, seed_offset=0, batch=cfg.eval.batch,
                 episodes_out=episodes_out)
    return {"success": m["eval/success"], "reward": m["eval/reward"], "tasks": int(m["eval/tasks"]),
            "seconds": seconds_since(t0)}


