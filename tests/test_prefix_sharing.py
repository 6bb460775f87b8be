"""Rows that begin alike (``models/prefix_sharing.py``, ``objectives/samples.py``): the shared prefix encoded once, then
the rows as a tree of their turns, every distinct beginning once — the same log-probs, values and gradients as the
plain forward, for fewer tokens, and the micro-batch split that counts them."""

import pytest
import torch

from selfevolve.config import load_config
from selfevolve.models.prefix_sharing import EncodedPrefix
from selfevolve.objectives.samples import Row, collate, encoded_tokens, micro_batches, turn_cuts
from selfevolve.train.trainer import build_policy

P = 10
PREFIX = list(range(100, 110))
OPEN_A = PREFIX + list(range(200, 210))  # 20 ids: the first prompt of task A (less its last token)
OPEN_B = PREFIX + list(range(300, 315))  # 25 ids: task B's
S1, S1B = list(range(501, 509)), list(range(520, 532))  # first-turn segments of 8 and 12 ids
S2A, S2B = list(range(700, 706)), list(range(710, 719))  # second-turn segments of 6 and 9
S3, S3B = list(range(600, 607)), list(range(610, 620))  # 7 and 10


def row(opening: list[int], *segments: list[int]) -> Row:
    """A row cut into turns: each segment starts with a turn's last prompt token, whose next two tokens are the
    generated reply (loss), then the next prompt."""
    ids, cuts = list(opening), []
    for seg in segments:
        cuts.append(len(ids))
        ids += seg
    mask = [0] * len(ids)
    for c in cuts:
        mask[c + 1] = mask[c + 2] = 1
    return Row(ids=ids, mask=mask, old_logprobs=[], advantages=[0.0] * sum(mask), value_pos=cuts)


A1, A2, A3 = row(OPEN_A, S1, S2A), row(OPEN_A, S1, S2B), row(OPEN_A, S1B)  # 34, 37, 32 ids
B1, B2 = row(OPEN_B, S3), row(OPEN_B, S3B)  # 32, 35


def test_tokens_derived_by_hand():
    assert [len(r) for r in (A1, A2, A3, B1, B2)] == [34, 37, 32, 32, 35]
    assert turn_cuts(A1) == [20, 28] and turn_cuts(B1) == [25]
    # the prefix once, then every distinct segment once, unpadded; level 0: A's and B's first prompts (10 and 15
    # past the prefix); level 1: S1 (A1 and A2 share it), S1B, S3; level 2: S2A and S2B
    assert encoded_tokens([A1, A2, A3, B1], P, grouped=True) == 10 + (10 + 15) + (8 + 12 + 7) + (6 + 9) == 77
    assert encoded_tokens([A1, A2, A3, B1], P) == 10 + 24 + 27 + 22 + 22 == 105  # each row's rest, unpadded
    assert encoded_tokens([A1], P, grouped=True) == 34


def test_the_split_keeps_rows_that_share_turns_together():
    """{A1 A2} encodes 10 + 10 + 8 + (6 + 9) = 43 tokens, {B1 B2} 10 + 15 + (7 + 10) = 42; a pair of an A and a B
    more ({A1 B1}: 10 + (10 + 15) + (8 + 7) + 6 = 56). The bound adds the cached positions the levels keep (each
    node its ancestors' columns and the level's longest segment), a sixteenth each: {A1 A2} keeps 1·20 + 1·28 +
    2·37 = 122 (+7: 50), {B1 B2} 1·25 + 2·35 = 95 (+5: 47). At most 55 a chunk: by length (B1 A1 B2 A2) every
    neighbouring pair is mixed and over the bound, so only single rows fit: 138 tokens; in the order of their ids,
    85."""
    assert encoded_tokens([A1, B1], P, grouped=True) == 56
    assert micro_batches([B2, A2, B1, A1], 49, shared=P, grouped=True) == [[A1], [A2], [B1, B2]]  # 50 > 49
    chunks = micro_batches([B2, A2, B1, A1], 55, shared=P, grouped=True)
    assert chunks == [[A1, A2], [B1, B2]]
    assert sum(encoded_tokens(c, P, grouped=True) for c in chunks) == 43 + 42


