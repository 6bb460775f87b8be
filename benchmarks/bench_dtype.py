"""fp32 or bf16 on this CPU: one training step's rollout and update, timed in each precision, side by side.

    python benchmarks/bench_dtype.py [--episodes 32] [--repeats 2]

Same policy init, same tasks, same sampling seed in each arm: one rollout of the default FrozenLake setup, then
one PPO update on its rows. Three arms: ``fp32``, ``bf16`` (``model.dtype=bf16``) and ``fp32+bf16 sampler``
(``model.sampler_dtype=bf16``: the rollout in bf16, the update in fp32). Prints a table and a final SUMMARY line
with each arm's time against fp32's. ``model.dtype=auto`` picks fp32 on a CPU because of what bf16 did to
learning (docs/benchmarks.md, "bf16 on a CPU that has it").
"""

from __future__ import annotations

import argparse
import random
import time

import torch
import transformers

from selfevolve.algos.advantages import compute_advantages
from selfevolve.config import load_config
from selfevolve.envs import make_env
from selfevolve.objectives.samples import build_rows
from selfevolve.objectives.update import ppo_update
from selfevolve.rollout.runner import rollout
from selfevolve.tasks.source import SeedTasks
from selfevolve.train.trainer import build_policy, build_prompt, resolve_env


ARMS = {"fp32": ["model.dtype=fp32"], "bf16": ["model.dtype=bf16"],
        "fp32+bf16 sampler": ["model.dtype=fp32", "model.sampler_dtype=bf16"]}


def one_step(overrides: list[str], episodes: int, group: int) -> tuple[float, float, int]:
    cfg = load_config(overrides=overrides)
    policy = build_policy(cfg)
    env_cls = resolve_env(cfg, None)
    builder = build_prompt(cfg, policy, make_env(env_cls))
    tasks = [t for t in SeedTasks("frozenlake").next(episodes // group) for _ in range(group)]
    t0 = time.perf_counter()
    trajs = rollout(policy, [make_env(env_cls) for _ in tasks], tasks, builder, max_turns=8,
                    group_ids=[t.id for t in tasks], generator=torch.Generator().manual_seed(0))
    t1 = time.perf_counter()
    adv = compute_advantages("grpo", torch.tensor([t.reward for t in trajs]), [t.group_id for t in trajs])
    rows = build_rows(trajs, adv.tolist())
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=cfg.algo.lr)
    ppo_update(policy, opt, rows, cfg.algo, random.Random(0))
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, sum(len(r) for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    best: dict[str, tuple[float, float, int]] = {}
    for r in range(args.repeats):  # interleaved, so every arm sees the same machine state
        for arm, overrides in ARMS.items():
            ro, up, toks = one_step(overrides, args.episodes, args.group)
            print(f"repeat {r} {arm}: rollout {ro:.1f} s, update {up:.1f} s ({toks} row tokens)", flush=True)
            old = best.get(arm)
            best[arm] = (min(ro, old[0]) if old else ro, min(up, old[1]) if old else up, toks)
    print("\n| arm | rollout s (best) | update s (best) |\n|---|---:|---:|")
    for arm, (ro, up, _) in best.items():
        print(f"| {arm} | {ro:.1f} | {up:.1f} |")
    f = best["fp32"]
    print("SUMMARY against fp32 on this CPU (time ratio, <1 is faster): "
          + "; ".join(f"{arm}: rollout {b[0] / f[0]:.2f}x, update {b[1] / f[1]:.2f}x"
                      for arm, b in best.items() if arm != "fp32"))

if __name__ == "__main__":
    main()
