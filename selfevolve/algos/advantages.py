"""Group-relative advantage estimators (outcome rewards, one scalar per trajectory).

Every estimator has the signature ``(rewards, group_ids, **opts) -> Tensor[N]``: ``rewards`` is a
float tensor [N], ``group_ids`` labels which trajectories share a prompt (any hashable ids).
"""

from __future__ import annotations

import torch
from torch import Tensor

from selfevolve.errors import unknown_name

NORMS = ("mean_std", "mean")


def group_index(group_ids) -> torch.LongTensor:
    """Map arbitrary group ids to 0..K-1 in order of first appearance."""
    seen: dict = {}
    return torch.tensor([seen.setdefault(g, len(seen)) for g in group_ids], dtype=torch.long)


def _group_stats(rewards: Tensor, group_ids) -> tuple[Tensor, Tensor, Tensor]:
    """Per trajectory: its group's size n_G and mean R̄_G, and its group's unbiased variance
    Σ(R − R̄_G)² / (n_G − 1) (gathered back to [N]; 0 for a singleton).

    Two passes, in float64: the mean first, then the squared deviations from it. The one-pass form
    (ΣR² − n·R̄²) cancels catastrophically when |R̄| ≫ std: for 8 rewards of mean 1000 and std 1e-5 it gave
    advantages off by 11 (tests/test_algos.py)."""
    idx = group_index(group_ids).to(rewards.device)
    if idx.numel() != rewards.numel():
        raise ValueError(f"got {rewards.numel()} rewards but {idx.numel()} group ids")
    k = int(idx.max()) + 1 if idx.numel() else 0
    r = rewards.to(torch.float64)
    zeros = torch.zeros(k, dtype=r.dtype, device=r.device)
    count = zeros.index_add(0, idx, torch.ones_like(r))
    mean = zeros.index_add(0, idx, r) / count.clamp(min=1)
    dev = r - mean[idx]
    var = zeros.index_add(0, idx, dev * dev) / (count - 1).clamp(min=1)
    return count[idx], mean[idx], var[idx]


def grpo_advantages(rewards: Tensor, group_ids, norm: str = "mean_std", eps: float = 1e-6, **_) -> Tensor:
    """GRPO advantage (Shao et al. 2024, DeepSeekMath eq. 3 outcome supervision):

        A_i = (R_i − mean_G R) / (std_G R + eps)      norm="mean_std"
        A_i =  R_i − mean_G R                          norm="mean"   (Dr.GRPO, Liu et al. 2025)

    std_G is the unbiased sample std (Bessel, as torch.std / verl). A singleton group has no
    baseline to compare against, so its advantage is 0.
    """
    if norm not in NORMS:
        raise ValueError(f"unknown advantage norm {norm!r}; allowed: {', '.join(NORMS)}")
    rewards = rewards.reshape(-1)
    n, mean, var = _group_stats(rewards, group_ids)
    adv = rewards.to(torch.float64) - mean
    if norm == "mean_std":
        adv = adv / (var.sqrt() + eps)
    adv = torch.where(n > 1, adv, torch.zeros_like(adv))
    return adv.to(rewards.dtype)


def rloo_advantages(rewards: Tensor, group_ids, **_) -> Tensor:
    """RLOO advantage (Kool et al. 2019; Ahmadian et al. 2024 eq. 5):

        A_i = R_i − 1/(n−1) Σ_{j≠i, j∈G} R_j

    The leave-one-out baseline is independent of R_i, so the estimator stays unbiased.
    Singleton groups get 0. Options such as ``norm`` are ignored.
    """
    rewards = rewards.reshape(-1)
    n, mean, _ = _group_stats(rewards, group_ids)
    r = rewards.to(torch.float64)
    # the mean of the others, (n·R̄ − R_i)/(n − 1), written as R̄ + (R̄ − R_i)/(n − 1) to avoid cancelling n·R̄
    baseline = mean + (mean - r) / (n - 1).clamp(min=1)
    adv = torch.where(n > 1, r - baseline, torch.zeros_like(r))
    return adv.to(rewards.dtype)


ADVANTAGES = {"grpo": grpo_advantages, "rloo": rloo_advantages}


def compute_advantages(name: str, rewards: Tensor, group_ids, **opts) -> Tensor:
    """Dispatch on ``algo.name``; unknown names raise a ConfigError listing the allowed ones."""
    if name not in ADVANTAGES:
        raise unknown_name("algo", name, ADVANTAGES)
    return ADVANTAGES[name](rewards, group_ids, **opts)
