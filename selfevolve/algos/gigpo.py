"""GiGPO: group-in-group policy optimisation (Feng et al. 2025, arXiv 2505.10978), step-level credit from
anchor states.

Two levels of group baseline, both computed on plain tensors:

- episode level (eq. 4): A^E_i = (R_i − mean_G R) / F, R_i the episode's total reward;
- step level (eq. 6–8): inside one episode group, every step taken from the *same state* forms an anchor
  group; with discounted step returns R_t = r_t + γ R_{t+1} (eq. 5), A^S_t = (R_t − mean_anchor R) / F;
- combined (eq. 9): A_t = A^E_i + ω · A^S_t, broadcast to the step's action tokens.

F = std + ε (``norm="mean_std"``, the paper's mean_std_norm) or 1 (``norm="mean"``, mean_norm).

Our choices where verl-agent's reference code differs, each with a reason:

- anchor groups are keyed by the environment's ``state_key()`` (the true state) rather than the observation
  text, which can differ for the same state (turn counters) or coincide for different ones;
- statistics are per *trajectory* by default (``weighting="trajectory"``): a trajectory that loops through a
  state five times weighs as much in that state's baseline as one that passes once. Each sample gets weight
  1/c, c = how often its trajectory visits the anchor state; mean and unbiased variance use those weights
  (reliability weights: V = Σw(x−μ)² / (Σw − Σw²/Σw), which is the ordinary n−1 variance when all w = 1).
  ``weighting="step"`` gives every step sample weight 1, as verl-agent does;
- no padding enters any statistic, and grouping is by hashing (one pass), not by pairwise comparison — except
  in the optional ``similarity`` anchor mode, which compares each key with the representatives of the clusters
  already formed in its episode group.
"""

from __future__ import annotations

import difflib

import torch
from torch import Tensor

from selfevolve.algos.advantages import NORMS, grpo_advantages, group_index

ANCHOR_MODES = ("state", "observation", "similarity")
WEIGHTINGS = ("trajectory", "step")


