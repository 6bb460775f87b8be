"""The generation cache: transformers' ``DynamicCache`` (one ``torch.cat`` of the whole cache per layer and
step) against ``GrowingCache`` (appends written in place into spare positions, ``selfevolve/models/kv_cache.py``),
side by side on the same episodes.

Two workloads, each played ``--reps`` times with the two caches alternated on the same policy and seeds:

- ``engine``: ``bench_rollout.py``'s engine path: ``--episodes`` greedy FrozenLake episodes on distinct held-out
  maps, all 8 turns long with the untrained model (the evaluation's shape);
- ``step``: one training step's batch, ``--tasks`` × ``--group-size`` sampled episodes through the trainer's own
  ``play_episodes``, each from its own stream (as ``bench_dedupe.py``).

Reports the wall time of each (best of the reps), the decode and prefill seconds of the engine, and whether the
two caches produced the same tokens and log-probs (they must: the numbers in the cache are the same).

    python benchmarks/bench_kv_cache.py                       # both workloads, untrained SmolLM2, 2 reps
    python benchmarks/bench_kv_cache.py --workloads engine --episodes 32 --reps 3
"""

from __future__ import annotations

import contextlib
import time

import torch
from transformers import DynamicCache

import selfevolve.models.generation as generation
from bench_dedupe import step_batch
from bench_rollout import instrumented, run_engine
from selfevolve.envs import make_env
from selfevolve.rollout.collect import play_episodes
from selfevolve.rollout.runner import RolloutStats
from selfevolve.tasks.source import seed_tasks

CACHES = {"dynamic": DynamicCache, "growing": generation.GrowingCache}


@contextlib.contextmanager
def cache_class(name: str):
    """Generation builds its caches from this class for the duration (the name ``generation`` looks up)."""
    keep = generation.GrowingCache
    generation.GrowingCache = CACHES[name]
    try:
        yield
    finally:
        generation.GrowingCache = keep


def played(trajs) -> tuple[list, list]:
    """Every episode's reply ids, and its sampling log-probs, turn by turn."""
    return [[s.action_ids for s in t.steps] for t in trajs], [[s.logprobs for s in t.steps] for t in trajs]


def max_logprob_gap(a, b) -> float:
    return max((abs(x - y) for ea, eb in zip(a, b) for sa, sb in zip(ea, eb) for x, y in zip(sa, sb)), default=0.0)


def own_arguments(ap) -> None:
    ap.add_argument("--workloads", nargs="+", default=["engine", "step"], choices=["engine", "step"])
    ap.add_argument("--episodes", type=int, default=32, help="engine: greedy episodes on held-out maps")


def main() -> None:
    args, cfg, policy, env_cls, builder, step_set = step_batch(__doc__.split("\n\n")[0], own_arguments)
    env_opts = cfg.env.options()
    max_turns = make_env(env_cls, **env_opts).max_turns
    eval_set = seed_tasks(cfg.env.name, args.episodes, 1_000_000)
    run_engine(policy, builder, eval_set[:2], env_cls, env_opts, 1, True)  # first-call costs, untimed

    summary = []
    for work in args.workloads:
        times = {name: [] for name in CACHES}
        phases, result = {}, {}
        for _ in range(args.reps):
            for name in CACHES:
                with cache_class(name):
                    t = time.perf_counter()
                    if work == "engine":
                        with instrumented(policy, builder, True) as prof:
                            _, trajs, _ = run_engine(policy, builder, eval_set, env_cls, env_opts,
                                                     max_turns, True)
                        phases[name] = (prof["buckets"]["decode"], prof["buckets"]["prefill"])
                    else:
                        trajs = play_episodes(policy, builder, env_cls, env_opts, step_set, run_seed=0, step=1,
                                              version=1, stats=RolloutStats())
                    times[name].append(time.perf_counter() - t)
                result[name] = played(trajs)
                extra = f", decode {phases[name][0]:.1f} s, prefill {phases[name][1]:.1f} s" if name in phases else ""
                print(f"{work:<6} {name:<8} {times[name][-1]:6.1f} s{extra}", flush=True)
        same = sum(a == b for a, b in zip(result["dynamic"][0], result["growing"][0]))
        gap = max_logprob_gap(result["dynamic"][1], result["growing"][1])
        old, new = min(times["dynamic"]), min(times["growing"])
        line = (f"{work}: growing/dynamic {new / old:.2f}x wall ({old:.1f} s -> {new:.1f} s, best of {args.reps}), "
                f"identical episodes {same}/{len(result['dynamic'][0])}, max |d logprob| {gap:.1e}")
        if work == "engine":
            line += f", decode {phases['dynamic'][0]:.1f} -> {phases['growing'][0]:.1f} s (last rep)"
        summary.append(line)
    print(f"SUMMARY {' ; '.join(summary)}; torch threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
