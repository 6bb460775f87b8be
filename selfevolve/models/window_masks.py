"""Attention masks for models with sliding-window layers (Gemma 3), counted in positions, not cache columns.

transformers builds a sliding-window layer's mask from the 2-D padding mask by *column*: a query at column q sees
the keys at columns q - W < k <= q (W = ``config.sliding_window``). That equals the model's window, in positions,
only when no padding lies between a query and its keys. The rollout's cache holds padding in the middle of rows
(each turn's new tokens are left-padded to the batch's longest, and rows that stopped decoding get masked fillers:
``models/generation.py``), so past W columns a row would see fewer of its own tokens than the model does at
those positions — and fewer than the update sees, which encodes every row without padding inside (plain, not
as a tree: ``tree_attention.supports_tree``). A FrozenLake episode's cache reached 698 columns with Gemma's
W = 512 (2026-11-26).

:func:`layer_masks` gives such a model its masks itself, one per layer type, as transformers' models with
``config.layer_types`` accept them (a dict for ``attention_mask``): key k is seen by query q iff k is a real
token, k's column is at most q's, and, for a sliding layer, ``pos(q) - pos(k) < W``, where a column's position
is the number of real tokens before it (the position ids the generation loop gives them). A padding query sees
only itself (its output is never used; a query that sees nothing would give NaN, and NaN values at a padding
column poison every query that masks them, as 0 · NaN). Models without sliding-window layers get the 2-D mask
unchanged.
"""

from __future__ import annotations

import torch

SLIDING = "sliding_attention"


def has_sliding_layers(config) -> bool:
    return SLIDING in (getattr(config, "layer_types", None) or ()) and bool(getattr(config, "sliding_window", None))


def layer_masks(config, mask: torch.Tensor, queries: int):
    """The ``attention_mask`` to pass with ``mask [B, K]`` (1: real token; its last ``queries`` columns are the
    forward's inputs): ``mask`` itself, or for a model with sliding-window layers ``{layer type: bool [B, 1,
    queries, K]}``."""
    if not has_sliding_layers(config) or not set(config.layer_types) <= {"full_attention", SLIDING}:
        return mask
    real = mask.bool()
    K = mask.shape[1]
    pos = mask.cumsum(1) - 1  # [B, K]: a real column's position
    q_cols = torch.arange(K - queries, K, device=mask.device)
    k_cols = torch.arange(K, device=mask.device)
    full = real[:, None, :] & (k_cols[None, None, :] <= q_cols[None, :, None])  # [B, q, K]
    diff = pos[:, K - queries:, None] - pos[:, None, :]  # pos(q) - pos(k)
    sliding = full & (diff < config.sliding_window)
    own = (~real[:, K - queries:, None]) & (k_cols[None, None, :] == q_cols[None, :, None])
    masks = {"full_attention": (full | own)[:, None], SLIDING: (sliding | own)[:, None]}
    return {t: masks[t] for t in set(config.layer_types)}


def windowed(config, mask: torch.Tensor | None, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype):
    """The ``attention_mask`` to pass with a 4-D additive ``mask [B, 1, q, K]`` in ``dtype`` (or None: causal by
    column) for queries at positions ``q_pos [B, q]`` and keys at ``k_pos [B, K]`` (Self-AC's side tokens,
    ``Policy.encode_with_side_tokens``): ``mask`` itself, or for a model with sliding-window layers
    ``{layer type: mask}`` where a sliding layer's also hides the keys ``W`` or more positions back. transformers
    gives a 4-D mask to every layer as it is, so without this a sliding layer would see the whole row."""
    if not has_sliding_layers(config) or not set(config.layer_types) <= {"full_attention", SLIDING}:
        return mask
    q, K = q_pos.shape[1], k_pos.shape[1]
    if mask is None:
        cols = torch.arange(K, device=k_pos.device)
        later = cols[None, :] > torch.arange(K - q, K, device=k_pos.device)[:, None]
        mask = torch.zeros(q, K, dtype=dtype, device=k_pos.device).masked_fill(later, torch.finfo(dtype).min)
        mask = mask.expand(q_pos.shape[0], 1, q, K)
    far = (q_pos[:, None, :, None] - k_pos[:, None, None, :]) >= config.sliding_window
    masks = {"full_attention": mask, SLIDING: mask.masked_fill(far, torch.finfo(mask.dtype).min)}
    return {t: masks[t] for t in set(config.layer_types)}
