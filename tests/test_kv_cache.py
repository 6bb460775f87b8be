"""The generation cache that appends in place (``selfevolve/models/kv_cache.py``): the same numbers as
transformers' ``DynamicCache`` and the same generations, with appends written into spare room instead of a new
tensor per step."""

import pytest
import torch
from transformers import DynamicCache

import selfevolve.models.generation as generation
from selfevolve.config import load_config
from selfevolve.models.generation import generate
from selfevolve.models.kv_cache import MIN_SPARE, GrowingCache, grown_capacity
from selfevolve.train.trainer import build_policy


@pytest.fixture(scope="module")
def policy():
    return build_policy(load_config(overrides=["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=6"]))


def chunk(n, rows=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 3, n, 4, generator=g), torch.randn(rows, 3, n, 4, generator=g)


def test_capacity_grows_by_half_and_at_least_min_spare():
    assert MIN_SPARE == 64
    assert grown_capacity(3) == 3 + 64  # half (1) is less than the minimum spare
    assert grown_capacity(127) == 127 + 64
    assert grown_capacity(400) == 400 + 200  # half as many again


def test_appends_equal_torch_cat_and_write_into_the_same_buffer():
    grow, dyn = GrowingCache(), DynamicCache()
    pieces = [chunk(3, seed=1), chunk(1, seed=2), chunk(1, seed=3)]
    for k, v in pieces:
        for c in (grow, dyn):
            out_k, out_v = c.update(k, v, 0)
        assert torch.equal(out_k, dyn.layers[0].keys) and torch.equal(out_v, dyn.layers[0].values)
    layer = grow.layers[0]
    assert torch.equal(layer.keys, dyn.layers[0].keys) and layer.keys.shape == (2, 3, 5, 4)
    assert layer._kbuf.shape[-2] == 3 + 64  # the first append's capacity; the next two fitted in it
    ptr = layer._kbuf.data_ptr()
    grow.update(*chunk(62, seed=4), 0)  # 5 + 62 = 67: exactly full, still no copy
    assert layer._kbuf.data_ptr() == ptr and layer.keys.shape[-2] == 67
    grow.update(*chunk(1, seed=5), 0)  # 68 > 67: a new buffer of 68 + 64
    assert layer._kbuf.data_ptr() != ptr and layer._kbuf.shape[-2] == 132
    dyn.update(*chunk(62, seed=4), 0)
    dyn.update(*chunk(1, seed=5), 0)
    assert torch.equal(layer.keys, dyn.layers[0].keys) and torch.equal(layer.values, dyn.layers[0].values)
    assert grow.get_seq_length() == dyn.get_seq_length() == 68


def test_row_selection_repeat_and_crop_keep_dynamic_cache_semantics():
    grow, dyn = GrowingCache(), DynamicCache()
    for c in (grow, dyn):
        c.update(*chunk(5, rows=3, seed=1), 0)
        c.batch_select_indices(torch.tensor([2, 0]))
        c.update(*chunk(2, rows=2, seed=2), 0)
        c.batch_repeat_interleave(2)
        c.crop(-3)
        c.update(*chunk(1, rows=4, seed=3), 0)
    assert grow.layers[0].keys.shape == (4, 3, 5, 4)
    assert torch.equal(grow.layers[0].keys, dyn.layers[0].keys)
    assert torch.equal(grow.layers[0].values, dyn.layers[0].values)


