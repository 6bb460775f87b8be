"""Self-AC's two PPO ratios off-policy: how often each one clips when several optimizer steps reuse one batch.

With the default on-policy update (``algo.epochs=1``, ``algo.minibatches=1``) every ratio is exactly 1 and neither
clips; the per-turn ratio (the seed's: whole-action probabilities) and the per-token ratio differ only in how the
tokens' gradients are averaged. This benchmark measures the regime where they do differ: one batch of real
episodes (``agent.think=true`` so that actions are tens of tokens long), trained for ``--epochs`` ×
``--minibatches`` optimizer steps from the same starting weights with each ratio, reporting the fraction of
clipped ratios (``clip_frac``: tokens for ``token``, turns for ``turn``) and the KL estimate per epoch.

    python benchmarks/bench_self_ac_ratio.py --model smollm2-135m --episodes 8 --epochs 3 --minibatches 4
"""

from __future__ import annotations

import argparse
import json
import random

import torch

from selfevolve.config import load_config
from selfevolve.envs import ENVS, make_env
from selfevolve.objectives import value_head_kind
from selfevolve.objectives.self_ac.shadow import build_shadow_episode, critic_prompt_ids, final_state_ids
from selfevolve.objectives.self_ac.update import self_ac_update
from selfevolve.rollout.runner import rollout
from selfevolve.tasks.source import SeedTasks
from selfevolve.train.trainer import build_policy, build_prompt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--env", default="frozenlake")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--minibatches", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(overrides=[f"model.name={args.model}", f"env.name={args.env}", "agent.think=true",
                                 "agent.max_new_tokens=48", "algo.name=self_ac", f"algo.lr={args.lr}",
                                 f"algo.minibatches={args.minibatches}",
                                 # each call below is one epoch on the same episodes: π_old must stay the sampler's
                                 # (recomputing would restate it at weights that have already moved)
                                 "algo.old_logprobs=sampled"])
    policy = build_policy(cfg, value_head=value_head_kind(cfg))
    env_cls = ENVS[args.env]
    builder = build_prompt(cfg, policy, make_env(env_cls))
    tasks = SeedTasks(args.env, seed=0).next(args.episodes)
    trajs = rollout(policy, [make_env(env_cls) for _ in tasks], tasks, builder, max_turns=make_env(env_cls).max_turns,
                    generator=torch.Generator().manual_seed(0))
    cp = critic_prompt_ids(policy.tokenizer, builder.eot_id())
    start = {k: v.clone() for k, v in policy.adapter_state().items()}
    tokens = [len(s.action_ids) for t in trajs for s in t.steps]
    print(f"{len(trajs)} episodes, {len(tokens)} turns, action tokens per turn: mean {sum(tokens) / len(tokens):.1f}, "
          f"max {max(tokens)}", flush=True)
    out = {}
    for ratio in ("token", "turn"):
        policy.load_adapter_state(start)
        cfg.algo.self_ac.ratio = ratio
        opt = torch.optim.AdamW(policy.trainable_parameters(), lr=cfg.algo.lr)
        eps = [build_shadow_episode(t, cp, final_state_ids(t, builder), traj_index=i) for i, t in enumerate(trajs)]
        rng = random.Random(0)
        cfg.algo.epochs = 1
        per_epoch = [self_ac_update(policy, opt, eps, cfg.algo, rng) for _ in range(args.epochs)]
        out[ratio] = [{k: round(m[k], 4) for k in ("clip_frac", "approx_kl", "ratio_mean", "loss/actor")} for m in per_epoch]
        print(ratio, json.dumps(out[ratio]), flush=True)
    last = {r: v[-1]["clip_frac"] for r, v in out.items()}
    print(f"SUMMARY clip_frac at epoch {args.epochs}: token {last['token']:.3f}, turn {last['turn']:.3f} "
          f"({args.minibatches} minibatches per epoch, lr {args.lr})")


if __name__ == "__main__":
    main()
