"""SELAUR: self-evolving, uncertainty-aware rewards for failed trajectories (seed 000, restated in
``shared/design/methods.md`` §3).

A failed episode normally teaches nothing beyond "not this": every step gets 0. SELAUR gives a failure a dense
reward from the model's own token uncertainty, so among failures the policy is pushed towards the steps it was
unsure about (explore there) and away from confident mistakes. The statistics come from the rollout (entropy,
top-1 and top-2 probabilities are recorded per generated token), so no extra forward pass is needed.

Token level (seed eqs. 1–4), from the next-token distribution p over the vocabulary V:

    u_ent = −Σ_c p_c log p_c / log|V|            normalised entropy, in [0, 1]
    u_lc  = 1 − p_(1)                             least confidence (p_(1): the largest probability, or — an
                                                  option — the sampled token's probability)
    u_mar = σ((1 − (p_(1) − p_(2))) / s)           margin, in [σ(0), σ(1/s)] = [0.5, 0.73] for s = 1
    u     = w_ent·u_ent + w_lc·u_lc + w_mar·u_mar  (weights normalised to sum 1, so u ∈ [0, 1])

Step and trajectory level (eqs. 5–6): u_t = mean_j u_{t,j};  U(τ) = Σ_t λ^{T−t} u_t / Σ_t λ^{T−t}.

Failure-aware shaping (eqs. 7–8): successful trajectories keep their rewards; a failed one gets
r̃ = U(τ) and step rewards r̃_t = w·û_t, w = 0.95. Our precise reading [ours]:

- û_t = λ^{T−t} u_t / Σ_s λ^{T−s} is step t's share of U, so a failure's step rewards sum to w·U(τ): step
  returns (GiGPO, GAE) and the trajectory reward agree, and neither can reach a success;
- the seed assumes 0/1 rewards. For any reward scale, failures are placed in a band just below the lowest
  success of the batch, b (or ``success_reward`` when the batch has none):
  r̃ = b − gap·(1 − w·U(τ)), the offset (b − gap) carried by the last step. With b = gap = 1 this is exactly the
  seed's w·U. Since U ≤ 1 and w < 1, r̃ < b: **every failure is strictly below every success**, whatever
  the environment's rewards (``test_selaur_failures_below_successes`` checks it on every built-in world).
  The trajectory reward uses w·U rather than the seed's bare U for the same reason: U can come arbitrarily
  close to 1.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

LC_MODES = ("top1", "sampled")


def token_uncertainty(
    entropy: Tensor,
    top1: Tensor,
    top2: Tensor,
    vocab_size: int,
    *,
    w_entropy: float = 1 / 3,
    w_least_confidence: float = 1 / 3,
    w_margin: float = 1 / 3,
    margin_scale: float = 1.0,
    sampled_p: Tensor | None = None,
) -> Tensor:
    """u per token (seed eqs. 1–4) from the recorded statistics: ``entropy`` in nats, ``top1``/``top2`` the two
    largest probabilities; ``sampled_p`` (optional) replaces p_(1) in least confidence. A weight of 0 switches
    its metric off (ablation); the weights are normalised to sum 1."""
    total = w_entropy + w_least_confidence + w_margin
    if min(w_entropy, w_least_confidence, w_margin) < 0 or total <= 0:
        raise ValueError("SELAUR metric weights must be ≥ 0 with a positive sum")
    if margin_scale <= 0:
        raise ValueError("SELAUR margin_scale must be > 0")
    u_ent = entropy / math.log(vocab_size)
    u_lc = 1.0 - (top1 if sampled_p is None else sampled_p)
    u_mar = torch.sigmoid((1.0 - (top1 - top2)) / margin_scale)
    return (w_entropy * u_ent + w_least_confidence * u_lc + w_margin * u_mar) / total


def late_weights(mask: Tensor, lam: float) -> Tensor:
    """λ^{T_i − t} at each real step (t = 1..T_i, so the last step gets 1), normalised per row to sum 1; [N, T]."""
    mask = mask.to(torch.float64)
    T_i = mask.sum(1, keepdim=True)
    t = torch.arange(1, mask.shape[1] + 1, dtype=torch.float64, device=mask.device)[None]
    w = torch.pow(torch.as_tensor(lam, dtype=torch.float64), (T_i - t).clamp(min=0)) * mask
    return w / w.sum(1, keepdim=True).clamp(min=1e-300)


def trajectory_uncertainty(step_u: Tensor, mask: Tensor, lam: float = 0.9) -> Tensor:
    """U(τ) = Σ_t λ^{T−t} u_t / Σ_t λ^{T−t} (seed eq. 6) per row of ``step_u`` [N, T]; padding ignored."""
    return (late_weights(mask, lam) * step_u.to(torch.float64)).sum(1)


def shape_failures(
    step_rewards: Tensor,
    step_u: Tensor,
    mask: Tensor,
    success: Tensor,
    *,
    lam: float = 0.9,
    fail_weight: float = 0.95,
    gap: float = 1.0,
    success_reward: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Failure-aware reward shaping (seed eqs. 7–8, with the band of the module docstring).

    Inputs [N, T] (``success`` [N] bool). Returns ``(shaped_step_rewards [N, T], shaped_episode_rewards [N])``;
    successful rows are returned unchanged (episode reward = Σ_t r_t)."""
    if not 0 < fail_weight < 1:
        raise ValueError("SELAUR fail_weight must be in (0, 1) so that failures stay below successes")
    if gap <= 0:
        raise ValueError("SELAUR gap must be > 0")
    m = mask.to(torch.float64)
    r = step_rewards.to(torch.float64) * m
    success = success.bool()
    episode = r.sum(1)
    b = episode[success].min() if success.any() else torch.as_tensor(success_reward, dtype=torch.float64)
    share = late_weights(mask, lam) * step_u.to(torch.float64)  # û_t; sums to U(τ) per row
    fail_steps = fail_weight * gap * share
    last = (m.cumsum(1) == m.sum(1, keepdim=True)) & (m > 0)  # each row's last real step
    fail_steps = fail_steps + (b - gap) * last
    shaped_steps = torch.where(success[:, None], r, fail_steps * m)
    return shaped_steps, shaped_steps.sum(1)