def test_without_turns_each_rest_is_one_segment_and_the_split_counts_it_unpadded():
    """No cuts: a chunk encodes the prefix once and each row's rest (B1 22, A1 24, B2 25, A2 27 past the prefix)
    once, so every row that joins a chunk saves the prefix's 10 tokens; the bound adds the positions the one level
    keeps (each row: the prefix and the longest rest), a sixteenth each. {B1 A1}: 10 + 22 + 24 = 56, + 2·34 / 16
    = 4: 60; {B2 A2}: 62 + 2·37 / 16: 66; a triple is 87 or more. Rows sorted by length (B1 A1 B2 A2)."""
    names = lambda chunks: [[{id(A1): "A1", id(A2): "A2", id(B1): "B1", id(B2): "B2"}[id(r)] for r in c]  # noqa: E731
                            for c in chunks]
    assert encoded_tokens([B1, A1], P) == 56 and encoded_tokens([B1, A1], P, grouped=True) == 56
    for bound, split, tokens in [(59, [["B1"], ["A1"], ["B2"], ["A2"]], 138), (60, [["B1", "A1"], ["B2"], ["A2"]], 128),
                                 (66, [["B1", "A1"], ["B2", "A2"]], 118)]:
        chunks = micro_batches([B2, A2, B1, A1], bound, shared=P)
        assert names(chunks) == split
        assert sum(encoded_tokens(c, P) for c in chunks) == tokens


def forwards(dtype: str):
    """Log-probs, entropies, values, gradients and the ids fed to the body, for the plain, the shared-prefix and
    the tree forward of rows A1 A2 A3 B1 on the default device (CUDA when there is one)."""
    policy = build_policy(load_config(overrides=["model.name=tiny", f"model.dtype={dtype}"]))
    policy.attach_value_head()
    rows = [A1, A2, A3, B1]
    b = collate(rows, policy.pad_id, policy.device)
    body, _ = policy.body_and_head()
    fed = []
    forward = body.forward
    body.forward = lambda *a, **k: fed.append(k["input_ids"].numel()) or forward(*a, **k)
    results = {}
    for name, kw in {"plain": {}, "prefix": {"prefix_len": P},
                     "tree": {"prefix_len": P, "cuts": [turn_cuts(r) for r in rows]},
                     "encoded": {"prefix_len": P, "cuts": [turn_cuts(r) for r in rows]}}.items():
        fed.clear()
        policy.model.zero_grad(set_to_none=True)
        policy.value_head.zero_grad(set_to_none=True)
        if name == "encoded":  # the prefix encoded beforehand, as the update does for several micro-batches
            kw["prefix"] = EncodedPrefix(body, PREFIX)
        logp, ent, values = policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"],
                                                value_mask=b["value_mask"], with_entropy=True, **kw)
        (logp.sum() + values.square().sum()).backward()
        if name == "encoded":
            kw["prefix"].backward()
        grads = [p.grad.clone() for p in policy.trainable_parameters()]
        results[name] = (logp.detach(), ent, values.detach(), grads, list(fed))
    del body.forward
    return results


def test_the_tree_forward_equals_the_plain_one_for_fewer_tokens():
    results = forwards("fp32")
    plain = results["plain"]
    assert plain[0].numel() == 2 * 6 and plain[2].numel() == 6  # two reply tokens and one value per turn
    for name in ("prefix", "tree", "encoded"):
        logp, ent, values, grads, _ = results[name]
        assert torch.allclose(logp, plain[0], atol=1e-5) and torch.allclose(ent, plain[1], atol=1e-5)
        assert torch.allclose(values, plain[2], atol=1e-5)
        assert all(torch.allclose(g, h, rtol=1e-4, atol=1e-5 * float(h.abs().max())) for g, h in zip(grads, plain[3]))
    # ids fed to the body, call by call: 4 x 37, padded; the prefix and the four rests (24, 27, 22 and 22 ids) in
    # one packed row; the prefix and the tree's nodes (10 + 15, 8 + 12 + 7, 6 + 9) in one packed row
    assert [results[n][4] for n in ("plain", "prefix", "tree")] == [[148], [10 + 95], [10 + 25 + 27 + 15]]
    assert results["encoded"][4] == [10, 25 + 27 + 15]  # the prefix in its own forward, then the tree without it


def test_a_lone_row_attends_to_the_prefix_encoded_beforehand_instead_of_encoding_it_again():
    """A micro-batch of one row beside others (the memory bound split the minibatch 3 + 1): with the prefix
    encoded beforehand, the body is fed A1's 24 ids past the prefix, not all 34, for the same log-probs, values and
    gradients as the plain forward."""
    policy = build_policy(load_config(overrides=["model.name=tiny", "model.dtype=fp32"]))
    policy.attach_value_head()
    b = collate([A1], policy.pad_id, policy.device)
    body, _ = policy.body_and_head()
    fed, forward = [], body.forward
    body.forward = lambda *a, **k: fed.append(k["input_ids"].numel()) or forward(*a, **k)
    results = []
    for encoded in (False, True):
        fed.clear()
        policy.model.zero_grad(set_to_none=True)
        policy.value_head.zero_grad(set_to_none=True)
        prefix = EncodedPrefix(body, PREFIX) if encoded else None
        logp, _, values = policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"],
                                              value_mask=b["value_mask"], prefix_len=P if encoded else 0,
                                              cuts=[turn_cuts(A1)], prefix=prefix)
        (logp.sum() + values.square().sum()).backward()
        if prefix is not None:
            prefix.backward()
        results.append((logp.detach(), values.detach(), [p.grad.clone() for p in policy.trainable_parameters()],
                        list(fed)))
    del body.forward
    (logp, values, grads, plain_fed), (logp_e, values_e, grads_e, encoded_fed) = results
    assert plain_fed == [34] and encoded_fed == [10, 24]
    assert logp.numel() == 4 and torch.allclose(logp_e, logp, atol=1e-5) and torch.allclose(values_e, values, atol=1e-5)
    assert all(torch.allclose(g, h, rtol=1e-4, atol=1e-5 * float(h.abs().max())) for g, h in zip(grads_e, grads))


