"""RL math: advantages and policy losses as pure functions on torch tensors."""

from selfevolve.algos.advantages import (
    ADVANTAGES,
    compute_advantages,
    group_index,
    grpo_advantages,
    rloo_advantages,
)
from selfevolve.algos.loss import entropy_from_logits, kl_penalty, masked_mean, ppo_clip_loss

__all__ = [
    "ADVANTAGES",
    "compute_advantages",
    "entropy_from_logits",
    "group_index",
    "grpo_advantages",
    "kl_penalty",
    "masked_mean",
    "ppo_clip_loss",
    "rloo_advantages",
]
