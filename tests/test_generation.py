"""Generation (`selfevolve/models/generation.py`) on the tiny model in fp32: the same tokens and log-probs as a plain
forward pass, with every saving that avoids encoding a prompt twice (a shared prefix, a prompt several rows share,
a cache carried from the previous turn) changing nothing but the number of tokens encoded.
"""

import inspect
import warnings

import pytest
import torch

from selfevolve.config import load_config
from selfevolve.models.compat import cache_kwargs
from selfevolve.models.generation import generate
from selfevolve.train.trainer import build_policy


@pytest.fixture(scope="module")
def policy():
    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=6"])
    return build_policy(cfg)


def test_generation_matches_a_plain_forward_pass(policy):
    """Batched generation with a shared-prefix cache gives the same tokens and log-probs as batch-1 generation
    and as one forward pass over prompt + reply."""
    model = policy.model
    prefix = list(range(100, 140))
    prompts = [prefix + [7, 8, 9], prefix + [10], prefix + [11, 12, 13, 14, 15]]
    kw = dict(max_new_tokens=5, stop_ids={2}, pad_id=2, greedy=True)
    shared = generate(model, prompts, prefix_ids=prefix, **kw)
    plain = generate(model, prompts, **kw)
    assert shared.ids == plain.ids
    for i, p in enumerate(prompts):
        alone = generate(model, [p], **kw)
        assert alone.ids[0] == shared.ids[i]
        with torch.no_grad():
            logits = model(torch.tensor([p + shared.ids[i]], device=model.device)).logits[0].float()
        logp = torch.log_softmax(logits, -1)
        ref = [logp[len(p) - 1 + j, t].item() for j, t in enumerate(shared.ids[i])]
        assert max(abs(a - b) for a, b in zip(ref, shared.logprobs[i])) < 1e-4
        # uncertainty statistics are those of the full distribution
        p_dist = logp[len(p) - 1].exp()
        assert abs(shared.entropy[i][0] - float(-(p_dist * logp[len(p) - 1]).sum())) < 1e-4
        top = p_dist.topk(2).values
        assert abs(shared.top1[i][0] - float(top[0])) < 1e-5 and abs(shared.top2[i][0] - float(top[1])) < 1e-5


def test_a_prompt_shared_by_several_rows_is_encoded_once(policy):
    """A group's first turn: rows with the same prompt sample the same tokens (each from its own stream) and
    log-probs whether the prompt is encoded once or once per row; only the distinct prompts are encoded."""
    prefix = list(range(100, 140))
    a, b = prefix + [7, 8, 9], prefix + [10]
    prompts = [a, a, b, a]
    runs = {}
    for dedupe in (True, False):
        gens = [torch.Generator().manual_seed(i) for i in range(4)]
        runs[dedupe] = generate(policy.model, prompts, max_new_tokens=5, stop_ids={2}, pad_id=2, generator=gens,
                                prefix_ids=prefix, dedupe=dedupe)
    once, each = runs[True], runs[False]
    assert once.ids == each.ids
    for x, y in zip(once.logprobs, each.logprobs):
        assert max(abs(u - v) for u, v in zip(x, y)) < 1e-5
    assert (once.prompt_tokens, each.prompt_tokens) == (40 + 3 + 1, 40 + 3 + 1 + 3 + 3)
    assert once.state.seqs == each.state.seqs  # the next turn continues every row from its own cache
    nxt = [s + [11, 12] for s in once.state.seqs]
    cont = [generate(policy.model, nxt, max_new_tokens=3, stop_ids={2}, pad_id=2, greedy=True, state=r.state)
            for r in (once, each)]
    assert cont[0].ids == cont[1].ids and cont[0].prompt_tokens == cont[1].prompt_tokens


