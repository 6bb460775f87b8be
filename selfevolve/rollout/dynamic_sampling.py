"""Dynamic sampling (DAPO, Yu et al. 2025, arXiv 2503.14476 §3.2): keep drawing groups until the step has its
target number of groups whose rewards differ.

A group whose G rollouts all got the same reward has zero advantage under any group baseline (GRPO, RLOO): it
costs its rollouts and teaches nothing. A step where most groups are like that barely moves the policy, which is
how a run that starts near p = 0 can stay there. DAPO drops such groups and samples more until the batch is full
of groups with a spread. Here a round plays the missing number of new tasks; after ``max_rounds`` rounds the step
trains on what it has. The extra rollouts are counted (``sampling/*`` metrics) and their time is the step's.
"""

from __future__ import annotations

from typing import Callable

from selfevolve.types import Trajectory


def has_spread(group: list[Trajectory], tol: float = 1e-9) -> bool:
    """Whether a group's episode rewards (the environment's, before any shaping) are not all equal."""
    rewards = [t.reward for t in group]
    return max(rewards) - min(rewards) > tol


def by_group(trajs: list[Trajectory]) -> list[list[Trajectory]]:
    """Trajectories grouped by ``group_id``, groups in order of first appearance."""
    groups: dict[str, list[Trajectory]] = {}
    for t in trajs:
        groups.setdefault(t.group_id, []).append(t)
    return list(groups.values())


def sample_with_spread(draw: Callable[[int], list], play: Callable[[list], tuple], target: int,
                       max_rounds: int) -> tuple[list[Trajectory], list, dict[str, float]]:
    """Play ``target`` tasks (``draw(n)`` gives n new tasks, ``play(tasks)`` returns ``(trajectories, stats)``),
    then, while fewer than ``target`` groups have a spread and rounds remain, play as many new tasks as are
    missing. Returns the trajectories of the (at most ``target``) groups with a spread — all groups when none
    has one after the last round, so that the step still reports what it played — the per-round stats, and
    metrics: ``sampling/rounds``, ``sampling/groups`` (played), ``sampling/kept_groups``,
    ``sampling/zero_spread_first`` (the share of the first round's groups without a spread)."""
    kept: list[list[Trajectory]] = []
    played, stats, first_zero, rounds = [], [], 0.0, 0
    need = target
    while need > 0 and rounds < max_rounds:
        trajs, st = play(draw(need))
        stats.append(st)
        groups = by_group(trajs)
        played += groups
        spread = [g for g in groups if has_spread(g)]
        if rounds == 0:
            first_zero = 1 - len(spread) / max(1, len(groups))
        kept += spread[:need]
        need = target - len(kept)
        rounds += 1
    chosen = kept if kept else played
    metrics = {"sampling/rounds": float(rounds), "sampling/groups": float(len(played)),
               "sampling/kept_groups": float(len(kept)), "sampling/zero_spread_first": first_zero}
    return [t for g in chosen for t in g], stats, metrics
