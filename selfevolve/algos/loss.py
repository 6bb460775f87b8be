"""Policy-gradient loss pieces on per-token tensors [B, T] with a 0/1 (or bool) mask."""

from __future__ import annotations

import torch
from torch import Tensor

KL_KINDS = ("kl", "abs", "mse", "low_var_kl")


def masked_mean(x: Tensor, mask: Tensor, dim=None) -> Tensor:
    """Σ(x·m) / Σm over ``dim`` (all elements if None); an all-masked slice gives 0, not NaN."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def _per_row(t, like: Tensor):
    """Broadcast a [B] tensor against [B, T]; floats and [B, T] tensors pass through."""
    if isinstance(t, Tensor) and t.dim() == 1 and like.dim() == 2:
        return t.unsqueeze(-1)
    return t


def ppo_clip_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high=0.28,
    dual_clip: float | None = 3.0,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped surrogate (Schulman et al. 2017 eq. 7) with asymmetric "clip-higher" bounds
    (DAPO, Yu et al. 2025 eq. 10) and dual clip (Ye et al. 2020 eq. 5), token-mean aggregated:

        ρ   = exp(logπθ − logπold)
        L   = max(−A·ρ, −A·clip(ρ, 1−ε_low, 1+ε_high))
        L   = min(L, −c·A)        only where A < 0    (c = dual_clip)
        loss = Σ_t m_t·L_t / Σ_t m_t   over every masked token of the batch

    ``advantages`` and ``clip_high`` may be per-token [B, T] or per-sequence [B]; ``clip_high`` may
    also be a float. Returns the scalar loss and detached stats.
    """
    advantages = _per_row(advantages, logprobs)
    clip_high = _per_row(clip_high, logprobs)
    mask = mask.to(logprobs.dtype)

    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    upper = 1.0 + clip_high
    if not isinstance(upper, Tensor):
        upper = torch.as_tensor(upper, dtype=ratio.dtype, device=ratio.device)
    clipped_ratio = torch.minimum(torch.clamp(ratio, min=1.0 - clip_low), upper)

    unclipped = -advantages * ratio
    clipped = -advantages * clipped_ratio
    loss_tok = torch.maximum(unclipped, clipped)
    clip_active = clipped > unclipped  # the pessimistic bound picked the clipped branch

    if dual_clip is not None:
        # for A < 0 an exploding ratio would give unbounded loss; cap it at c·|A|
        bound = -dual_clip * advantages
        dual_active = (advantages < 0) & (loss_tok > bound)
        loss_tok = torch.where(advantages < 0, torch.minimum(loss_tok, bound), loss_tok)
    else:
        dual_active = torch.zeros_like(clip_active)

    loss = masked_mean(loss_tok, mask)
    with torch.no_grad():
        stats = {
            "clip_frac": masked_mean(clip_active.to(mask.dtype), mask).item(),
            "dual_clip_frac": masked_mean(dual_active.to(mask.dtype), mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
            "approx_kl": masked_mean(-log_ratio, mask).item(),  # k1 estimate of KL(old‖new)
        }
    return loss, stats


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, kind: str = "low_var_kl") -> Tensor:
    """Per-token estimates of KL(πθ‖πref) from sampled tokens (Schulman 2020, "Approximating KL"):

        kl          k1 = logπ − logπref
        abs         |logπ − logπref|
        mse         k2 = ½(logπ − logπref)²
        low_var_kl  k3 = exp(logπref − logπ) − (logπref − logπ) − 1, clamped to [−10, 10] as verl does
    """
    diff = logprobs - ref_logprobs
    if kind == "kl":
        return diff
    if kind == "abs":
        return diff.abs()
    if kind == "mse":
        return 0.5 * diff.square()
    if kind == "low_var_kl":
        # clamp the log-ratio first so exp cannot overflow, then the value for stability
        r = torch.clamp(-diff, min=-20, max=20)
        return torch.clamp(torch.exp(r) - r - 1, min=-10, max=10)
    raise ValueError(f"unknown kl kind {kind!r}; allowed: {', '.join(KL_KINDS)}")


def entropy_from_logits(logits: Tensor) -> Tensor:
    """H = logsumexp(z) − Σ softmax(z)·z over the last dim (stable: no explicit log of probs)."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, clip: float | None = 0.2
               ) -> tuple[Tensor, dict[str, float]]:
    """Clipped value loss (the PPO reference implementation's, as in OpenAI baselines and verl), mean over turns:

        V_clip = V_old + clip(V − V_old, −ε, ε)
        L = ½ · max((V − target)², (V_clip − target)²)

    The clip keeps one update from moving a value estimate further than ε from where it was at rollout time
    (``clip=None`` gives the plain ½(V − target)²). Returns the loss and ``clip_frac``.
    """
    err = (values - returns).square()
    if clip is None:
        return 0.5 * err.mean(), {"vf_clip_frac": 0.0}
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    err_c = (clipped - returns).square()
    with torch.no_grad():
        frac = (err_c > err).float().mean().item() if err.numel() else 0.0
    return 0.5 * torch.maximum(err, err_c).mean(), {"vf_clip_frac": frac}
