"""Turn-level generalised advantage estimation (Schulman et al. 2016, arXiv 1506.02438) for PPO with a critic.

A "time step" is one turn: the value V(s_t) is read at the last prompt token of turn t (the state the action is
taken in), r_t is the environment's reward for the turn. The episode ends after its last real turn, so the value
beyond it is 0 (a turn limit is treated as the end of the task: the prompt does not show a clock the value could
use to tell the two apart).

    δ_t = r_t + γ·V(s_{t+1}) − V(s_t)                     (eq. 11 of the paper: TD residual)
    A_t = Σ_{l≥0} (γλ)^l δ_{t+l}                          (eq. 16: GAE(γ, λ))
    target_t = A_t + V(s_t)                                (the λ-return, the value head's regression target)
"""

from __future__ import annotations

import torch
from torch import Tensor


def gae_advantages(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 0.95, lam: float = 0.95
                   ) -> tuple[Tensor, Tensor]:
    """``(advantages, returns)`` [N, T] from per-turn ``rewards``, ``values`` and a 0/1 ``mask`` of real turns
    (left-aligned). Vectorised over episodes; one backward pass over the (few) turns."""
    m = mask.to(torch.float64)
    r = rewards.to(torch.float64) * m
    v = values.to(torch.float64) * m
    N, T = r.shape
    adv = torch.zeros_like(r)
    next_v = torch.zeros(N, dtype=torch.float64, device=r.device)
    running = torch.zeros_like(next_v)
    for t in range(T - 1, -1, -1):
        delta = r[:, t] + gamma * next_v - v[:, t]
        running = (delta + gamma * lam * running) * m[:, t]
        adv[:, t] = running
        next_v = v[:, t]
    return adv.to(rewards.dtype), (adv + v).to(rewards.dtype) * m.to(rewards.dtype)


def whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(x − mean) / std over the real entries (PPO's usual advantage normalisation); padding stays 0."""
    m = mask.bool()
    vals = x[m].to(torch.float64)
    if vals.numel() < 2:
        return x * m
    out = torch.zeros_like(x)
    out[m] = ((vals - vals.mean()) / (vals.std() + eps)).to(x.dtype)
    return out
