"""A training step's sampled rollouts, wherever they run: ``collector.collect(policy, tasks, step)``.

The trainer calls one method whichever backend is configured (``distributed.backend``, picked by
``selfevolve.distributed.make_rollouts``):

- :class:`LocalRollouts` plays the whole step in this process, in one batched rollout;
- ``RayRollouts`` (``selfevolve/distributed/ray_rollout.py``) splits the step's groups over Ray workers.

Both play episodes with :func:`play_episodes`, which seeds every episode by itself (``rollout/seeding.py``):
the same step gives the same trajectories on either backend and with any number of workers.
"""

from __future__ import annotations

from dataclasses import dataclass

from selfevolve.envs import make_env
from selfevolve.envs.pool import EnvPool, close_all
from selfevolve.rollout.runner import RolloutStats, rollout
from selfevolve.rollout.seeding import episode_streams
from selfevolve.types import Task, Trajectory


@dataclass(frozen=True)
class Episode:
    """One episode of a step: its position in the step's batch (which seeds it), task and group."""

    index: int
    task: Task
    group_id: str


def step_episodes(tasks: list[Task], group_size: int, step: int) -> list[Episode]:
    """The step's batch: ``group_size`` episodes per task, a task's group contiguous."""
    rep = [t for t in tasks for _ in range(group_size)]
    return [Episode(i, t, f"{step}:{t.id}") for i, t in enumerate(rep)]


def play_episodes(policy, builder, env_cls, env_options: dict, episodes: list[Episode], *, run_seed: int,
                  step: int, version: int, guide=None, stats: RolloutStats | None = None,
                  pool: EnvPool | None = None) -> list[Trajectory]:
    """Play ``episodes`` in one batched rollout, each with its own random stream; every trajectory is
    stamped with the policy ``version`` that sampled it. The environments come from ``pool`` (reused across
    steps), else they are made here and closed after."""
    if not episodes:
        return []
    envs = pool.take(len(episodes)) if pool is not None else [make_env(env_cls, **env_options) for _ in episodes]
    tasks = [e.task for e in episodes]
    gens = episode_streams(policy, run_seed, step, [e.index for e in episodes], [t.id for t in tasks])
    try:
        trajs = rollout(policy, envs, tasks, builder, max_turns=envs[0].max_turns,
                        group_ids=[e.group_id for e in episodes], generator=gens, stats=stats, guide=guide)
    finally:
        if pool is None:
            close_all(envs)
    for t in trajs:
        t.policy_version = version
    return trajs


class LocalRollouts:
    """The step's rollouts in the trainer's own process (``distributed.backend=local``)."""

    def __init__(self, cfg, env_cls, env_options: dict, builder, experience=None, pool: EnvPool | None = None):
        self.cfg, self.env_cls, self.env_options, self.builder = cfg, env_cls, env_options, builder
        self.experience = experience
        self.pool = pool if pool is not None else EnvPool(env_cls, env_options)

    def collect(self, policy, tasks: list[Task], step: int) -> tuple[list[Trajectory], RolloutStats, dict]:
        """``(trajectories in batch order, stats, metrics)``; the policy version is the step number."""
        G = self.cfg.algo.group_size
        episodes = step_episodes(tasks, G, step)
        stats = RolloutStats()
        guide = self.experience.guide([e.task for e in episodes], G, training=True) if self.experience else None
        trajs = play_episodes(policy, self.builder, self.env_cls, self.env_options, episodes, run_seed=self.cfg.seed,
                              step=step, version=step, guide=guide, stats=stats, pool=self.pool)
        metrics = {}
        if guide is not None and guide.turns:
            metrics["experience/recall_s_per_turn"] = guide.seconds / guide.turns
        return trajs, stats, metrics

    def close(self) -> None:
        self.pool.close()
