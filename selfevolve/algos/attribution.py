"""Attribution-driven credit (AgentEvolver's self-attributing, ADCA-GRPO's "decouple" scheme; methods.md §7):
step labels and the episode outcome, each normalised within its task group, fused into step rewards and summed
into step advantages.

Notation: a task group G of n trajectories; trajectory i has T_i steps, step t labelled ℓ_{i,t} = +1 (GOOD) or
−1 (BAD); R̃_i is the trajectory's outcome advantage (GRPO's z-score of the episode reward in its group, or
RLOO's leave-one-out difference — the estimator the run names).

- eq. (1) equal-trajectory-weight group statistics of the labels, then the z-score:
      μ_G  = 1/n Σ_i (1/T_i) Σ_t ℓ_{i,t}
      σ²_G = 1/n Σ_i (1/T_i) Σ_t (ℓ_{i,t} − μ_G)²
      r̃_{i,t} = (ℓ_{i,t} − μ_G) / (σ_G + ε)
- eq. (2) fusion: r̂_{i,t} = α·r̃_{i,t} + 1[t = T_i]·R̃_i
- eq. (3) advantage: A_{i,t} = Σ_{k ≥ t} r̂_{i,k}  (undiscounted suffix sum), broadcast to step t's tokens.

Since the outcome term sits on the last step, which every suffix holds, (2)–(3) read A_{i,t} = R̃_i + α·Σ_{k≥t} r̃_{i,k}:
the outcome advantage plus the labels' suffix sum. An estimator whose advantage is already per turn (GiGPO's
A^E + ω·A^S, PPO's GAE, Self-AC's R_k − V(s_k)) takes the same form with its own A_{i,t} in place of R̃_i
(:func:`fuse_turn_advantages`); for GRPO and RLOO, whose A_{i,t} = R̃_i on every turn, it is (2)–(3) exactly.

Why each trajectory weighs 1/n in (1), whatever its length: pooled over steps, one long looping trajectory of
BAD steps would set the group's mean by itself. μ_G is the mean of the trajectory means in both the seed's
wording ("first the mean attribution of each trajectory, then mean and std over those") and AgentEvolver's code
(``equal_trajectory_weight=True``, its default). σ_G is not the same in the two:

- the seed's literal σ is the standard deviation of the n trajectory means, √(1/n Σ_i (m_i − μ_G)²);
- the σ used here, as AgentEvolver's ``_group_zscore_on_steps`` computes it, is the step deviations pooled with
  each step weighing 1/T_i (eq. 1 above).

They differ whenever labels vary within a trajectory. The literal form is 0 for a lone trajectory (n = 1) and
for any group whose trajectories have equal means, however mixed their steps: every r̃ would then be 0 and the
labels would teach nothing, though GOOD and BAD steps are exactly what they should contrast. The step-weighted
form is 0 only when every label of the group agrees. σ_G is the population form (divided by n, not n − 1). A
group whose labels all agree has σ_G = 0 and every r̃ = 0: the labels carry no contrast, the outcome alone
remains.

All functions work on padded [N, T] tensors with a [N, T] bool mask of the real steps (left-aligned); padding
never enters a statistic and comes out 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from selfevolve.algos.advantages import group_index


def group_zscore_steps(labels: Tensor, mask: Tensor, group_ids, eps: float = 1e-6) -> Tensor:
    """r̃ of eq. (1): ``labels`` [N, T] (+1 / −1) z-scored within each task group, every trajectory weighing
    equally. Trajectories without steps take no part in their group's statistics."""
    m = mask.to(torch.float64)
    x = labels.to(torch.float64) * m
    idx = group_index(group_ids).to(x.device)
    k = int(idx.max()) + 1 if idx.numel() else 0
    steps = m.sum(1)  # T_i
    has = (steps > 0).to(torch.float64)
    zeros = torch.zeros(k, dtype=torch.float64, device=x.device)
    n = zeros.index_add(0, idx, has).clamp(min=1)  # trajectories with steps, per group
    traj_mean = x.sum(1) / steps.clamp(min=1)
    mu = (zeros.index_add(0, idx, traj_mean * has) / n)[idx]  # μ_G, gathered back to [N]
    dev = (x - mu[:, None]) * m
    traj_var = (dev * dev).sum(1) / steps.clamp(min=1)
    sigma = (zeros.index_add(0, idx, traj_var * has) / n).sqrt()[idx, None]  # σ_G
    return torch.where(sigma > 0, dev / (sigma + eps), torch.zeros_like(dev))


def fuse_step_rewards(step_z: Tensor, mask: Tensor, outcome: Tensor, alpha: float) -> Tensor:
    """r̂ of eq. (2): α·r̃ on every step, plus the outcome advantage R̃ [N] on each trajectory's last step."""
    m = mask.to(torch.float64)
    fused = alpha * step_z.to(torch.float64) * m
    steps = mask.sum(1).long()
    rows = torch.nonzero(steps > 0).flatten()
    fused[rows, steps[rows] - 1] += outcome.to(torch.float64)[rows]
    return fused


def suffix_sums(rewards: Tensor, mask: Tensor) -> Tensor:
    """A of eq. (3): A_t = Σ_{k≥t} r̂_k within each row (no discount); padding stays 0."""
    r = rewards.to(torch.float64) * mask.to(torch.float64)
    return r.flip(1).cumsum(1).flip(1) * mask.to(torch.float64)


def label_returns(labels: Tensor, mask: Tensor, group_ids, alpha: float, eps: float = 1e-6) -> Tensor:
    """α·Σ_{k≥t} r̃_{i,k} [N, T]: the labels' part of the attributed advantage (eqs. 1 and 3 without the outcome),
    what an estimator that computes its advantage inside its own update adds to it (Self-AC)."""
    return suffix_sums(alpha * group_zscore_steps(labels, mask, group_ids, eps) * mask.to(torch.float64), mask)


def fuse_turn_advantages(labels: Tensor, mask: Tensor, base: Tensor, group_ids, alpha: float = 0.2,
                         eps: float = 1e-6) -> Tensor:
    """Attribution fused with a per-turn advantage ``base`` [N, T] (any estimator's A_{i,t}):

        A'_{i,t} = A_{i,t} + α·Σ_{k≥t} r̃_{i,k}

    computed as eqs. (2)–(3) with the base's increments in the outcome's place,
    r̂_{i,t} = α·r̃_{i,t} + (A_{i,t} − A_{i,t+1}) (A beyond the last step = 0), whose suffix sums telescope to
    A'_{i,t}. For an episode-level base (A_{i,t} = R̃_i on every turn: GRPO, RLOO) the increments are 0 but
    R̃_i on the last step, so r̂ is eq. (2)'s and the result :func:`attribution_advantages`' to the last bit."""
    m = mask.to(torch.float64)
    a = base.to(torch.float64) * m
    following = torch.zeros_like(a)
    following[:, :-1] = a[:, 1:]
    fused = alpha * group_zscore_steps(labels, mask, group_ids, eps).to(torch.float64) * m + (a - following) * m
    return suffix_sums(fused, mask)


def attribution_advantages(labels: Tensor, mask: Tensor, outcome: Tensor, group_ids, alpha: float = 0.2,
                           eps: float = 1e-6) -> Tensor:
    """Step advantages [N, T] of eqs. (1)–(3) from step labels (+1 GOOD / −1 BAD) and outcome advantages R̃."""
    return suffix_sums(fuse_step_rewards(group_zscore_steps(labels, mask, group_ids, eps), mask, outcome, alpha),
                       mask)
