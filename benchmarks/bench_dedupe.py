"""Prompts that several rollouts share: every rollout of a task starts from the same prompt, and rollouts that
have made the same moves so far share their next prompt too. Does encoding such a prompt once instead of once per
rollout pay, and does it change any sample?

One training step's batch (``--tasks`` tasks × ``--group-size`` rollouts, sampled, each episode from its own
stream as the trainer seeds it) through the trainer's own ``play_episodes``, with generation's ``dedupe`` on
(the default) and off, alternated ``--reps`` times on the same policy and seeds. Reports the wall time, the prompt
tokens encoded and how many episodes played exactly the same tokens.

    python benchmarks/bench_dedupe.py                                               # untrained SmolLM2
    python benchmarks/bench_dedupe.py --init-from runs/bench_profile/checkpoints/latest   # a trained adapter
"""

from __future__ import annotations

import argparse
import time

import torch

import selfevolve.models.policy as policy_module
from selfevolve.build import build_policy, build_prompt
from selfevolve.config import load_config
from selfevolve.envs import ENVS, make_env
from selfevolve.rollout.collect import play_episodes, step_episodes
from selfevolve.rollout.runner import RolloutStats
from selfevolve.tasks.source import SeedTasks
from selfevolve.train.checkpoint import load_init_adapter


def _without_dedupe(generate):
    """``generate`` with ``dedupe`` forced off (``Policy.generate`` passes it explicitly)."""
    return lambda *args, **kwargs: generate(*args, **{**kwargs, "dedupe": False})


def step_batch(description: str, add_arguments=None):
    """The command line the step benchmarks share (this one, ``bench_microbatch.py`` and ``bench_kv_cache.py``,
    whose own options ``add_arguments(parser)`` adds), and one training step's batch ready to play:
    ``(args, cfg, policy, env_cls, builder, episodes)``."""
    ap = argparse.ArgumentParser(description=description)
    if add_arguments is not None:
        add_arguments(ap)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--init-from", default=None, help="a run or checkpoint folder whose adapter to load")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(overrides=[f"model.init_from={args.init_from}"] if args.init_from else [])
    policy = build_policy(cfg)
    load_init_adapter(cfg, policy)
    env_cls = ENVS[cfg.env.name]
    builder = build_prompt(cfg, policy, make_env(env_cls))
    episodes = step_episodes(SeedTasks(cfg.env.name, seed=0).next(args.tasks), args.group_size, step=1)
    return args, cfg, policy, env_cls, builder, episodes


def main() -> None:
    args, _, policy, env_cls, builder, episodes = step_batch(__doc__.split("\n\n")[0])
    plain = policy_module.generate
    times: dict[bool, list[float]] = {True: [], False: []}
    tokens, played = {}, {}
    for _ in range(args.reps):
        for dedupe in (True, False):
            policy_module.generate = plain if dedupe else _without_dedupe(plain)
            stats = RolloutStats()
            t = time.perf_counter()
            trajs = play_episodes(policy, builder, env_cls, {}, episodes, run_seed=0, step=1, version=1, stats=stats)
            times[dedupe].append(time.perf_counter() - t)
            tokens[dedupe] = stats.prompt_tokens
            played[dedupe] = [[s.action_ids for s in tr.steps] for tr in trajs]
            print(f"dedupe={'on ' if dedupe else 'off'} {times[dedupe][-1]:6.1f} s, {stats.prompt_tokens} prompt "
                  f"tokens, {stats.new_tokens} generated", flush=True)
    policy_module.generate = plain
    same = sum(a == b for a, b in zip(played[True], played[False]))
    on, off = min(times[True]), min(times[False])
    print(f"SUMMARY dedupe on/off {on / off:.2f}x wall ({off:.1f} s -> {on:.1f} s, best of {args.reps}), prompt tokens "
          f"{tokens[False]} -> {tokens[True]} ({tokens[True] / tokens[False]:.2f}x), identical episodes {same}/"
          f"{len(episodes)}; torch threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
