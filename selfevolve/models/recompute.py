"""Activations the update's backward recomputes instead of keeping: the MLP's gated product.

A gated MLP computes ``down(act(gate(x)) * up(x))``. Left to autograd, its backward keeps three tensors of the
MLP's width per token and layer: ``gate(x)`` (for ``act``'s derivative), ``act(gate(x))`` and ``up(x)`` (for the
product's). ``act(gate(x))`` is one elementwise function of a tensor that is kept anyway, so here the product
runs under :func:`torch.utils.checkpoint.checkpoint`: its inputs ``gate(x)`` and ``up(x)`` are kept, and
``act(gate(x))`` is computed again in the backward. That saves a third of the MLP's kept activations (an eighth
of the update's, for SmolLM2-135M) for one elementwise function per layer; the recomputation runs the same
operations on the same inputs, so values and gradients are bit for bit those of the plain forward (tested). The
profile is in docs/benchmarks.md, "Memory of the default run".

The matrix products ``gate(x)`` and ``up(x)`` are not recomputed: they are three quarters of a layer's work. The
tree's attention is recomputed the same way (``models/tree_attention.py``). :data:`ENABLED` set to False keeps
every activation instead, as before 2026-11-26 (``benchmarks/bench_memory.py`` compares the two).
"""

from __future__ import annotations

import contextlib
import types

import torch
from torch.utils.checkpoint import checkpoint

MLP_PARTS = ("gate_proj", "up_proj", "down_proj", "act_fn")
ENABLED = True  # False: nothing recomputed, every activation kept (for measuring what the recomputation saves)


def recomputing(*tensors: torch.Tensor) -> bool:
    """Whether a part with these inputs is to be recomputed in the backward: gradients are on, one of them needs
    one, and :data:`ENABLED`."""
    return ENABLED and torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _gated(act, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return act(gate) * up


def _forward(self, x: torch.Tensor) -> torch.Tensor:
    """A gated MLP's forward (transformers' ``LlamaMLP`` and its kin) with the product recomputed in the backward."""
    gate, up = self.gate_proj(x), self.up_proj(x)
    if recomputing(gate, up):
        return self.down_proj(checkpoint(_gated, self.act_fn, gate, up, use_reentrant=False,
                                         preserve_rng_state=False))
    return self.down_proj(_gated(self.act_fn, gate, up))


@contextlib.contextmanager
def recomputed_gates(body):
    """Within the block, every gated MLP of ``body`` (a module with ``gate_proj``, ``up_proj``, ``down_proj`` and
    ``act_fn``) recomputes its activation in the backward; other MLPs are left as they are."""
    mlps = [m for m in body.modules()
            if all(hasattr(m, part) for part in MLP_PARTS) and "forward" not in m.__dict__]
    for m in mlps:
        m.forward = types.MethodType(_forward, m)
    try:
        yield
    finally:
        for m in mlps:
            del m.forward
