"""Which hindsight references to imitate: behaviour cloning alone on an evolve run's round-0 pool, the
demonstrations drawn four ways, then the greedy held-out evaluation (the environment's content-disjoint test
split). No RL: this isolates what ``evolve.bc_longest`` changes.

The pool is the one round 0 of ``RUN`` wrote (``RUN/round-0/pool.jsonl``: the untrained model's explorations,
hindsight tasks verified by replay), with its counts reset, so every task is unplayed and the learnability draw
is uniform. Draws:

- ``all``: the whole pool (``evolve.bc_longest=1``);
- ``longest``: the longest third of the references, ties kept (``evolve.bc_longest=1/3``, the default);
- ``length``: the whole pool, a task weighted by its reference's moves (so each reference step counts alike);
- ``final``: the longest reference of each exploration (hindsight relabelling's "final" goal).

    python benchmarks/bench_bc_draw.py --run runs/bench_evolve/frozenlake/evolve/seed-1 --draw longest all \\
        --steps 10 --seed 1

Each (draw, steps) trains a fresh LoRA from the base model in ``--out``; prints one row per draw and a final
SUMMARY line.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml
from rich.console import Console

from selfevolve.build import resolve_env
from selfevolve.config import _validate
from selfevolve.envs import make_env
from selfevolve.evolve.loop import EvolveTrainer, pool_seeds
from selfevolve.evolve.pool import PoolTasks, TaskPool

DRAWS = ("all", "longest", "length", "final")


def one(run: Path, draw: str, steps: int, seed: int, out: Path) -> dict:
    folder = run / "round-0"
    data = _validate(yaml.safe_load((folder / "train" / "config.yaml").read_text())).model_dump(mode="json")
    data["seed"] = seed
    data["train"].update(out_dir=str(out / f"{draw}-{steps}-seed{seed}"), resume=False, overwrite=True, steps=0)
    data["evolve"]["bc_longest"] = 1 / 3 if draw == "longest" else 1.0
    cfg = _validate(data)
    pool = TaskPool()
    pool.load(folder, "pool")
    for e in pool.entries:
        e.attempts = e.successes = 0
    moves = [len(e.task.solution or []) for e in pool.entries]
    if draw == "length":
        weights = dict(zip(map(id, pool.entries), map(float, moves)))
        pool.weight = lambda e: weights[id(e)]  # the pool's own draw, by these weights
    elif draw == "final":
        best: dict[int, int] = {}
        for i, e in enumerate(pool.entries):
            if e.exploration not in best or moves[i] > moves[best[e.exploration]]:
                best[e.exploration] = i
        finals = {id(pool.entries[i]) for i in best.values()}
        pool.weight = lambda e: 1.0 if id(e) in finals else 0.0  # zero: never drawn
    env_cls = resolve_env(cfg, None)
    tasks = PoolTasks(pool, cfg.env.name, pool_seeds(make_env(env_cls, **cfg.env.options()), pool), seed=seed)
    trainer = EvolveTrainer(cfg, tasks, console=Console(stderr=True))
    t0 = time.perf_counter()
    bc = trainer.clone_references(steps, cfg.evolve.bc_tasks, seed=seed)
    ev = trainer.evaluate()
    trainer.close()
    return {"run": str(run), "draw": draw, "steps": steps, "seed": seed, "pool": len(moves), "bc": bc,
            "success": ev["eval/success"], "reward": ev["eval/reward"], "episodes": ev["eval/tasks"],
            "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="an evolve run folder (its round-0 pool is used)")
    ap.add_argument("--draw", nargs="+", default=["longest", "all"], choices=DRAWS)
    ap.add_argument("--steps", nargs="+", type=int, default=[10], help="behaviour-cloning steps (16 references each)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/bench_bc_draw"))
    args = ap.parse_args()
    rows = []
    print("| draw | steps | pool tasks | BC loss first → last | held-out greedy success | seconds |")
    print("|---|---:|---:|---|---:|---:|")
    for steps in args.steps:
        for draw in args.draw:
            r = one(args.run, draw, steps, args.seed, args.out)
            rows.append(r)
            print(f"| {draw} | {steps} | {r['pool']} | {r['bc']['bc/loss_first']:.3f} → {r['bc']['bc/loss_last']:.3f} "
                  f"| {r['success']:.3f} ({round(r['success'] * r['episodes'])}/{r['episodes']}) | {r['seconds']:.0f} |",
                  flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"summary-seed{args.seed}.json").write_text(json.dumps(rows, indent=1))
    print("SUMMARY bc draw: " + "; ".join(f"{r['draw']}x{r['steps']} {r['success']:.3f}" for r in rows))


if __name__ == "__main__":
    main()
