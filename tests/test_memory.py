"""The update's memory (issue 43): what its backward recomputes instead of keeping changes no number, the
micro-batch bound from the activations' memory, and the heap the update does not grow with large blocks."""

import ctypes
import subprocess
import sys
import textwrap

import pytest
import torch

import selfevolve.models.recompute as recompute
from selfevolve.config import load_config
from selfevolve.models.loading import load_model
from selfevolve.models import tree_attention
from selfevolve.models.prefix_sharing import EncodedPrefix
from selfevolve.objectives.memory import activation_bytes_per_token, micro_batch_bound
from selfevolve.objectives.samples import Row, collate, shared_prefix_len, turn_cuts
from selfevolve.train.trainer import build_policy


@pytest.fixture(scope="module")
def policy():
    return build_policy(load_config(overrides=["model.name=tiny", "model.dtype=fp32"]))


def _rows() -> list[Row]:
    """Three episodes after a 20-token prefix, cut at their turns (``value_pos``); the first two share their first
    segment (40, 41), so the rows form a tree."""
    prefix = list(range(300, 320))
    turn = [40, 41, 42, 43, 44]
    return [
        Row(ids=prefix + turn + [50, 51, 52, 53], mask=[0] * 23 + [1, 1] + [0, 0, 1, 1], old_logprobs=[0.0] * 4,
            advantages=[1.0] * 4, value_pos=[22, 26]),
        Row(ids=prefix + turn + [60, 61, 62], mask=[0] * 23 + [1, 1] + [0, 1, 1], old_logprobs=[0.0] * 4,
            advantages=[1.0] * 4, value_pos=[22, 25]),
        Row(ids=prefix + [70, 71, 72, 73] + [80, 81], mask=[0] * 22 + [1, 1] + [0, 1], old_logprobs=[0.0] * 3,
            advantages=[1.0] * 3, value_pos=[21, 24]),
    ]


def _forward_backward(policy, rows, enabled: bool, encoded: bool = False):
    """Log-probs, entropies and LoRA gradients of one training forward and backward, and the shapes of the tensors
    autograd was handed to keep. ``encoded``: the shared prefix encoded beforehand, as the update does for a
    minibatch of several micro-batches (``prefix_sharing.EncodedPrefix``)."""
    recompute.ENABLED = enabled
    kept = []

    def pack(t):
        kept.append(tuple(t.shape))
        return t

    try:
        b = collate(rows, policy.pad_id, policy.device)
        policy.model.zero_grad(set_to_none=True)
        prefix_len = shared_prefix_len(rows)
        prefix = EncodedPrefix(policy.body_and_head()[0], rows[0].ids[:prefix_len]) if encoded else None
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logp, ent, _ = policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"], with_entropy=True,
                                               prefix_len=prefix_len, cuts=[turn_cuts(r) for r in rows],
                                               prefix=prefix)
        (logp * torch.linspace(-1, 2, logp.numel())).sum().backward()
        if prefix is not None:
            prefix.backward()
    finally:
        recompute.ENABLED = True
    grads = [p.grad.clone() for p in policy.trainable_parameters()]
    return logp.detach(), ent, grads, kept


def test_recomputed_activations_give_the_same_numbers_bit_for_bit_and_are_not_kept(policy, monkeypatch):
    rows = _rows()
    calls = []
    forward = tree_attention.GroupsAttended.forward
    monkeypatch.setattr(tree_attention.GroupsAttended, "forward",
                        staticmethod(lambda ctx, *a: calls.append(1) or forward(ctx, *a)))
    logp, ent, grads, kept = _forward_backward(policy, rows, enabled=True)
    # on the CPU the attention goes through GroupsAttended, once a layer
    assert len(calls) == policy.model.config.num_hidden_layers
    logp0, ent0, grads0, kept0 = _forward_backward(policy, rows, enabled=False)
    assert logp.shape == (11,) and torch.equal(logp, logp0) and torch.equal(ent, ent0)
    assert len(grads) == len(grads0) > 0 and all(torch.equal(g, g0) for g, g0 in zip(grads, grads0))
    assert any(g.abs().sum() > 0 for g in grads)
    # The packed sequence: the prefix (20); level 0: (40, 41) once for rows 0 and 1, (70) for row 2; level 1:
    # (42, 43, 44, 50), (42, 43, 44), (71, 72, 73); level 2: (51, 52, 53), (60, 61, 62), (80, 81): 20 + 3 + 10 + 8
    # = 41 tokens. Without recomputation each layer's MLP keeps three [1, 41, intermediate] tensors (gate,
    # act(gate), up), with it two (gate and up: act is recomputed).
    config = policy.model.config
    width = (1, 41, config.intermediate_size)
    assert kept0.count(width) == 3 * config.num_hidden_layers
    assert kept.count(width) == 2 * config.num_hidden_layers
    # the attention keeps its inputs, outputs and statistics (GroupsAttended); without recomputation also its
    # gathered copies
    assert len(kept) < len(kept0)


