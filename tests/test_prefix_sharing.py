"""Rows that begin alike (``models/prefix_sharing.py``, ``train/samples.py``): the shared prefix encoded once, each
task's opening once, each row's own part once — the same log-probs, values and gradients as the plain forward,
for fewer tokens, and the micro-batch split that counts them."""

import pytest
import torch

from selfevolve.config import load_config
from selfevolve.train.samples import Row, encoded_tokens, micro_batches, opening_len
from selfevolve.train.trainer import build_policy

P = 10
PREFIX = list(range(100, 110))
OPEN_A = PREFIX + list(range(200, 210))  # opening length 20
OPEN_B = PREFIX + list(range(300, 315))  # 25
OPEN_C = PREFIX + list(range(400, 412))  # 22


def row(opening: list[int], length: int, seed: int) -> Row:
    """A row whose first generated token comes right after ``opening`` and its last prompt token."""
    g = torch.Generator().manual_seed(seed)
    ids = opening + torch.randint(500, 900, (length - len(opening),), generator=g).tolist()
    first = len(opening) + 1
    mask = [0] * first + [1, 1, 0, 0] * ((length - first) // 4) + [1] * ((length - first) % 4)
    return Row(ids=ids, mask=mask, old_logprobs=[], advantages=[0.0] * sum(mask), value_pos=[len(opening), length - 3])


ROWS = [row(OPEN_A, 30, 1), row(OPEN_A, 40, 2), row(OPEN_B, 35, 3), row(OPEN_B, 50, 4), row(OPEN_C, 28, 5)]


def test_opening_and_tokens_derived_by_hand():
    assert [opening_len(r) for r in ROWS] == [20, 20, 25, 25, 22]
    # P once, 3 openings padded to the longest (25 - 10), 5 own parts padded to the longest (50 - 25)
    assert encoded_tokens(ROWS, P, grouped=True) == 10 + 3 * 15 + 5 * 25 == 180
    assert encoded_tokens(ROWS, P) == 10 + 5 * (50 - 10) == 210
    assert encoded_tokens([ROWS[0], ROWS[2]], P, grouped=True) == 10 + 2 * (35 - 10)  # no opening shared: plain
    assert encoded_tokens(ROWS[:1], P, grouped=True) == 30


def test_the_split_keeps_a_tasks_rollouts_together_when_that_encodes_fewer_tokens():
    """A1 30, A2 40 (opening 20), B1 35, B2 50 (opening 25); at most 100 padded tokens a chunk, so pairs at most.
    By length (A1 B1 A2 B2) no pair shares an opening: the best split encodes 150 tokens ({A1 B1} 60 + {A2 B2} 90).
    By task, {A1 A2} costs 10 + 10 + 2·20 = 60 and {B1 B2} 10 + 15 + 2·25 = 75: 135, the split taken."""
    a1, a2, b1, b2 = ROWS[:4]
    chunks = micro_batches([b2, a1, b1, a2], 100, shared=P, grouped=True)
    assert chunks == [[b1, b2], [a1, a2]]  # tasks in the order they first appear, each by length
    assert sum(encoded_tokens(c, P, grouped=True) for c in chunks) == 135
    assert sum(encoded_tokens(c, P) for c in micro_batches([b2, a1, b1, a2], 100, shared=P)) == 150


def test_grouped_forward_equals_the_plain_one_for_fewer_tokens():
    policy = build_policy(load_config(overrides=["model.name=tiny", "model.dtype=fp32"]))
    policy.attach_value_head()
    from selfevolve.train.samples import collate

    b = collate(ROWS, policy.pad_id)
    body, _ = policy._body_and_head()
    fed = []
    forward = body.forward
    body.forward = lambda *a, **k: fed.append(k["input_ids"].numel()) or forward(*a, **k)
    results = {}
    for name, kw in {"plain": {}, "prefix": {"prefix_len": P},
                     "grouped": {"prefix_len": P, "openings": [opening_len(r) for r in ROWS]}}.items():
        fed.clear()
        policy.model.zero_grad(set_to_none=True)
        policy.value_head.zero_grad(set_to_none=True)
        logp, ent, values = policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"],
                                                value_mask=b["value_mask"], with_entropy=True, **kw)
        (logp.sum() + values.square().sum()).backward()
        grads = [p.grad.clone() for p in policy.trainable_parameters()]
        results[name] = (logp.detach(), ent, values.detach(), grads, sum(fed))
    del body.forward
    plain = results["plain"]
    assert plain[0].numel() == sum(map(sum, (r.mask for r in ROWS))) and plain[2].numel() == 2 * len(ROWS)
    for name in ("prefix", "grouped"):
        logp, ent, values, grads, _ = results[name]
        assert torch.allclose(logp, plain[0], atol=1e-5) and torch.allclose(ent, plain[1], atol=1e-5)
        assert torch.allclose(values, plain[2], atol=1e-5)
        assert all(torch.allclose(g, h, rtol=1e-4, atol=1e-5 * float(h.abs().max())) for g, h in zip(grads, plain[3]))
    # tokens fed to the body: 5 x 50 padded; 10 + 5 x 40; 10 + 3 x 15 + 5 x 25 (encoded_tokens above)
    assert [results[n][4] for n in ("plain", "prefix", "grouped")] == [250, 210, 180]


def test_rows_that_share_no_opening_take_the_prefix_path():
    policy = build_policy(load_config(overrides=["model.name=tiny", "model.dtype=fp32"]))
    from selfevolve.train.samples import collate

    rows = [ROWS[0], ROWS[2], ROWS[4]]
    b = collate(rows, policy.pad_id)
    with torch.no_grad():
        a, _, _ = policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"], prefix_len=P,
                                      openings=[opening_len(r) for r in rows])
        c, _, _ = policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"])
    assert torch.allclose(a, c, atol=1e-5)


def test_a_loss_inside_a_shared_opening_is_refused():
    policy = build_policy(load_config(overrides=["model.name=tiny", "model.dtype=fp32"]))
    from selfevolve.train.samples import collate

    b = collate([ROWS[0], ROWS[0]], policy.pad_id)  # the same 25 first ids, a generated token at 21
    with pytest.raises(AssertionError, match="shared beginning"):
        policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"], prefix_len=P, openings=[25, 25])
