"""Attention for a tree of segments packed into one sequence (``models/prefix_sharing.py``).

The update encodes a micro-batch's rows as a tree: the shared prefix, then every distinct turn once. All of the
tree's tokens go through the model in *one* forward, as a single packed row with each token's own position id,
so every matrix product sees every real token at once and none of padding. Only attention needs to know the
tree: a token attends to the prefix, to the segments on its path (its node's ancestors), and causally to its own
segment. This module is that attention, registered with transformers under :data:`NAME` and switched on only
inside :func:`tree_forward`, so generation and every other forward keep the model's own attention.

The tree's nodes are attended to in groups: a level's nodes of similar length (a level mixes whole turns with
final replies a tenth as long), each group one fused SDPA call over its nodes as a batch: each node's queries (its
own tokens, right-padded to the group's longest) against its keys (the prefix, its ancestors and its own tokens,
padded likewise), with an additive mask that hides the padding and the own segment's future. The queries, keys
and values of all groups are gathered from the packed sequence by one ``index_select`` each (whose backward is one
``index_add``; the keys shared by several nodes add up their gradients there) and split into the groups.

Memory (2026-11-26): kept for the backward, the gathered copies, each group's output and the attention's
statistics took 1.3 GB of the 3.2 GB the update's forward kept for 2,136 tokens of SmolLM2-135M (the keys of
every node repeat its ancestors'). In a training forward the attention therefore runs under
:func:`torch.utils.checkpoint.checkpoint`: only ``q``, ``k`` and ``v`` are kept, and the gathers and the fused
attention run again in the backward (a fifth of a layer's work or less; the matrix products are not repeated).
The same operations on the same inputs: values and gradients are bit for bit the same (tested). The profile is
in docs/benchmarks.md, "Memory of the default run".
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from selfevolve.models.recompute import recomputed_gates, recomputing

NAME = "selfevolve_tree"
KWARG = "selfevolve_tree"  # the keyword the plan travels under, from the model's forward down to attention


@dataclass
class Group:
    """Nodes attended to together: ``m`` nodes, ``S`` query slots and ``K`` key slots each, and the additive
    ``mask [m, 1, S, K]`` in the model's dtype (0 where a query may look, the dtype's lowest value where not)."""

    m: int
    S: int
    K: int
    mask: torch.Tensor


@dataclass
class TreePlan:
    """How the packed sequence attends. Its first ``prefix`` tokens are the shared prefix, causal among
    themselves. ``queries`` and ``keys`` index the packed sequence, group after group (each group's ``m × S``
    and ``m × K`` slots, padding pointing anywhere); ``real`` picks, from the groups' outputs laid end to end, the
    real query slots in the packed order of the tokens after the prefix."""

    prefix: int
    queries: torch.Tensor
    keys: torch.Tensor
    groups: list[Group]
    real: torch.Tensor
    # The prefix encoded beforehand (``prefix_sharing.EncodedPrefix``): per layer its keys and values
    # ``[Hkv, prefix, D]``. The packed sequence then starts after the prefix, whose keys and values are put in
    # front of each layer's; ``keys`` still count the prefix's positions, ``queries`` do not.
    prefix_kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None


def tree_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers' attention-function interface: ``query [1, H, T, D]`` and ``key``/``value [1, Hkv, T, D]``
    for the packed sequence; returns ``([1, T, H, D], None)``."""
    plan: TreePlan | None = kwargs.get(KWARG)
    if plan is None:
        raise RuntimeError("tree attention was called without a plan: use prefix_sharing.encode_rows")
    for feature in ("softcap", "sliding_window"):  # encode_rows encodes such models plainly (supports_tree)
        if kwargs.get(feature) is not None or getattr(module, feature, None) is not None:
            raise RuntimeError(f"tree attention cannot stand in for attention with {feature}: this model's rows "
                               "must be encoded plainly (prefix_sharing.encode_rows checks supports_tree)")
    q, k, v = query[0], key[0], value[0]
    if plan.prefix_kv is not None:
        pk, pv = plan.prefix_kv[module.layer_idx]
        k, v = torch.cat([pk, k], dim=1), torch.cat([pv, v], dim=1)
    if recomputing(q, k, v):
        # Kept for the backward: only q, k and v; the gathered copies, the scores' statistics and the outputs are
        # recomputed from them (see the module's text, "Memory")
        out = checkpoint(_attend, q, k, v, plan, scaling, use_reentrant=False, preserve_rng_state=False)
    else:
        out = _attend(q, k, v, plan, scaling)
    return out[None], None


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: TreePlan, scaling) -> torch.Tensor:
    """The tree's attention of ``q [H, T, D]`` over ``k``, ``v [Hkv, T, D]``: ``[T, H, D]``."""
    H, _, D = q.shape
    # CPU: torch's fused kernel reads grouped key/value heads as they are. CUDA: its fused kernels take a mask
    # only with the heads repeated (models/compat.py, prefer_grouped_attention).
    grouped = q.device.type == "cpu"
    if not grouped and H != k.shape[0]:
        k, v = k.repeat_interleave(H // k.shape[0], dim=0), v.repeat_interleave(H // v.shape[0], dim=0)
    Hkv, P = k.shape[0], plan.prefix
    first = None if plan.prefix_kv is not None else F.scaled_dot_product_attention(
        q[None, :, :P], k[None, :, :P], v[None, :, :P], is_causal=True, scale=scaling,
        enable_gqa=grouped)[0].transpose(0, 1)  # [P, H, D]
    # split, not sliced: the backward of a split is one concatenation, of slices a zero-filled copy each
    key_slots = [g.m * g.K for g in plan.groups]
    qs = q.index_select(1, plan.queries).split([g.m * g.S for g in plan.groups], dim=1)
    ks = k.index_select(1, plan.keys).split(key_slots, dim=1)
    vs = v.index_select(1, plan.keys).split(key_slots, dim=1)
    outs = []
    for g, qg, kg, vg in zip(plan.groups, qs, ks, vs):
        out = F.scaled_dot_product_attention(
            qg.view(H, g.m, g.S, D).transpose(0, 1), kg.view(Hkv, g.m, g.K, D).transpose(0, 1),
            vg.view(Hkv, g.m, g.K, D).transpose(0, 1), attn_mask=g.mask, scale=scaling,
            enable_gqa=grouped)
        outs.append(out.transpose(1, 2).reshape(g.m * g.S, H, D))
    rest = torch.cat(outs).index_select(0, plan.real)
    return rest if first is None else torch.cat([first, rest])


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
    with _implementation(body.config, NAME), recomputed_gates(body):
        out = body(input_ids=ids[None], position_ids=positions[None], use_cache=False, **{KWARG: plan})
    return out.last_hidden_state[0]