def test_row_operations_keep_the_spare_room_so_the_next_append_is_in_place():
    """Selecting, repeating, cropping and copying rows act on the whole buffer: the next append writes into the
    same buffer (DynamicCache's versions left full tensors, copied once more by the next append)."""
    c = GrowingCache()
    c.update(*chunk(5, rows=3, seed=1), 0)  # capacity 5 + 64
    layer = c.layers[0]
    expect = layer.keys[torch.tensor([2, 0])].clone()
    c.batch_select_indices(torch.tensor([2, 0]))
    assert layer._kbuf.shape == (2, 3, 69, 4) and torch.equal(layer.keys, expect)
    c.batch_repeat_interleave(2)
    assert layer._kbuf.shape == (4, 3, 69, 4) and torch.equal(layer.keys[1], expect[0])
    c.crop(-2)
    assert layer.keys.shape[-2] == 3 and torch.equal(layer.keys, expect.repeat_interleave(2, 0)[:, :, :3])
    copy = c.rows(torch.tensor([3, 3, 0]))
    assert copy.layers[0]._kbuf.shape == (3, 3, 69, 4)
    assert torch.equal(copy.layers[0].keys, layer.keys[torch.tensor([3, 3, 0])])
    for cache in (c, copy):
        ptr = cache.layers[0]._kbuf.data_ptr()
        cache.update(*chunk(1, rows=cache.layers[0].keys.shape[0], seed=2), 0)
        assert cache.layers[0]._kbuf.data_ptr() == ptr and cache.get_seq_length() == 4
    assert not torch.equal(copy.layers[0].keys[:2], layer.keys[torch.tensor([3, 3])])  # own buffers, own appends
    with pytest.raises(ValueError, match="negative"):
        c.crop(2)


def test_a_view_taken_before_an_append_keeps_its_numbers():
    """A caller holding the keys of an earlier step (a view of the buffer) sees them unchanged after appends."""
    c = GrowingCache()
    c.update(*chunk(4, seed=1), 0)
    before = c.layers[0].keys
    kept = before.clone()
    c.update(*chunk(2, seed=2), 0)
    assert torch.equal(before, kept) and before.shape[-2] == 4


def test_rows_that_do_not_match_the_cache_are_refused():
    c = GrowingCache()
    c.update(*chunk(4, rows=2), 0)
    with pytest.raises(ValueError, match="cannot append"):
        c.update(*chunk(1, rows=1), 0)  # a slice copy would silently broadcast the row into both


def test_with_gradients_an_append_concatenates_and_the_gradient_is_right():
    c = GrowingCache()
    k0, v0 = (t.requires_grad_() for t in chunk(3, seed=1))
    k1, v1 = (t.requires_grad_() for t in chunk(2, seed=2))
    c.update(k0, v0, 0)
    keys, values = c.update(k1, v1, 0)
    (keys.sum() * 2 + values.square().sum()).backward()
    assert torch.equal(k0.grad, torch.full_like(k0, 2.0)) and torch.equal(k1.grad, torch.full_like(k1, 2.0))
    assert torch.allclose(v1.grad, 2 * v1.detach())


def test_generation_is_identical_with_either_cache(policy, monkeypatch):
    """Two turns of sampled generation over a shared prefix, with the second continuing the first's cache and
    a finished row dropped: the same tokens, log-probs and caches with ``DynamicCache`` and ``GrowingCache``."""
    prefix = list(range(100, 130))
    prompts = [prefix + [7, 8, 9], prefix + [10], prefix + [11, 12]]
    runs = {}
    for cls in (DynamicCache, GrowingCache):
        monkeypatch.setattr(generation, "GrowingCache", cls)
        gens = [torch.Generator().manual_seed(i) for i in range(3)]
        first = generate(policy.model, prompts, max_new_tokens=6, stop_ids={2}, pad_id=2, generator=gens,
                         prefix_ids=prefix)
        state = first.state.select([0, 2])
        nxt = [state.seqs[0] + [13, 14], state.seqs[1] + [15]]
        second = generate(policy.model, nxt, max_new_tokens=6, stop_ids={2}, pad_id=2, generator=gens[:2],
                          state=state)
        assert isinstance(second.state.cache, cls) and second.prompt_tokens < sum(map(len, nxt))
        runs[cls] = (first, second, second.state.cache.layers[0].keys.clone())
    (f0, s0, k0), (f1, s1, k1) = runs[DynamicCache], runs[GrowingCache]
    assert f0.ids == f1.ids and s0.ids == s1.ids
    assert f0.logprobs == f1.logprobs and s0.logprobs == s1.logprobs
    assert torch.equal(k0, k1)