def test_the_tree_forward_in_bf16_stays_within_bf16_rounding_of_the_plain_one():
    """bf16 keeps 8 bits of mantissa: the packed tree and the padded rows add in other orders, so they round
    apart. Stated tolerances: log-probs and values within 0.05 (a log-prob of -10 has a bf16 step of 0.06),
    entropies within 0.05, and each gradient within 5 % of the plain one's norm (cosine above 0.998). On CUDA this
    is the fused kernels' path (tree_attention repeats grouped heads for them); on the CPU, the CPU's."""
    results = forwards("bf16")
    plain = results["plain"]
    for name in ("prefix", "tree", "encoded"):
        logp, ent, values, grads, _ = results[name]
        assert (logp.float() - plain[0].float()).abs().max() < 0.05
        assert (ent.float() - plain[1].float()).abs().max() < 0.05
        assert (values.float() - plain[2].float()).abs().max() < 0.05
        for g, h in zip(grads, plain[3]):
            g, h = g.float().flatten(), h.float().flatten()
            assert (g - h).norm() <= 0.05 * h.norm() + 1e-6  # LoRA's A gets no gradient at the start (B = 0)
            assert h.norm() == 0 or torch.nn.functional.cosine_similarity(g, h, dim=0) > 0.998


def test_a_loss_inside_the_shared_prefix_is_refused():
    policy = build_policy(load_config(overrides=["model.name=tiny", "model.dtype=fp32"]))
    b = collate([A1, A2], policy.pad_id, policy.device)  # the same first 28 ids, a generated token at 21
    with pytest.raises(AssertionError, match="shared prefix"):
        policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"], prefix_len=25,
                            cuts=[turn_cuts(A1), turn_cuts(A2)])


def test_the_tree_attention_is_switched_on_only_for_the_update_forward():
    """Generation and every other forward keep the model's own attention, also after a forward that failed."""
    policy = build_policy(load_config(overrides=["model.name=tiny", "model.dtype=fp32"]))
    body, _ = policy.body_and_head()
    own = body.config._attn_implementation
    b = collate([A1, A2, B1], policy.pad_id, policy.device)
    cuts = [turn_cuts(r) for r in (A1, A2, B1)]
    policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"], prefix_len=P, cuts=cuts)
    assert body.config._attn_implementation == own
    seen = []

    def fail(*args, **kwargs):
        seen.append(body.config._attn_implementation)
        raise RuntimeError("out of memory")

    body.layers[0].forward = fail
    with pytest.raises(RuntimeError, match="out of memory"):
        policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"], prefix_len=P, cuts=cuts)
    del body.layers[0].forward
    assert seen == ["selfevolve_tree"] and body.config._attn_implementation == own


def test_models_whose_attention_the_tree_cannot_stand_in_for_are_encoded_plainly():
    policy = build_policy(load_config(overrides=["model.name=tiny", "model.dtype=fp32"]))
    body, _ = policy.body_and_head()
    rows = [A1, A2, B1]
    b = collate(rows, policy.pad_id, policy.device)
    cuts = [turn_cuts(r) for r in rows]
    tree, _ = policy.action_logprobs(b["input_ids"], b["attention_mask"], b["loss_mask"], prefix_len=P, cuts=cuts)
    fed = []
    forward = body.forward
    body.forward = lambda *a, **k: fed.append(tuple(k["input_ids"].shape)) or forward(*a, **k)
    body.config.sliding_window = 4096  # as Mistral's config has it
    try:
        plain, _ = policy.action_logprobs(b["input_ids"], b["attention_mask"], b["loss_mask"], prefix_len=P,
                                          cuts=cuts)
    finally:
        del body.forward
        body.config.sliding_window = None
    assert fed == [(3, 37)]  # the rows as they are, padded
    assert torch.allclose(plain, tree, atol=1e-5)
