"""Attention for a tree of segments packed into one sequence (``models/prefix_sharing.py``).

The update encodes a micro-batch's rows as a tree: the shared prefix, then every distinct turn once. All of the
tree's tokens go through the model in *one* forward, as a single packed row with each token's own position id,
so every matrix product sees every real token at once and none of padding. Only attention needs to know the
tree: a token attends to the prefix, to the segments on its path (its node's ancestors), and causally to its own
segment. This module is that attention, registered with transformers under :data:`NAME` and switched on only
inside :func:`tree_forward`, so generation and every other forward keep the model's own attention.

For each level of the tree (the prefix, then depth 0, 1, …) one fused SDPA call runs over that level's nodes
as a batch: each node's queries (its own tokens, right-padded to the level's longest) against its keys (gathered
from the packed keys by index: prefix, ancestors, own tokens; padded to the level's longest), with an additive
mask that hides the padding and the own segment's future. Gathers by ``index_select`` keep the backward an
``index_add`` (no sort); the keys shared by several nodes add up their gradients there.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

NAME = "selfevolve_tree"
KWARG = "selfevolve_tree"  # the keyword the plan travels under, from the model's forward down to attention


@dataclass
class Level:
    """One level's attention: ``queries [m, S]`` and ``keys [m, K]`` index the packed sequence (padding points
    anywhere: it is masked or dropped), ``mask [m, 1, S, K]`` is added to the scores, and ``real [n]`` picks the
    level's real query slots out of the flattened ``m × S``, in packed order."""

    queries: torch.Tensor
    keys: torch.Tensor
    mask: torch.Tensor
    real: torch.Tensor


@dataclass
class TreePlan:
    prefix: int  # the first ``prefix`` packed tokens: the shared prefix, causal among themselves
    levels: list[Level]


def tree_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers' attention-function interface: ``query [1, H, T, D]`` and ``key``/``value [1, Hkv, T, D]``
    for the packed sequence; returns ``([1, T, H, D], None)``."""
    plan: TreePlan | None = kwargs.get(KWARG)
    if plan is None:
        raise RuntimeError("tree attention was called without a plan: use prefix_sharing.encode_rows")
    for feature in ("softcap", "sliding_window"):
        if kwargs.get(feature) is not None or getattr(module, feature, None) is not None:  # see supports_tree
            raise NotImplementedError(f"the update's tree encoding does not support attention with {feature}")
    q, k, v = query[0], key[0], value[0]
    H, _, D = q.shape
    Hkv = k.shape[0]
    # CPU: torch's fused kernel reads grouped key/value heads as they are. CUDA: its fused kernels take a mask
    # only with the heads repeated (models/compat.py, prefer_grouped_attention).
    grouped = q.device.type == "cpu"
    if not grouped and H != Hkv:
        k, v = k.repeat_interleave(H // Hkv, dim=0), v.repeat_interleave(H // Hkv, dim=0)
    P = plan.prefix
    first = F.scaled_dot_product_attention(q[None, :, :P], k[None, :, :P], v[None, :, :P], is_causal=True,
                                           scale=scaling, enable_gqa=grouped)
    outs = [first[0].transpose(0, 1)]  # [P, H, D]
    for lv in plan.levels:
        m, S = lv.queries.shape
        K = lv.keys.shape[1]
        qd = q.index_select(1, lv.queries.flatten()).view(H, m, S, D).transpose(0, 1)
        kd = k.index_select(1, lv.keys.flatten()).view(k.shape[0], m, K, D).transpose(0, 1)
        vd = v.index_select(1, lv.keys.flatten()).view(v.shape[0], m, K, D).transpose(0, 1)
        od = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=lv.mask.to(qd.dtype), scale=scaling,
                                            enable_gqa=grouped)
        outs.append(od.transpose(1, 2).reshape(m * S, H, D).index_select(0, lv.real))
    return torch.cat(outs)[None], None


AttentionInterface.register(NAME, tree_attention)
# The plan carries the masks; transformers builds none.
AttentionMaskInterface.register(NAME, lambda *args, **kwargs: None)


def supports_tree(config) -> bool:
    """Whether :func:`tree_attention` computes what this model's own attention does: not for attention with
    logit soft-capping or a sliding window (e.g. Gemma 2, Mistral), whose rows the update then encodes plainly."""
    return not (getattr(config, "attn_logit_softcapping", None) or getattr(config, "sliding_window", None))


@contextlib.contextmanager
def _implementation(config, name: str):
    old = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = old


def tree_forward(body, ids: torch.Tensor, positions: torch.Tensor, plan: TreePlan) -> torch.Tensor:
    """The decoder ``body``'s last hidden states ``[T, hidden]`` of the packed ``ids [T]`` at ``positions [T]``,
    attending as ``plan`` says."""
    with _implementation(body.config, NAME):
        out = body(input_ids=ids[None], position_ids=positions[None], use_cache=False, **{KWARG: plan})
    return out.last_hidden_state[0]