def test_rows_that_made_the_same_moves_encode_their_next_turn_once(policy):
    """A later turn: rollouts of a task that have made the same moves so far have the same whole prompt and the
    same cached history, so the new tokens are encoded once for them and the cache copied, with the same samples
    and log-probs as encoding every row, and a following turn continues from every row's own cache."""
    prefix = list(range(100, 140))
    a, b = prefix + [7, 8, 9], prefix + [10]
    first = generate(policy.model, [a, a, b, a], max_new_tokens=4, stop_ids={2}, pad_id=2, greedy=True,
                     prefix_ids=prefix)
    assert first.ids[0] == first.ids[1] == first.ids[3]  # greedy: the same moves
    nxt = [s + [11, 12] for s in first.state.seqs]  # rows 0, 1 and 3 share their whole prompt
    runs = {}
    for dedupe in (True, False):
        state = first.state.gather([0, 1, 2, 3])  # a copy: both runs start from the same caches
        buffers = [layer._kbuf.data_ptr() for layer in state.cache.layers]
        gens = [torch.Generator().manual_seed(i) for i in range(4)]
        runs[dedupe] = generate(policy.model, nxt, max_new_tokens=5, stop_ids={2}, pad_id=2, generator=gens,
                                state=state, dedupe=dedupe)
        # every row's cache grew in place: only the new positions were written, the cache was not copied
        assert runs[dedupe].state.cache is state.cache
        assert [layer._kbuf.data_ptr() for layer in state.cache.layers] == buffers
    once, each = runs[True], runs[False]
    assert (once.prompt_tokens, each.prompt_tokens) == (2 * 2, 4 * 2)  # two new tokens, two distinct prompts
    assert once.ids == each.ids
    for x, y in zip(once.logprobs, each.logprobs):
        assert max(abs(u - v) for u, v in zip(x, y)) < 1e-5
    assert once.state.seqs == each.state.seqs
    third = [s + [13] for s in once.state.seqs]
    cont = [generate(policy.model, third, max_new_tokens=3, stop_ids={2}, pad_id=2, greedy=True, state=r.state,
                     dedupe=False) for r in (once, each)]
    assert cont[0].ids == cont[1].ids and cont[0].prompt_tokens == cont[1].prompt_tokens == 4


def test_the_cache_goes_under_the_name_the_installed_transformers_takes(policy):
    """transformers 5.24 renamed ``past_key_values`` to ``cache`` (the old name warns, and goes in 5.40); older
    5.x releases know only the old name. The name is read from the model's signature, through peft's wrapper,
    and generation, the update's forward and the prefill of a search node (``extend_cache``) warn about neither."""

    class Old:
        def forward(self, input_ids=None, past_key_values=None, **kwargs): ...

    class New:
        def forward(self, input_ids=None, cache=None, **kwargs): ...

    assert cache_kwargs(Old(), 1) == {"past_key_values": 1} and cache_kwargs(New(), 1) == {"cache": 1}
    body, _ = policy.body_and_head()
    takes = "cache" if "cache" in inspect.signature(type(body).forward).parameters else "past_key_values"
    assert cache_kwargs(policy.model, 0) == cache_kwargs(body, 0) == {takes: 0}  # the peft wrapper looked through
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        prefix = list(range(100, 120))
        gen = generate(policy.model, [prefix + [5, 6], prefix + [7]], max_new_tokens=3, stop_ids={2}, pad_id=2,
                       greedy=True, prefix_ids=prefix)
        generate(policy.model, [s + [8] for s in gen.state.seqs], max_new_tokens=2, stop_ids={2}, pad_id=2,
                 greedy=True, state=gen.state)
        ids = torch.tensor([prefix + [5, 6], prefix + [7, 8]], device=policy.device)
        loss_mask = torch.zeros_like(ids)
        loss_mask[:, -1] = 1
        policy.forward_rows(ids, torch.ones_like(ids), loss_mask, prefix_len=len(prefix))
        policy.prefill([prefix + [5, 6], prefix + [7]])


def test_sampling_is_reproducible_with_a_generator(policy):
    prompts = [[1, 2, 3, 4], [5, 6, 7, 8]]
    kw = dict(max_new_tokens=4, stop_ids={2}, pad_id=2)
    a = generate(policy.model, prompts, generator=torch.Generator().manual_seed(3), **kw)
    b = generate(policy.model, prompts, generator=torch.Generator().manual_seed(3), **kw)
    assert a.ids == b.ids and a.logprobs == b.logprobs
