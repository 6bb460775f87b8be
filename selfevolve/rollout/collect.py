"""A training step's sampled rollouts, wherever they run: ``collector.collect(policy, tasks, step)``.

The trainer calls one method whichever backend is configured (``distributed.backend``, picked by
``selfevolve.distributed.make_rollouts``):

- :class:`LocalRollouts` plays the whole step in this process, in one batched rollout;
- ``RayRollouts`` (``selfevolve/distributed/ray_rollout.py``) splits the step's groups over Ray workers.

Both play episodes with :func:`play_episodes`, which seeds every episode by itself (``rollout/seeding.py``):
the same step gives the same trajectories on either backend and with any number of workers.

Trajectory search (``rollout.search``) goes through ``collector.search(...)`` the same way. In this process a
step's searches draw from the trainer's one stream (as they always have); on Ray workers each search draws from
its own stream and breaks its ties with its own RNG, seeded like an episode (:func:`play_searches`), so a step's
searches are the same with any number of workers — but not those of the local backend, as two seeds differ.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from selfevolve.envs import make_env
from selfevolve.envs.pool import EnvPool, close_all
from selfevolve.rollout.runner import RolloutStats, rollout
from selfevolve.rollout.search import SearchResult, search_rollouts
from selfevolve.rollout.seeding import episode_seed, episode_streams
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


def play_searches(policy, builder, jobs: list[Episode], spec, *, run_seed: int, step: int, version: int,
                  max_turns: int, critic_suffix: list[int], pool: EnvPool, guide=None) -> SearchResult:
    """Run one search per job, each with its own random stream and tie-breaking RNG seeded from its position in
    the step (as an episode's, ``rollout/seeding.py``): a search's result depends on the search alone. The kept
    trajectories are stamped with the policy ``version``."""
    seeds = [episode_seed(run_seed, step, e.index, e.task.id) for e in jobs]
    result = search_rollouts(policy, pool.maker(), [e.task for e in jobs], builder, spec, max_turns=max_turns,
                             group_ids=[e.group_id for e in jobs], generator=[policy.stream(x) for x in seeds],
                             rng=[random.Random(x) for x in seeds], critic_suffix=critic_suffix, guide=guide)
    for t in result.trajectories:
        t.policy_version = version
    return result


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

    def search(self, policy, tasks: list[Task], step: int, spec, *, max_turns: int, generator, rng,
               critic_suffix: list[int]) -> tuple[SearchResult, dict]:
        """``(search result, metrics)``: each task still yields ``algo.group_size`` kept trajectories, from
        group_size searches (or group_size / beams with ``search.keep=all``), all drawing from ``generator``;
        ``rng`` breaks score ties. Experience guides the searches as it guides sampled episodes."""
        searches = self.cfg.algo.group_size // spec.kept_per_search()  # per task
        rep = [t for t in tasks for _ in range(searches)]
        guide = self.experience.guide(rep, searches, training=True) if self.experience else None
        result = search_rollouts(policy, self.pool.maker(), rep, self.builder, spec, max_turns=max_turns,
                                 group_ids=[f"{step}:{t.id}" for t in rep], generator=generator, rng=rng,
                                 critic_suffix=critic_suffix, guide=guide)
        metrics = {}
        if guide is not None and guide.turns:
            metrics["experience/recall_s_per_turn"] = guide.seconds / guide.turns
        return result, metrics

    def close(self) -> None:
        self.pool.close()
