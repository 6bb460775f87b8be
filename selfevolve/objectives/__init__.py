"""Objectives: what the update learns from a step's trajectories. One object per algorithm, all with the same
small interface, so that the training loop never asks which algorithm runs (:class:`Objective`):

- ``value_head_kind(cfg)``: the value head the policy must carry (its kind), None for none;
- ``credit(trajs) -> (rows, metrics)``: rewards -> filter -> advantages -> what the update trains on;
- ``update(rows, trajs) -> metrics``: the optimizer steps on them;
- ``value_suffix``: the ids appended to a state before its value is read (search's value scorer);
- ``current_logprobs(rows)``: the current policy's log-probs of the rows' generated tokens, without gradients
  (self-navigating restates the old log-probs of its guided rows with them).

:func:`make_objective` picks one by ``algo.name``: :class:`~selfevolve.objectives.token.TokenObjective` for every
estimator of ``credit.ESTIMATORS`` (grpo, rloo, gigpo, ppo), :class:`~selfevolve.objectives.self_ac.SelfAcObjective`
for ``self_ac``.
"""

from __future__ import annotations

from typing import Protocol

from selfevolve.errors import unknown_name
from selfevolve.objectives.credit import ESTIMATORS
from selfevolve.objectives.self_ac import SelfAcObjective
from selfevolve.objectives.token import TokenObjective
from selfevolve.types import Trajectory

OBJECTIVES: dict[str, type] = {**{name: TokenObjective for name in ESTIMATORS}, "self_ac": SelfAcObjective}


class Objective(Protocol):
    """What the trainer asks of an algorithm (built by :func:`make_objective`)."""

    value_suffix: list[int]

    def credit(self, trajs: list[Trajectory]) -> tuple[list, dict[str, float]]: ...

    def update(self, rows: list, trajs: list[Trajectory]) -> dict[str, float]: ...

    def current_logprobs(self, rows: list) -> list[list[float]]: ...


def objective_class(cfg) -> type:
    """The objective of ``algo.name``; an unknown name is a ConfigError listing the known ones."""
    if cfg.algo.name not in OBJECTIVES:
        raise unknown_name("algo", cfg.algo.name, OBJECTIVES)
    return OBJECTIVES[cfg.algo.name]


def value_head_kind(cfg) -> str | None:
    """The value head a policy trained with ``cfg`` carries (``algo.ppo.value_head`` / ``algo.self_ac.value_head``),
    None when its objective reads no values."""
    return objective_class(cfg).value_head_kind(cfg)


def make_objective(cfg, policy, builder, optimizer, rng) -> Objective:
    """The objective of ``algo.name`` over ``policy`` (built with :func:`value_head_kind`'s head), stepping
    ``optimizer``; ``rng`` shuffles the update's minibatches."""
    return objective_class(cfg)(cfg, policy, builder, optimizer, rng)
