"""Credit: from trajectories to per-turn advantages — reward shaping, instance filtering, and the estimator
named by ``algo.name``.

The stages, each a pure function in ``selfevolve/algos/`` (this module only turns trajectories into padded
tensors and back):

1. rewards: the environment's step rewards, or SELAUR's failure-aware rewards (``reward.shaping=selaur``);
2. filter: drop task groups with little reward spread (``filter.keep``, ``filter.drop_zero_std``);
3. advantages: ``grpo`` / ``rloo`` (episode level, broadcast to every turn), ``gigpo`` (episode + anchor-state
   step level), ``ppo`` (turn-level GAE on the value head's estimates); with step labels
   (``reward.attribution``, ``Step.info["attribution"]``), the labels' suffix sums are added to the estimator's
   per-turn advantage (``algos/attribution.py``; for grpo / rloo that is the seed's fusion with the outcome).

Stages 1-2 serve every objective (:func:`shape_and_filter`); the estimators of stage 3 (:data:`ESTIMATORS`) are
the token objective's (``token.py``). A new estimator is one function and one entry there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch import Tensor

from selfevolve.algos.advantages import grpo_advantages, rloo_advantages
from selfevolve.algos.attribution import fuse_turn_advantages
from selfevolve.algos.filtering import filter_groups
from selfevolve.algos.gae import gae_advantages, whiten
from selfevolve.algos.gigpo import anchor_ids, gigpo_advantages
from selfevolve.algos.selaur import shape_failures, token_uncertainty, trajectory_uncertainty
from selfevolve.errors import unknown_name
from selfevolve.types import Trajectory

START_KEY = "\x00start"  # every rollout of a group starts from the same state (same env seed)


@dataclass
class CreditBatch:
    """Padded per-turn view of N trajectories: [N] episode quantities and [N, T] turn quantities."""

    group_ids: list
    episode_rewards: Tensor  # [N] float64: what group baselines compare (after shaping)
    step_rewards: Tensor  # [N, T] float64 (after shaping); 0 at padding
    mask: Tensor  # [N, T] bool: which turns exist
    success: Tensor  # [N] bool
    anchor_keys: list[list[str]]
    values: Tensor | None = None  # [N, T]: V(s_t) at rollout time (PPO)
    step_labels: Tensor | None = None  # [N, T]: +1 GOOD / -1 BAD per step (reward.attribution), else None

    def select(self, keep: Tensor) -> "CreditBatch":
        idx = keep.nonzero().flatten().tolist()
        return replace(
            self,
            group_ids=[self.group_ids[i] for i in idx],
            episode_rewards=self.episode_rewards[idx],
            step_rewards=self.step_rewards[idx],
            mask=self.mask[idx],
            success=self.success[idx],
            anchor_keys=[self.anchor_keys[i] for i in idx],
            values=None if self.values is None else self.values[idx],
            step_labels=None if self.step_labels is None else self.step_labels[idx],
        )

    def per_step(self, x: Tensor) -> list[list[float]]:
        """[N, T] -> one list per trajectory, its real turns only."""
        return [row[: int(m.sum())].tolist() for row, m in zip(x, self.mask)]


def padded(rows: list[list[float]], dtype=torch.float64) -> tuple[Tensor, Tensor]:
    T = max((len(r) for r in rows), default=0)
    out = torch.zeros(len(rows), max(T, 1), dtype=dtype)
    mask = torch.zeros(len(rows), max(T, 1), dtype=torch.bool)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=dtype)
        mask[i, : len(r)] = True
    return out, mask


def anchor_keys(traj: Trajectory, mode: str) -> list[str]:
    """Per step: the key of the state the action was taken in (GiGPO anchors).

    ``state``: the environment's ``state_key()`` recorded at rollout time, or the observation text when an env
    leaves it empty. ``observation``/``similarity``: the observation the action answered (the previous step's
    observation; the start state for the first step).
    """
    keys = []
    for t, step in enumerate(traj.steps):
        obs = traj.steps[t - 1].observation if t > 0 else START_KEY
        keys.append(step.state_key if mode == "state" and step.state_key else obs)
    return keys


def step_uncertainty(trajs: list[Trajectory], selaur, vocab_size: int) -> tuple[Tensor, Tensor]:
    """SELAUR u_t (mean token uncertainty of each turn's reply), padded [N, T], from the rollout's statistics."""
    rows = []
    for traj in trajs:
        row = []
        for s in traj.steps:
            if not s.action_ids or not s.entropy:
                row.append(0.0)
                continue
            u = token_uncertainty(
                torch.tensor(s.entropy, dtype=torch.float64), torch.tensor(s.top1, dtype=torch.float64),
                torch.tensor(s.top2, dtype=torch.float64), vocab_size,
                w_entropy=selaur.w_entropy, w_least_confidence=selaur.w_least_confidence, w_margin=selaur.w_margin,
                margin_scale=selaur.margin_scale,
                sampled_p=(torch.tensor(s.logprobs, dtype=torch.float64).exp()
                           if selaur.least_confidence == "sampled" else None),
            )
            row.append(float(u.mean()))
        rows.append(row)
    return padded(rows)


def credit_batch(trajs: list[Trajectory], cfg, vocab_size: int) -> tuple[CreditBatch, dict[str, float]]:
    """Rewards (shaped when ``reward.shaping=selaur``) and anchor keys of a batch of trajectories."""
    step_r, mask = padded([[s.reward for s in t.steps] for t in trajs])
    success = torch.tensor([t.success for t in trajs], dtype=torch.bool)
    metrics: dict[str, float] = {}
    if cfg.reward.shaping == "selaur":
        sc = cfg.reward.selaur
        u, _ = step_uncertainty(trajs, sc, vocab_size)
        step_r, episode = shape_failures(step_r, u, mask, success, lam=sc.lam, fail_weight=sc.fail_weight,
                                         gap=sc.gap, success_reward=sc.success_reward)
        U = trajectory_uncertainty(u, mask, sc.lam)
        metrics["reward/shaped_mean"] = float(episode.mean()) if len(trajs) else 0.0
        if (~success).any():
            metrics["selaur/U_failed"] = float(U[~success].mean())
        if success.any():
            metrics["selaur/U_success"] = float(U[success].mean())
        for t, r in zip(trajs, episode.tolist()):
            t.shaped_reward = r
    else:
        step_r = step_r * mask
        episode = step_r.sum(1)
    mode = cfg.algo.gigpo.anchor
    batch = CreditBatch(
        group_ids=[t.group_id for t in trajs], episode_rewards=episode, step_rewards=step_r, mask=mask,
        success=success, anchor_keys=[anchor_keys(t, mode) for t in trajs], step_labels=step_labels(trajs),
    )
    return batch, metrics


def step_labels(trajs: list[Trajectory]) -> Tensor | None:
    """+1 (GOOD) / −1 (BAD) per step from ``Step.info["attribution"]``, padded [N, T]; None when no step of the
    batch carries a label (attribution off, or past ``attribution.steps``). A batch is labelled whole or not at
    all."""
    labelled = [[s.info.get("attribution") for s in t.steps] for t in trajs]
    flat = [a for row in labelled for a in row]
    if not any(flat):
        return None
    if not all(flat):
        raise ValueError("some steps of the batch carry an attribution label and some do not")
    return padded([[1.0 if a["label"] == "GOOD" else -1.0 for a in row] for row in labelled])[0]


def select_groups(batch: CreditBatch, filt) -> tuple[Tensor, dict[str, float]]:
    """Instance filtering on the (shaped) episode rewards: the mask of trajectories to train on."""
    return filter_groups(batch.episode_rewards, batch.group_ids, keep=filt.keep, by=filt.by,
                         drop_zero_std=filt.drop_zero_std)


def shape_and_filter(trajs: list[Trajectory], cfg, vocab_size: int
                     ) -> tuple[list[Trajectory], CreditBatch, dict[str, float]]:
    """Stages 1 and 2, as every objective begins: the trajectories the update trains on, their (shaped) rewards
    as a :class:`CreditBatch`, and the stages' metrics."""
    batch, metrics = credit_batch(trajs, cfg, vocab_size)
    keep, filter_metrics = select_groups(batch, cfg.filter)
    metrics.update(filter_metrics)
    kept = [t for t, k in zip(trajs, keep.tolist()) if k]
    return kept, batch.select(keep), metrics


# ---- estimators: CreditBatch -> (advantages [N, T], value targets [N, T] or None) ----------------------------

def _broadcast(adv: Tensor, batch: CreditBatch) -> Tensor:
    return adv.to(torch.float64)[:, None] * batch.mask


def grpo_steps(batch: CreditBatch, algo):
    return _broadcast(grpo_advantages(batch.episode_rewards, batch.group_ids, norm=algo.norm), batch), None


def rloo_steps(batch: CreditBatch, algo):
    return _broadcast(rloo_advantages(batch.episode_rewards, batch.group_ids), batch), None


def gigpo_steps(batch: CreditBatch, algo):
    g = algo.gigpo
    ids = anchor_ids(batch.anchor_keys, batch.group_ids, mode=g.anchor, threshold=g.similarity)
    anchors, _ = padded(ids, dtype=torch.long)
    adv = gigpo_advantages(batch.episode_rewards, batch.group_ids, batch.step_rewards, batch.mask, anchors,
                           gamma=algo.gamma, omega=g.omega, norm=algo.norm, weighting=g.weighting)
    return adv, None


def ppo_steps(batch: CreditBatch, algo):
    if batch.values is None:
        raise ValueError("ppo needs the rollout-time values (CreditBatch.values)")
    adv, ret = gae_advantages(batch.step_rewards, batch.values, batch.mask, gamma=algo.gamma, lam=algo.ppo.lam)
    if algo.ppo.whiten:
        adv = whiten(adv, batch.mask)
    return adv, ret


@dataclass(frozen=True)
class Estimator:
    """An advantage estimator: ``steps(batch, algo) -> (advantages [N, T], value targets [N, T] or None)``.
    ``values``: it needs V(s_t) of every turn at rollout time (``CreditBatch.values``), read by the value head
    that the config section of its name sets (``algo.ppo.value_head``)."""

    steps: Callable
    values: bool = False


ESTIMATORS = {"grpo": Estimator(grpo_steps), "rloo": Estimator(rloo_steps), "gigpo": Estimator(gigpo_steps),
              "ppo": Estimator(ppo_steps, values=True)}


def attributed_steps(batch: CreditBatch, base: Tensor, alpha: float) -> Tensor:
    """AgentEvolver's attribution-driven credit on any estimator: the step labels z-scored in their group, their
    suffix sums added to the estimator's own per-turn advantage, A'_t = A_t + α·Σ_{k≥t} r̃_k
    (``algos/attribution.py``, eqs. 1–3; for GRPO and RLOO, A_t is the outcome advantage R̃ on every turn)."""
    return fuse_turn_advantages(batch.step_labels, batch.mask, base, batch.group_ids, alpha=alpha)


def step_advantages(name: str, batch: CreditBatch, algo, attribution=None) -> tuple[Tensor, Tensor | None]:
    """Dispatch on ``algo.name``; unknown names raise a ConfigError listing the allowed ones. A batch with step
    labels gets attribution-driven credit (``attribution``: the config section, for α)."""
    if name not in ESTIMATORS:
        raise unknown_name("algo", name, ESTIMATORS)
    adv, returns = ESTIMATORS[name].steps(batch, algo)
    if batch.step_labels is not None:
        if attribution is None:
            raise ValueError("a batch with step labels needs the attribution section (for alpha)")
        # the labels shape the actor's credit only: a critic (PPO) still regresses on the environment's returns
        adv = attributed_steps(batch, adv, attribution.alpha)
    return adv, returns
