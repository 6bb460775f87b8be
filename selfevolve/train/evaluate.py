"""Evaluation on held-out seeds: greedy success rate, and pass@k from k sampled rollouts per task."""

from __future__ import annotations

import torch

from selfevolve.envs import make_env
from selfevolve.rollout.runner import rollout
from selfevolve.tasks.source import eval_tasks


def evaluate(policy, env_cls, env_options: dict, builder, *, episodes: int, pass_k: int = 0,
             seed_offset: int = 1_000_000, sample_seed: int = 0) -> dict[str, float]:
    """Greedy success on ``episodes`` held-out tasks; with ``pass_k`` > 0 also pass@k (any of k samples solves).

    pass@k sampling uses its own generator, so evaluating never changes the training run's random stream.
    """
    name = getattr(env_cls, "name", env_cls.__name__)
    tasks = eval_tasks(name, episodes, seed_offset)
    envs = [make_env(env_cls, **env_options) for _ in tasks]
    trajs = rollout(policy, envs, tasks, builder, max_turns=envs[0].max_turns, greedy=True)
    out = {
        "eval/success": sum(t.success for t in trajs) / len(trajs),
        "eval/reward": sum(t.reward for t in trajs) / len(trajs),
        "eval/valid": sum(s.valid for t in trajs for s in t.steps) / max(1, sum(len(t.steps) for t in trajs)),
    }
    if pass_k > 0:
        rep = [t for t in tasks for _ in range(pass_k)]
        envs = [make_env(env_cls, **env_options) for _ in rep]
        gen = torch.Generator(device=policy.device).manual_seed(sample_seed)
        sampled = rollout(policy, envs, rep, builder, max_turns=envs[0].max_turns, generator=gen)
        solved = {t.task.id for t in sampled if t.success}
        out[f"eval/pass@{pass_k}"] = sum(t.id in solved for t in tasks) / len(tasks)
    return out
