"""Self-AC math (seed 001; ``shared/design/methods.md`` §4): TD(1..n) critic targets and the actor's advantage.

Episode vectors are padded to [N, K] with K ≥ max turns + 1: slot k < n_i holds turn k of episode i (the state
s_k before action a_k, and the reward r_k from s_k to s_{k+1}); slot n_i holds the final state s_n, which is
terminal: nothing follows it, so its value is 0 by definition. Everything here is a pure function of tensors.
"""

from __future__ import annotations

import torch
from torch import Tensor

from selfevolve.algos.gigpo import discounted_returns
from selfevolve.algos.loss import masked_mean


def td_target(values: Tensor, rewards: Tensor, turn_mask: Tensor, gamma: float, n: int) -> Tensor:
    """The n-step TD target of every slot (seed, "Self-AC 的训练说明 Part 3"):

        y^(n)_k = Σ_{i<n} γ^i r_{k+i} + γ^n V(s_{k+n})

    with r = 0 and V = 0 at and beyond the terminal slot n_i (terminal value 0, not the head's estimate of it:
    the return after the end is known exactly). ``values`` is detached here — targets carry no gradient.
    ``values``, ``rewards``: [N, K]; ``turn_mask`` [N, K]: True at slots k < n_i (real turns).
    """
    m = turn_mask.to(values.dtype)
    r = rewards.to(values.dtype) * m
    boot = values.detach() * m
    N, K = r.shape
    pad = torch.zeros(N, n, dtype=values.dtype, device=values.device)
    r_ext, v_ext = torch.cat([r, pad], 1), torch.cat([boot, pad], 1)
    y = torch.zeros_like(r)
    for i in range(n):
        y = y + gamma**i * r_ext[:, i: i + K]
    return y + gamma**n * v_ext[:, n: n + K]


def critic_loss(values: Tensor, rewards: Tensor, turn_mask: Tensor, value_mask: Tensor, gamma: float,
                td_max: int = 5) -> tuple[Tensor, dict[str, float]]:
    """Loss_Critic = (1/td_max) Σ_{n=1..td_max} mean_k (V(s_k) − y^(n)_k)² over the slots in ``value_mask``
    (every state that has a critic prompt: s_0..s_{n-1}, and s_n when its prompt was built).

    The seed writes ‖·‖² (a sum); the mean keeps the scale independent of the batch's size. Returns the loss
    and the TD(1) and TD(td_max) terms for logging."""
    losses = []
    for n in range(1, td_max + 1):
        y = td_target(values, rewards, turn_mask, gamma, n)
        losses.append(masked_mean((values - y) ** 2, value_mask))
    loss = torch.stack(losses).mean()
    return loss, {"loss/td1": float(losses[0].detach()), f"loss/td{td_max}": float(losses[-1].detach())}


def returns_and_advantages(values: Tensor, rewards: Tensor, turn_mask: Tensor, gamma: float) -> tuple[Tensor, Tensor]:
    """R_k = Σ_i γ^i r_{k+i} (the discounted return from s_k) and the actor's A_k = R_k − V(s_k).detach()
    (seed, Part 4), both [N, K] and 0 outside ``turn_mask``."""
    m = turn_mask.to(values.dtype)
    R = discounted_returns(rewards.to(values.dtype), m, gamma)
    return R, (R - values.detach()) * m


def turn_logprobs(token_logprobs: Tensor, token_turn: Tensor, n_slots: int) -> Tensor:
    """Σ of the token log-probs of each turn: log π(a_k | s_k) of the whole action, for the seed's per-turn
    probability ratio. ``token_turn`` [M] is each token's flat slot index (episode·K + k); returns [n_slots]."""
    out = torch.zeros(n_slots, dtype=token_logprobs.dtype, device=token_logprobs.device)
    return out.index_add(0, token_turn, token_logprobs)


def returns_minus_values(rewards: list[float], values: list[float], gamma: float,
                         label_credit: list[float] | None = None) -> list[float]:
    """Self-AC's advantage A_k = R_k − V(s_k), R_k the discounted return from turn k (as
    :func:`returns_and_advantages`), for one episode in plain lists, rounded for the trajectory's record;
    ``values`` may hold V of the final state too. ``label_credit``: the step labels' α·Σ_{j≥k} r̃_j per turn,
    added (reward.attribution)."""
    out, running = [0.0] * len(rewards), 0.0
    for k in range(len(rewards) - 1, -1, -1):
        running = rewards[k] + gamma * running
        a = running - (values[k] if k < len(values) else 0.0)
        out[k] = round(a + label_credit[k] if label_credit else a, 5)
    return out