def discounted_returns(rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """R_t = r_t + γ·R_{t+1} within each row (GiGPO eq. 5); positions where ``mask`` is 0 are padding and
    contribute nothing. ``rewards``, ``mask``: [N, T]; steps of an episode are left-aligned."""
    mask = mask.to(rewards.dtype)
    out = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in range(rewards.shape[1] - 1, -1, -1):  # O(N·T): T is the (small) number of turns
        running = (rewards[:, t] + gamma * running) * mask[:, t]
        out[:, t] = running
    return out


def anchor_ids(keys: list[list[str]], group_ids, mode: str = "state", threshold: float = 0.95) -> list[list[int]]:
    """Anchor-group index of every step: steps of the same episode group with equal keys share one.

    ``keys[i][t]``: the state key of trajectory i's step t. ``mode="similarity"`` merges keys whose
    difflib ratio with a cluster's first key is ≥ ``threshold`` (verl-agent's optional mode), which costs one
    comparison per (step, cluster of its group); the exact modes are one dictionary lookup per step.
    """
    gidx = group_index(group_ids).tolist()
    table: dict = {}
    if mode not in ANCHOR_MODES:
        raise ValueError(f"unknown anchor mode {mode!r}; allowed: {', '.join(ANCHOR_MODES)}")
    if mode != "similarity":
        return [[table.setdefault((g, k), len(table)) for k in row] for g, row in zip(gidx, keys)]
    reps: dict[int, list[tuple[str, int]]] = {}  # per episode group: (first key, anchor id) of each cluster
    n_anchors = 0
    out = []
    for g, row in zip(gidx, keys):
        ids = []
        for k in row:
            hit = table.get((g, k))
            if hit is None:
                hit = next((cid for rep, cid in reps.setdefault(g, [])
                            if difflib.SequenceMatcher(None, rep, k).ratio() >= threshold), None)
                if hit is None:
                    hit, n_anchors = n_anchors, n_anchors + 1
                    reps[g].append((k, hit))
                table[(g, k)] = hit
            ids.append(hit)
        out.append(ids)
    return out


def weighted_group_stats(values: Tensor, ids: Tensor, weights: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per element: its group's weighted mean, unbiased weighted variance (reliability weights) and the number
    of samples in the group. ``values``, ``ids``, ``weights``: flat [M]; ``ids`` in 0..K-1."""
    v = values.to(torch.float64)
    w = weights.to(torch.float64)
    k = int(ids.max()) + 1 if ids.numel() else 0
    zeros = torch.zeros(k, dtype=torch.float64, device=v.device)
    sw = zeros.index_add(0, ids, w)
    sw2 = zeros.index_add(0, ids, w * w)
    swx = zeros.index_add(0, ids, w * v)
    n = zeros.index_add(0, ids, torch.ones_like(w))
    mean = swx / sw.clamp(min=1e-300)
    dev = v - mean[ids]
    swd = zeros.index_add(0, ids, w * dev * dev)
    denom = sw - sw2 / sw.clamp(min=1e-300)
    var = torch.where(denom > 1e-12, swd / denom.clamp(min=1e-12), torch.zeros_like(swd))
    return mean[ids], var.clamp(min=0)[ids], n[ids]


def gigpo_advantages(
    episode_rewards: Tensor,
    group_ids,
    step_rewards: Tensor,
    step_mask: Tensor,
    anchors: Tensor,
    *,
    gamma: float = 0.95,
    omega: float = 1.0,
    norm: str = "mean_std",
    weighting: str = "trajectory",
    eps: float = 1e-6,
) -> Tensor:
    """Per-step GiGPO advantages A_t = A^E + ω·A^S (eq. 9), as a [N, T] tensor (0 at padding).

    ``episode_rewards`` [N]: R_i (eq. 4 input); ``step_rewards``/``step_mask`` [N, T]: r_t and which steps exist;
    ``anchors`` [N, T] long: anchor-group ids from :func:`anchor_ids` (unique across episode groups). A
    singleton anchor group (one step sample) gets A^S = 0: there is nothing to compare it with.
    """
    if norm not in NORMS:
        raise ValueError(f"unknown advantage norm {norm!r}; allowed: {', '.join(NORMS)}")
    if weighting not in WEIGHTINGS:
        raise ValueError(f"unknown GiGPO weighting {weighting!r}; allowed: {', '.join(WEIGHTINGS)}")
    N, T = step_rewards.shape
    mask = step_mask.bool()
    a_ep = grpo_advantages(episode_rewards.to(torch.float64), group_ids, norm=norm, eps=eps)
    returns = discounted_returns(step_rewards.to(torch.float64), mask, gamma)

    flat_ids = anchors[mask].long()
    flat_ret = returns[mask]
    if weighting == "trajectory":
        # weight 1/c: c = visits of this trajectory to this anchor state (counted by hashing (anchor, row))
        rows = torch.arange(N, device=anchors.device)[:, None].expand(N, T)[mask]
        pair = group_index(list(zip(flat_ids.tolist(), rows.tolist())))
        visits = torch.zeros(int(pair.max()) + 1 if pair.numel() else 0, dtype=torch.float64).index_add(
            0, pair, torch.ones(pair.numel(), dtype=torch.float64))
        weights = 1.0 / visits[pair]
    else:
        weights = torch.ones_like(flat_ret)
    dense = group_index(flat_ids.tolist())  # anchor ids may be sparse; index_add wants 0..K-1
    mean, var, n = weighted_group_stats(flat_ret, dense, weights)
    a_step = flat_ret - mean
    if norm == "mean_std":
        a_step = a_step / (var.sqrt() + eps)
    a_step = torch.where(n > 1, a_step, torch.zeros_like(a_step))

    out = torch.zeros(N, T, dtype=torch.float64, device=step_rewards.device)
    out[mask] = a_step * omega
    out = out + a_ep[:, None] * mask
    return out.to(step_rewards.dtype if step_rewards.is_floating_point() else torch.float32)
