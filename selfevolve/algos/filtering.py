"""Instance filtering (RAGEN / StarPO-S, Wang et al. 2025, arXiv 2504.20073 §4; TSR uses the same): keep only
the task groups whose rewards vary most before the update.

A group whose G rollouts all scored the same has zero advantage under any group baseline: it costs a forward
and backward pass and teaches nothing. More generally, low-spread groups carry little signal; RAGEN keeps the
top p = 25% by reward std, we default to p = 0.5 [ours] because on a CPU each rollout is dear.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from selfevolve.algos.advantages import group_index

FILTER_BY = ("std", "range")


def group_spread(rewards: Tensor, group_ids, by: str = "std") -> Tensor:
    """Per group (in order of first appearance): the population std of its rewards, or max − min."""
    if by not in FILTER_BY:
        raise ValueError(f"unknown filter.by {by!r}; allowed: {', '.join(FILTER_BY)}")
    idx = group_index(group_ids)
    r = rewards.to(torch.float64).reshape(-1)
    k = int(idx.max()) + 1 if idx.numel() else 0
    if by == "range":
        hi = torch.full((k,), -math.inf, dtype=torch.float64).scatter_reduce(0, idx, r, "amax")
        lo = torch.full((k,), math.inf, dtype=torch.float64).scatter_reduce(0, idx, r, "amin")
        return hi - lo
    n = torch.zeros(k, dtype=torch.float64).index_add(0, idx, torch.ones_like(r))
    mean = torch.zeros(k, dtype=torch.float64).index_add(0, idx, r) / n
    var = torch.zeros(k, dtype=torch.float64).index_add(0, idx, (r - mean[idx]) ** 2) / n
    return var.sqrt()


def filter_groups(rewards: Tensor, group_ids, keep: float = 1.0, by: str = "std", drop_zero_std: bool = False,
                  tol: float = 1e-9) -> tuple[Tensor, dict[str, float]]:
    """A bool mask [N] of the trajectories to train on, and metrics.

    The ``ceil(keep · K)`` groups with the largest spread are kept (ties: the earlier group first);
    ``drop_zero_std`` also drops every group whose rewards are all equal. ``filter/zero_std_frac`` is the
    fraction of groups with zero spread, reported whether or not they are dropped.
    """
    if not 0 < keep <= 1:
        raise ValueError(f"filter.keep must be in (0, 1], got {keep}")
    spread = group_spread(rewards, group_ids, by)
    K = spread.numel()
    zero = spread <= tol
    n_keep = math.ceil(keep * K - 1e-9)
    order = sorted(range(K), key=lambda g: (-float(spread[g]), g))
    kept = torch.zeros(K, dtype=torch.bool)
    kept[order[:n_keep]] = True
    if drop_zero_std:
        kept &= ~zero
    mask = kept[group_index(group_ids)]
    return mask, {
        "filter/zero_std_frac": float(zero.float().mean()) if K else 0.0,
        "filter/kept_groups": float(kept.sum()),
        "filter/kept_frac": float(kept.float().mean()) if K else 0.0,
    }
