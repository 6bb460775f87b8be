"""One query's attention on the CPU in bf16: two matrix products instead of torch's fused kernel.

A decode step attends one new token per row to the whole key/value cache. On the CPU, torch's fused attention
kernel (``scaled_dot_product_attention``) does that in bf16 many times slower than in fp32: on the AMD EPYC of
2026-11-29 (AVX512-BF16), one layer's attention for 16 rows took 12.1 ms in bf16 against 1.4 ms in fp32 over 300
cached positions, and 27.0 against 4.8 ms over 700. So a bf16 decode step was 1.5x *slower* than an fp32 one
(588 against 402 ms for 16 rows), although its matrix products ran 1.7x faster: attention took two thirds of it.
Written as two batched matrix products — each key/value head's group of query heads against its keys, then the
probabilities against its values, the softmax in fp32 — the same attention takes 1.2 and 2.1 ms in bf16
(``benchmarks/bench_decode_attention.py``; docs/benchmarks.md, "bf16 on a CPU that has it").

:func:`attention` is registered with transformers as :data:`NAME`, with SDPA's masks; :func:`use_for` switches a
model to it on the CPU in bf16. Every call with more than one query (prefill, the update) goes to transformers'
own SDPA function with the same arguments, so only decoding differs; fp32 models keep SDPA, and their results
stay what they were (as do the fp32 calls of a model that samples in bf16 and updates in fp32). Not fp16: not
measured, and its q·k products could overflow where SDPA accumulates in fp32.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "selfevolve_decode"


def single_query_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           mask: torch.Tensor | None, scaling: float) -> torch.Tensor:
    """softmax(q·kᵀ·scaling + mask)·v for one query position: ``query [B, H, 1, D]``, ``key``/``value
    [B, Hkv, L, D]`` (H a multiple of Hkv: query head h reads key/value head h // (H / Hkv), as transformers'
    ``repeat_kv`` lays them out), ``mask`` None, boolean (True: attend) or additive, ``[B, 1, 1, L]`` (the same
    for every head). Returns ``[B, 1, H, Dv]``, the layout transformers' attention functions
    return."""
    B, H, _, D = query.shape
    Hkv, L = key.shape[1], key.shape[2]
    q = query.reshape(B, Hkv, H // Hkv, D)  # a group's query heads as the rows of one product with its keys
    scores = torch.matmul(q, key.transpose(-1, -2)).float().mul_(scaling)  # [B, Hkv, H/Hkv, L]
    if mask is not None:
        if mask.shape[-1] != L:  # SDPA would refuse it too; never cut a mask to fit
            raise ValueError(f"attention mask over {mask.shape[-1]} positions for {L} keys")
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.float()
    out = torch.matmul(scores.softmax(-1).to(value.dtype), value)  # [B, Hkv, H/Hkv, D]
    return out.reshape(B, 1, H, value.shape[-1])


def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers' attention-function interface: one query per row with :func:`single_query_attention`, and
    everything else (several queries, dropout, soft-capping, a position bias, a mask per head, attention weights
    asked for) by SDPA."""
    if (query.shape[2] == 1 and query.dtype == torch.bfloat16 and dropout == 0.0 and kwargs.get("softcap") is None
            and kwargs.get("position_bias") is None and not kwargs.get("output_attentions", False)
            and (attention_mask is None or (attention_mask.dim() == 4 and attention_mask.shape[1] == 1))):
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return single_query_attention(query, key, value, attention_mask, scale), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  **kwargs)


AttentionInterface.register(NAME, attention)
AttentionMaskInterface.register(NAME, sdpa_mask)  # the masks SDPA gets, so that prefill and update are unchanged


def use_for(model, dtype: torch.dtype | None = None) -> bool:
    """Switch ``model`` (loaded, on its device) to :data:`NAME` where it helps: on the CPU, when it computes in
    bf16 (its weights', or ``dtype``: the precision it samples in, ``models/sampler_precision.py``) and attends
    with SDPA. Returns whether it did. Calls in any other dtype still go to SDPA (:func:`attention`)."""
    param = next(model.parameters())
    if (param.device.type != "cpu" or (dtype or param.dtype) != torch.bfloat16
            or model.config._attn_implementation != "sdpa"):
        return False
    model.config._attn_implementation = NAME
    return True
