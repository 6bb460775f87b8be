"""The imitation term of ``selfevolve evolve``: replayed successes as weighted behaviour cloning, with a clipped
off-policy ratio (``evolve/imitation.py`` builds its rows; the update adds it beside the RL loss).

Expert iteration keeps the agent's own successful trajectories and trains on them by maximum likelihood
(Anthony et al. 2017; RAGEN's 0.5B model reached 74.6 on Sokoban after SFT on solver paths against 20.3 after RL).
A replayed trajectory was sampled by an older policy μ, so each token's log-likelihood is weighted by the
truncated importance ratio of the current policy to μ, as V-trace truncates its weights (Espeholt et al. 2018,
eq. 1: c̄ = min(c, ρ)):

    ρ_t  = exp(log π_θ(a_t | s_t) − log μ(a_t | s_t))          (no gradient through ρ)
    w_t  = w_row · min(ρ_t, c)
    L_im = − Σ_t m_t · w_t · log π_θ(a_t | s_t) / Σ_t m_t

The truncation at c bounds a token's weight (an action the policy has grown much likelier than μ was cannot
dominate), and ρ < 1 lowers the weight of what the policy has moved away from, so stale successes fade rather
than pull the policy back. A demonstration with no sampling policy (a verified reference path) has ρ = 1:
plain behaviour cloning. ``w_row`` is the row's weight (``evolve.imitation_weight``). The total loss of an
update is L_RL + L_im.
"""

from __future__ import annotations

import torch
from torch import Tensor


def truncated_ratio(logprobs: Tensor, behaviour_logprobs: Tensor, clip: float) -> Tensor:
    """min(exp(log π − log μ), c), per token, without gradient; a NaN behaviour log-prob (no sampling policy:
    a demonstration) gives ρ = 1."""
    with torch.no_grad():
        log_ratio = (logprobs.detach() - behaviour_logprobs).clamp(max=30.0)
        ratio = torch.where(torch.isnan(behaviour_logprobs), torch.ones_like(log_ratio), log_ratio.exp())
        return ratio.clamp(max=clip)


def imitation_loss(logprobs: Tensor, behaviour_logprobs: Tensor, weights: Tensor, clip: float = 1.0
                   ) -> tuple[Tensor, dict[str, float]]:
    """L_im over flat per-token tensors (every token carries loss): ``weights`` is w_row per token. Returns the
    loss (token mean) and detached statistics: the mean ratio before truncation is not kept, ``imitation/ratio``
    is the mean truncated ratio and ``imitation/clipped`` the share of tokens whose ratio was cut at c."""
    ratio = truncated_ratio(logprobs, behaviour_logprobs, clip)
    loss = -(weights * ratio * logprobs).sum() / max(logprobs.numel(), 1)
    with torch.no_grad():
        raw = torch.where(torch.isnan(behaviour_logprobs), torch.ones_like(logprobs),
                          (logprobs.detach() - behaviour_logprobs).clamp(max=30.0).exp())
        stats = {"imitation/ratio": float(ratio.mean()) if ratio.numel() else 0.0,
                 "imitation/clipped": float((raw > clip).float().mean()) if raw.numel() else 0.0,
                 "imitation/nll": float(-logprobs.detach().mean()) if logprobs.numel() else 0.0}
    return loss, stats
