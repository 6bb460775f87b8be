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
every node repeat its ancestors'). In a training forward on the CPU the groups' attention is therefore one
autograd function, :class:`GroupsAttended`: it keeps ``q``, ``k`` and ``v`` and each group's output and
log-sum-exp (the fused kernel's own statistics, one number a query and head), makes the gathered copies again in
the backward and hands them to the fused kernel's backward with the kept output. Until 2026-12-05 the whole
attention ran under :func:`torch.utils.checkpoint.checkpoint` instead, keeping only ``q``, ``k`` and ``v``, so the
backward ran the fused attention's forward a second time (docs/benchmarks.md, "The attention's backward without
its forward again"); that stays the way on other devices, whose fused kernels differ, and where the CPU's fused
kernel is switched off. Either way the operations are those of the plain forward on the same inputs: values and
gradients are bit for bit the same (tested). The profile is in docs/benchmarks.md, "Memory of the default run".
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
    # GroupsAttended runs the CPU's fused kernel, which SDPA runs there unless the user switched it off
    # (torch.nn.attention.sdpa_kernel without FLASH_ATTENTION): then the checkpoint, as on other devices
    fused_cpu = q.device.type == "cpu" and torch.backends.cuda.flash_sdp_enabled()
    recomputed = recomputing(q, k, v)
    if recomputed and not fused_cpu:
        # Kept for the backward: only q, k and v; the gathered copies, the scores' statistics and the outputs are
        # recomputed from them (see the module's text, "Memory")
        out = checkpoint(_attend, q, k, v, plan, scaling, use_reentrant=False, preserve_rng_state=False)
    else:
        out = _attend(q, k, v, plan, scaling, kept_outputs=recomputed)
    return out[None], None


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: TreePlan, scaling,
            kept_outputs: bool = False) -> torch.Tensor:
    """The tree's attention of ``q [H, T, D]`` over ``k``, ``v [Hkv, T, D]``: ``[T, H, D]``. ``kept_outputs``: the
    groups' part through :class:`GroupsAttended` (CPU only), which keeps no gathered copy for the backward."""
    # CPU: torch's fused kernel reads grouped key/value heads as they are. CUDA: its fused kernels take a mask
    # only with the heads repeated (models/compat.py, prefer_grouped_attention).
    grouped = q.device.type == "cpu"
    H = q.shape[0]
    if not grouped and H != k.shape[0]:
        k, v = k.repeat_interleave(H // k.shape[0], dim=0), v.repeat_interleave(H // v.shape[0], dim=0)
    P = plan.prefix
    first = None if plan.prefix_kv is not None else F.scaled_dot_product_attention(
        q[None, :, :P], k[None, :, :P], v[None, :, :P], is_causal=True, scale=scaling,
        enable_gqa=grouped)[0].transpose(0, 1)  # [P, H, D]
    if kept_outputs:
        rest = GroupsAttended.apply(q, k, v, plan, scaling)
    else:
        outs = [F.scaled_dot_product_attention(qg, kg, vg, attn_mask=g.mask, scale=scaling, enable_gqa=grouped)
                for g, qg, kg, vg in zip(plan.groups, *_gathered(q, k, v, plan))]
        rest = _laid_out(outs, plan)
    return rest if first is None else torch.cat([first, rest])


def _gathered(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: TreePlan):
    """Each group's queries ``[m, H, S, D]`` and keys and values ``[m, Hkv, K, D]``, gathered from the packed
    sequence: three lists, one entry a group."""
    H, _, D = q.shape
    Hkv = k.shape[0]
    # split, not sliced: the backward of a split is one concatenation, of slices a zero-filled copy each
    key_slots = [g.m * g.K for g in plan.groups]
    qs = q.index_select(1, plan.queries).split([g.m * g.S for g in plan.groups], dim=1)
    ks = k.index_select(1, plan.keys).split(key_slots, dim=1)
    vs = v.index_select(1, plan.keys).split(key_slots, dim=1)
    return ([qg.view(H, g.m, g.S, D).transpose(0, 1) for g, qg in zip(plan.groups, qs)],
            [kg.view(Hkv, g.m, g.K, D).transpose(0, 1) for g, kg in zip(plan.groups, ks)],
            [vg.view(Hkv, g.m, g.K, D).transpose(0, 1) for g, vg in zip(plan.groups, vs)])


def _laid_out(outs: list[torch.Tensor], plan: TreePlan) -> torch.Tensor:
    """The groups' outputs ``[m, H, S, D]`` as the packed sequence's tokens after the prefix: ``[T', H, D]``."""
    H, D = outs[0].shape[1], outs[0].shape[3]
    return torch.cat([o.transpose(1, 2).reshape(g.m * g.S, H, D) for g, o in zip(plan.groups, outs)]
                     ).index_select(0, plan.real)


FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu  # what SDPA runs on the CPU (tested)
FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


class GroupsAttended(torch.autograd.Function):
    """The groups' part of :func:`_attend` on the CPU, keeping for the backward ``q``, ``k``, ``v`` and each
    group's output and log-sum-exp; the backward gathers the groups' copies again and runs, in order, the
    operations autograd runs for the plain forward: ``index_select``'s backward, the concatenation's, the
    reshapes', the fused kernel's own backward, the gathers'. So the gradients are bit for bit the plain ones."""

    @staticmethod
    def forward(ctx, q, k, v, plan: TreePlan, scaling):
        outs, lses = [], []
        for g, qg, kg, vg in zip(plan.groups, *_gathered(q, k, v, plan)):
            out, lse = FLASH(qg, kg, vg, 0.0, False, attn_mask=g.mask, scale=scaling)
            outs.append(out)
            lses.append(lse)
        ctx.save_for_backward(q, k, v, *outs, *lses)
        ctx.plan, ctx.scaling = plan, scaling
        return _laid_out(outs, plan)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, *saved = ctx.saved_tensors
        plan = ctx.plan
        n = len(plan.groups)
        H, _, D = q.shape
        slots = [g.m * g.S for g in plan.groups]
        grad_outs = grad.new_zeros(sum(slots), H, D).index_add_(0, plan.real, grad).split(slots, dim=0)
        dq, dk, dv = [], [], []
        for g, go, qg, kg, vg, out, lse in zip(plan.groups, grad_outs, *_gathered(q, k, v, plan), saved[:n],
                                               saved[n:]):
            gq, gk, gv = FLASH_BACKWARD(go.view(g.m, g.S, H, D).transpose(1, 2), qg, kg, vg, out, lse, 0.0, False,
                                        attn_mask=g.mask, scale=ctx.scaling)
            dq.append(gq.transpose(0, 1).reshape(H, g.m * g.S, D))
            dk.append(gk.transpose(0, 1).reshape(k.shape[0], g.m * g.K, D))
            dv.append(gv.transpose(0, 1).reshape(v.shape[0], g.m * g.K, D))
        needed = ctx.needs_input_grad
        return (q.new_zeros(q.shape).index_add_(1, plan.queries, torch.cat(dq, dim=1)) if needed[0] else None,
                k.new_zeros(k.shape).index_add_(1, plan.keys, torch.cat(dk, dim=1)) if needed[1] else None,
                v.new_zeros(v.shape).index_add_(1, plan.keys, torch.cat(dv, dim=1)) if needed[2] else None, None, None)


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
