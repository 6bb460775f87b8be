"""One query's attention in bf16 on the CPU (``models/decode_attention.py``): what it computes, and
where it is used."""

import pytest
import torch

from selfevolve.models import decode_attention
from selfevolve.models.compat import cache_kwargs
from selfevolve.models.kv_cache import GrowingCache
from selfevolve.models.loading import load_model


def reference(query, key, value, mask, scaling):
    """Attention written out: every query head against its own copy of its key/value head."""
    rep = query.shape[1] // key.shape[1]
    k, v = key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1)
    scores = query @ k.transpose(-1, -2) * scaling
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    return (scores.softmax(-1) @ v).transpose(1, 2)  # [B, 1, H, D]


def test_single_query_attention_is_attention_with_grouped_heads_and_every_kind_of_mask():
    torch.manual_seed(0)
    B, H, Hkv, L, D = 3, 6, 2, 7, 4
    q, k, v = torch.randn(B, H, 1, D), torch.randn(B, Hkv, L, D), torch.randn(B, Hkv, L, D)
    allowed = torch.ones(B, 1, 1, L, dtype=torch.bool)
    allowed[0, ..., :3] = False  # left padding of row 0
    additive = torch.zeros(B, 1, 1, L).masked_fill(~allowed, torch.finfo(torch.float32).min)
    for mask in (None, allowed, additive):
        got = decode_attention.single_query_attention(q, k, v, mask, 0.5)
        assert got.shape == (B, 1, H, D)
        torch.testing.assert_close(got, reference(q, k, v, mask, 0.5), rtol=1e-5, atol=1e-6)
    # a masked position changes nothing: row 0 reads only its last four positions
    k2 = k.clone()
    k2[0, :, :3] += 100.0
    torch.testing.assert_close(decode_attention.single_query_attention(q, k2, v, allowed, 0.5)[0],
                               decode_attention.single_query_attention(q, k, v, allowed, 0.5)[0])
    # a mask over other positions than the keys is refused, not cut to fit
    with pytest.raises(ValueError, match="mask over 8 positions for 7 keys"):
        decode_attention.single_query_attention(q, k, v, torch.ones(B, 1, 1, L + 1, dtype=torch.bool), 0.5)


def _logits(model, impl, ids, mask):
    """Prefill ``ids`` then decode one more token under attention ``impl``: (prefill logits, decode logits)."""
    model.config._attn_implementation = impl
    cache = GrowingCache()
    with torch.no_grad():
        first = model(input_ids=ids, attention_mask=mask[:, :-1], **cache_kwargs(model, cache), use_cache=True)
        step = model(input_ids=ids[:, -1:], attention_mask=mask, **cache_kwargs(model, cache), use_cache=True)
    return first.logits.float(), step.logits[:, -1].float()


def test_a_bf16_model_on_the_cpu_decodes_with_it_and_prefills_with_sdpa_unchanged():
    model, _ = load_model("tiny", "bf16", seed=0)
    assert model.config._attn_implementation == decode_attention.NAME
    torch.manual_seed(1)
    ids = torch.randint(100, 4000, (3, 12))
    mask = torch.ones(3, 13, dtype=torch.long)
    mask[0, :4] = 0  # a left-padded row
    pre_ours, dec_ours = _logits(model, decode_attention.NAME, ids, mask)
    pre_sdpa, dec_sdpa = _logits(model, "sdpa", ids, mask)
    assert torch.equal(pre_ours, pre_sdpa)  # more than one query: SDPA itself, the same numbers
    ref = _logits(load_model("tiny", "fp32", seed=0)[0], "sdpa", ids, mask)[1]
    # one query: bf16 rounding either way, so not the same numbers; about as far from the fp32 result as bf16 SDPA
    # (0.069 against 0.067 on average here, logits up to 17) and within bf16's rounding of SDPA's
    assert (dec_ours - ref).abs().mean() <= 1.25 * (dec_sdpa - ref).abs().mean()
    assert (dec_ours - dec_sdpa).abs().max() <= 0.03 * ref.abs().max()


def test_fp32_models_keep_sdpa():
    model, _ = load_model("tiny", "fp32", seed=0)
    assert model.config._attn_implementation == "sdpa"
    assert decode_attention.use_for(model) is False
