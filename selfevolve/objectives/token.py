"""The token objective: GRPO, RLOO, GiGPO and PPO (``algo.name``) — one advantage per turn, broadcast to the
turn's reply tokens, and PPO-clip over token rows.

- credit: rewards (SELAUR-shaped with ``reward.shaping=selaur``) -> instance filtering -> the estimator of
  ``algo.name`` (``credit.ESTIMATORS``; with step labels, attribution-driven credit) -> token rows
  (``samples.build_rows``). An estimator that needs values (PPO's GAE) first gets V(s_t) of every turn under
  the current weights: the "old" values, before the update.
- update: ``algo.epochs`` x ``algo.minibatches`` PPO-clip steps over the rows (``update.ppo_update``), with the
  value loss where the rows carry returns (PPO).

Each trajectory keeps the advantages (and values) it was trained with, for the viewer (``train.log_trajectories``).
"""

from __future__ import annotations

from selfevolve.errors import unknown_name
from selfevolve.objectives.credit import ESTIMATORS, padded, shape_and_filter, step_advantages
from selfevolve.objectives.samples import Row, build_rows, row_logprobs
from selfevolve.objectives.update import compute_values, ppo_update
from selfevolve.types import Trajectory


class TokenObjective:
    """Credit and update of the estimators of ``credit.ESTIMATORS`` (see the module docstring)."""

    value_suffix: list[int] = []  # a state's value is read at its last prompt token (PPO's head): nothing appended
    # another loss term, ``extra(k) -> metrics``, run before the update's k-th optimizer step (``update.ppo_update``);
    # ``selfevolve evolve`` sets its replay imitation here (``evolve/imitation.py``)
    extra = None

    @staticmethod
    def value_head_kind(cfg) -> str | None:
        """The value head the policy needs: that of the estimator's own section (``algo.ppo.value_head``) when the
        estimator reads values, else none."""
        if cfg.algo.name not in ESTIMATORS:
            raise unknown_name("algo", cfg.algo.name, ESTIMATORS)
        return getattr(cfg.algo, cfg.algo.name).value_head if ESTIMATORS[cfg.algo.name].values else None

    def __init__(self, cfg, policy, builder, optimizer, rng):
        self.cfg, self.policy, self.optimizer, self.rng = cfg, policy, optimizer, rng
        self.estimator = ESTIMATORS[cfg.algo.name]

    def credit(self, trajs: list[Trajectory]) -> tuple[list[Row], dict[str, float]]:
        """The step's training rows and the credit's metrics (rows: none when filtering kept nothing)."""
        cfg = self.cfg
        kept, batch, metrics = shape_and_filter(trajs, cfg, self.policy.vocab_size)
        if not kept:
            return [], metrics
        values = None
        if self.estimator.values:
            with self.policy.updating():  # the critic's old values in the precision of the update that clips to them
                values = self.turn_values(kept)
            batch.values, _ = padded(values)
        adv, returns = step_advantages(cfg.algo.name, batch, cfg.algo, cfg.attribution)
        for t, a in zip(kept, batch.per_step(adv)):  # kept with the episode for the viewer (train.log_trajectories)
            t.advantages = [round(x, 5) for x in a]
        for t, v in zip(kept, values or []):
            t.values = [round(x, 5) for x in v]
        rows = build_rows(kept, batch.per_step(adv),
                          returns=batch.per_step(returns) if returns is not None else None, values=values)
        return rows, metrics

    def turn_values(self, trajs: list[Trajectory]) -> list[list[float]]:
        """V(s_t) of every turn of ``trajs`` under the current weights, one list per trajectory."""
        probe = build_rows(trajs, [0.0] * len(trajs))
        per_turn = [[0.0] * len(t.steps) for t in trajs]
        for row, vals in zip(probe, compute_values(self.policy, probe, self.cfg.algo.micro_batch_tokens)):
            for (i, t), v in zip(row.turns, vals):
                per_turn[i][t] = v
        return per_turn

    def current_logprobs(self, rows: list[Row]) -> list[list[float]]:
        """The current policy's log-probs of the rows' generated tokens (no gradients), one list per row."""
        return row_logprobs(self.policy, rows, self.cfg.algo.micro_batch_tokens)

    def update(self, rows: list[Row], trajs: list[Trajectory]) -> dict[str, float]:
        """The optimizer steps on ``rows``: PPO-clip, plus the value loss where they carry returns."""
        if not rows:
            return {}
        algo = self.cfg.algo
        return ppo_update(self.policy, self.optimizer, rows, algo, self.rng, vf_coef=algo.ppo.vf_coef,
                          vf_clip=algo.ppo.vf_clip, extra=self.extra)
