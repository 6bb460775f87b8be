"""RL math: advantages, reward shaping, filtering and losses as pure functions on torch tensors."""

from selfevolve.algos.advantages import (
    ADVANTAGES,
    compute_advantages,
    group_index,
    grpo_advantages,
    rloo_advantages,
)
from selfevolve.algos.attribution import attribution_advantages, fuse_step_rewards, group_zscore_steps, suffix_sums
from selfevolve.algos.filtering import filter_groups, group_spread
from selfevolve.algos.gae import gae_advantages, whiten
from selfevolve.algos.gigpo import anchor_ids, discounted_returns, gigpo_advantages
from selfevolve.algos.loss import entropy_from_logits, kl_penalty, masked_mean, ppo_clip_loss, value_loss
from selfevolve.algos.selaur import shape_failures, token_uncertainty, trajectory_uncertainty

__all__ = [
    "ADVANTAGES",
    "anchor_ids",
    "attribution_advantages",
    "compute_advantages",
    "discounted_returns",
    "entropy_from_logits",
    "filter_groups",
    "fuse_step_rewards",
    "gae_advantages",
    "gigpo_advantages",
    "group_index",
    "group_zscore_steps",
    "group_spread",
    "grpo_advantages",
    "kl_penalty",
    "masked_mean",
    "ppo_clip_loss",
    "rloo_advantages",
    "shape_failures",
    "suffix_sums",
    "token_uncertainty",
    "trajectory_uncertainty",
    "value_loss",
    "whiten",
]