def test_with_the_fused_kernel_switched_off_the_attention_goes_under_the_checkpoint(policy, monkeypatch):
    """``sdpa_kernel`` without FLASH_ATTENTION makes SDPA run its math backend on the CPU: GroupsAttended (which runs
    the fused kernel) then stands aside, and the recomputed numbers are still the plain forward's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    monkeypatch.setattr(tree_attention.GroupsAttended, "forward", staticmethod(lambda ctx, *a: 1 / 0))
    rows = _rows()
    with sdpa_kernel(SDPBackend.MATH):
        logp, _, grads, _ = _forward_backward(policy, rows, enabled=True)
        logp0, _, grads0, _ = _forward_backward(policy, rows, enabled=False)
    assert torch.equal(logp, logp0) and all(torch.equal(g, g0) for g, g0 in zip(grads, grads0))


def test_with_the_prefix_encoded_beforehand_too(policy):
    """The same with the shared prefix encoded in a forward of its own: the groups' attention then also reads the
    prefix's keys and values, whose gradients reach the prefix's forward through them."""
    rows = _rows()
    logp, ent, grads, _ = _forward_backward(policy, rows, enabled=True, encoded=True)
    logp0, ent0, grads0, _ = _forward_backward(policy, rows, enabled=False, encoded=True)
    assert logp.shape == (11,) and torch.equal(logp, logp0) and torch.equal(ent, ent0)
    assert all(torch.equal(g, g0) for g, g0 in zip(grads, grads0)) and any(g.abs().sum() > 0 for g in grads)


def test_the_micro_batch_bound_from_the_activations_memory(policy):
    # SmolLM2-135M in fp32: 30 layers × (12 × 576 + 4 × 1,536) × 4 bytes = 30 × 13,056 × 4 = 1,566,720 bytes
    assert activation_bytes_per_token(30, 576, 1536, 4) == 1_566_720
    # 2.5e9 // 1,566,720 = 1,595 (1,596 tokens would take 2,500,485,120 bytes); the default 3.0e9: 1,914
    # (1,915 would take 3,000,268,800)
    assert int(2.5e9 // 1_566_720) == 1595 and int(3.0e9 // 1_566_720) == 1914
    assert load_config().algo.micro_batch_gb == 3.0
    config = policy.model.config
    per_token = config.num_hidden_layers * (12 * config.hidden_size + 4 * config.intermediate_size) * 4
    assert activation_bytes_per_token(config.num_hidden_layers, config.hidden_size, config.intermediate_size, 4) == per_token
    # the tiny model: a token costs kilobytes, so the token bound is the smaller one; a tight budget wins
    assert micro_batch_bound(policy.model, 4096, 2.5) == 4096
    assert micro_batch_bound(policy.model, 4096, None) == 4096
    assert micro_batch_bound(policy.model, 4096, 0.001) == 1_000_000 // per_token
    # a bf16 body on a CPU is counted at 4 bytes a number as well (its norms and fp32 adapters keep fp32 activations)
    half = load_model("tiny", "bf16")[0]
    assert micro_batch_bound(half, 4096, 0.001) == 1_000_000 // per_token


def test_the_update_does_not_grow_the_heap_with_large_blocks():
    """In a fresh process (a heap without large free chunks), an 8 MiB block: inside the update's block, an mmap of
    its own; outside it (the run's settings, ``models/allocator.py``), from the heap, which keeps its space when
    it is freed; inside again, from that free space."""
    if not sys.platform.startswith("linux"):
        pytest.skip("needs Linux: the heap settings under test are glibc's mallopt (CI and this machine run it)")
    try:
        ctypes.CDLL("libc.so.6").gnu_get_libc_version
    except (OSError, AttributeError):
        pytest.skip("needs glibc: musl and other C libraries ignore mallopt, so there is no setting to test")
    script = textwrap.dedent("""
        import ctypes
        from selfevolve.models.allocator import heap_not_grown_by_large_blocks, keep_freed_memory
        class Info(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in
                        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype, libc.malloc.restype = Info, ctypes.c_void_p
        assert keep_freed_memory()
        size = 8 << 20
        def mapped_by_one_block():
            before = libc.mallinfo2().hblkhd
            p = libc.malloc(size)
            after = libc.mallinfo2().hblkhd
            libc.free(ctypes.c_void_p(p))
            return after - before
        with heap_not_grown_by_large_blocks():
            inside = mapped_by_one_block()
        outside = mapped_by_one_block()
        with heap_not_grown_by_large_blocks():
            again = mapped_by_one_block()
        print(inside, outside, again)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})
    inside, outside, again = map(int, out.stdout.split())
    assert inside >= 8 << 20  # no free chunk fits it: an mmap of its own (the block and its page-rounded header)
    assert outside == 0  # the run's settings: the heap grows, and keeps the block's space when it is freed
    assert again == 0  # that free space fits the next one: served from the heap, in the update too


def test_the_evaluation_plays_in_batches_and_its_episodes_do_not_change(policy, monkeypatch):
    """``eval.batch`` bounds the rows generated at once (the generation cache is the evaluation's memory); greedy
    episodes are the same whichever batch plays them."""
    import selfevolve.train.evaluate as evaluate_module
    from selfevolve.build import build_prompt
    from selfevolve.envs import FrozenLakeEnv, make_env

    builder = build_prompt(load_config(overrides=["model.name=tiny"]), policy, make_env(FrozenLakeEnv))
    played = evaluate_module.rollout
    sizes = []

    def counted(policy, envs, tasks, *args, **kwargs):
        sizes.append(len(tasks))
        return played(policy, envs, tasks, *args, **kwargs)

    monkeypatch.setattr(evaluate_module, "rollout", counted)
    options = {"split": "test"}
    _, at_once = evaluate_module.greedy_rollouts(policy, FrozenLakeEnv, options, builder, episodes=7,
                                                 seed_offset=1_000_000, batch=7)
    _, batched = evaluate_module.greedy_rollouts(policy, FrozenLakeEnv, options, builder, episodes=7,
                                                 seed_offset=1_000_000, batch=3)
    assert sizes == [7, 3, 3, 1]
    assert [t.task.id for t in batched] == [t.task.id for t in at_once]
    assert [[s.action_ids for s in t.steps] for t in batched] == [[s.action_ids for s in t.steps] for t in at_once]
    assert [t.reward for t in batched] == [t.reward for t in at_once]
    assert load_config().eval.batch == 32
