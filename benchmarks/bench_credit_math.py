"""Cost of the credit-assignment math per batch: rewards (+ SELAUR), filtering and the advantage estimator.

    python benchmarks/bench_credit_math.py --episodes 32

Real FrozenLake episodes (random moves, so episodes have several turns) with random token statistics; prints
milliseconds per batch for each estimator and a final SUMMARY line. No model is involved: this is the overhead
the estimators add to a training step (which takes tens of seconds on a CPU).
"""

from __future__ import annotations

import argparse
import random
import time

from selfevolve.config import load_config
from selfevolve.envs import make_env
from selfevolve.objectives.credit import credit_batch, select_groups, step_advantages
from selfevolve.types import Step, Task, Trajectory

VARIANTS = {
    "grpo": ["algo.name=grpo"],
    "rloo": ["algo.name=rloo"],
    "gigpo": ["algo.name=gigpo"],
    "gigpo+selaur": ["algo.name=gigpo", "reward.shaping=selaur"],
    "gigpo anchor=similarity": ["algo.name=gigpo", "algo.gigpo.anchor=similarity"],
    "grpo+filter": ["algo.name=grpo", "filter.keep=0.5"],
}


def episodes(n: int, group: int = 8, seed: int = 0) -> list[Trajectory]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        env = make_env("frozenlake")
        env.reset(i // group)
        traj = Trajectory(task=Task(id=str(i // group), env="frozenlake", seed=i // group), group_id=str(i // group))
        for _ in range(env.max_turns):
            key = env.state_key()
            obs, reward, done, info = env.step(rng.choice(["Left", "Right", "Up", "Down"]))
            k = rng.randint(1, 3)
            traj.steps.append(Step(prompt_ids=[1], action_ids=[2] * k, logprobs=[-0.5] * k,
                                   entropy=[rng.uniform(0, 5) for _ in range(k)], top1=[rng.uniform(0.5, 1)] * k,
                                   top2=[rng.uniform(0, 0.5)] * k, reward=reward, state_key=key, observation=obs))
            traj.success = bool(info["success"])
            if done:
                break
        out.append(traj)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    trajs = episodes(args.episodes)
    turns = sum(len(t.steps) for t in trajs)
    results = {}
    for name, overrides in VARIANTS.items():
        cfg = load_config(overrides=overrides)
        t0 = time.perf_counter()
        for _ in range(args.repeats):
            batch, _ = credit_batch(trajs, cfg, vocab_size=49152)
            keep, _ = select_groups(batch, cfg.filter)
            step_advantages(cfg.algo.name, batch.select(keep), cfg.algo)
        results[name] = (time.perf_counter() - t0) / args.repeats * 1000
        print(f"{name:26s} {results[name]:8.1f} ms per batch")
    print(f"SUMMARY credit math, {args.episodes} episodes / {turns} turns per batch: "
          + ", ".join(f"{k} {v:.1f} ms" for k, v in results.items()))


if __name__ == "__main__":
    main()
