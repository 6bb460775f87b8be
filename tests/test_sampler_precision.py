"""Sampling in bf16 while the update keeps fp32 (``model.sampler_dtype``, models/sampler_precision.py), on the
tiny model: the frozen base is swapped for its bf16 copy only inside generation, the adapter is shared, and what
it samples is what a bf16 model with the same adapter samples."""

import random

import pytest
import torch

from selfevolve.config import load_config
from selfevolve.envs import FrozenLakeEnv, make_env
from selfevolve.errors import ConfigError
from selfevolve.models import policy as policy_module
from selfevolve.objectives import old_logprobs
from selfevolve.objectives.samples import build_rows
from selfevolve.objectives.update import ppo_update
from selfevolve.rollout.runner import rollout
from selfevolve.tasks.source import SeedTasks
from selfevolve.train.trainer import build_policy, build_prompt

TINY = ["model.name=tiny", "agent.max_new_tokens=6"]


@pytest.fixture(scope="module")
def mixed():
    cfg = load_config(overrides=TINY + ["model.sampler_dtype=bf16"])
    return cfg, build_policy(cfg)


def _frozen(policy):
    return [p for p in policy.model.parameters() if not p.requires_grad]


def test_generation_runs_on_the_bf16_copy_and_the_weights_are_fp32_after(mixed):
    _, policy = mixed
    before = [(p.data_ptr(), p.dtype) for p in _frozen(policy)]
    assert {d for _, d in before} == {torch.float32}
    lora = [p for p in policy.model.parameters() if p.requires_grad]
    assert lora and all(p.dtype == torch.float32 for p in lora)
    seen = {}

    def spy(module, args, kwargs, output):  # the dtype the layers computed in while generating
        seen["dtype"] = output[0].dtype if isinstance(output, tuple) else output.dtype

    layer = policy.body_and_head()[0].layers[0]
    handle = layer.register_forward_hook(spy, with_kwargs=True)
    try:
        gen = policy.generate([policy.encode("go left"), policy.encode("go right")], greedy=True)
    finally:
        handle.remove()
    assert seen["dtype"] == torch.bfloat16
    assert gen.state.cache.layers[0].keys.dtype == torch.bfloat16
    # after it, every frozen weight is the fp32 tensor it was, and the adapter never moved
    assert [(p.data_ptr(), p.dtype) for p in _frozen(policy)] == before
    assert all(p.dtype == torch.float32 for p in lora)
    # the copy: one bf16 tensor per frozen parameter (the tied embedding and head once)
    sw = policy.sampler_weights
    assert len(sw.pairs) == len({id(p) for p in _frozen(policy)})
    assert sw.nbytes == sum(p.numel() * 2 for p in {id(p): p for p in _frozen(policy)}.values())


def test_the_weights_come_back_after_a_failed_generation_and_nested_blocks(mixed, monkeypatch):
    _, policy = mixed
    before = [p.data_ptr() for p in _frozen(policy)]
    sw = policy.sampler_weights
    with policy.sampling():
        with policy.sampling():  # a prefill inside a search block: one swap
            assert {p.dtype for p in _frozen(policy)} == {torch.bfloat16}
        assert {p.dtype for p in _frozen(policy)} == {torch.bfloat16}
    assert [p.data_ptr() for p in _frozen(policy)] == before and sw.depth == 0

    def broken(*args, **kwargs):  # generation failing half way, with the copy in place
        assert {p.dtype for p in _frozen(policy)} == {torch.bfloat16}
        raise RuntimeError("generation failed")

    monkeypatch.setattr(policy_module, "generate", broken)
    with pytest.raises(RuntimeError, match="generation failed"):
        policy.generate([policy.encode("go")])
    assert [p.data_ptr() for p in _frozen(policy)] == before and sw.depth == 0


def test_it_samples_what_a_bf16_model_with_the_same_adapter_samples(mixed):
    """The bf16 copy is the fp32 weights rounded, as loading the tiny model in bf16 rounds them, and the adapter is
    the same tensors: greedy generation gives the same ids and log-probs, also after the adapter changes in place
    (as an optimizer step changes it), without any synchronisation."""
    cfg, policy = mixed
    bf16 = build_policy(load_config(overrides=TINY + ["model.dtype=bf16"]))
    # the rotary frequencies as SmolLM2 loaded in bf16 keeps them (fp32); the tiny model's .to(bf16) rounds them
    fp32_buffers = dict(policy.model.named_buffers())
    for name, buf in bf16.model.named_buffers():
        buf.data = fp32_buffers[name].clone()
    prompts = [policy.encode("the frozen lake"), policy.encode("a map of holes and ice")]
    for step in range(2):
        if step:
            with torch.no_grad():
                for p in policy.model.parameters():
                    if p.requires_grad:
                        p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
        bf16.load_adapter_state(policy.adapter_state())
        a, b = policy.generate(prompts, greedy=True), bf16.generate(prompts, greedy=True)
        assert a.ids == b.ids
        assert a.logprobs == b.logprobs
    fp32 = build_policy(load_config(overrides=TINY))
    fp32.load_adapter_state(policy.adapter_state())
    c = fp32.generate(prompts, greedy=True)
    assert c.logprobs != a.logprobs  # fp32 rounds otherwise: the precision did change


def test_auto_recomputes_pi_old_and_the_update_sees_the_gap(mixed):
    """The sampled log-probs are bf16's; the update's fp32 forward differs from them by rounding, so ``auto``
    recomputes π_old (ratio exactly 1 at one optimizer step) and ``update/sampler_kl`` is not zero."""
    cfg, policy = mixed
    assert old_logprobs.recomputes(policy, cfg.algo)
    plain = build_policy(load_config(overrides=TINY))
    assert not old_logprobs.recomputes(plain, cfg.algo)
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = [t for t in SeedTasks("frozenlake", seed=0).next(2) for _ in range(2)]
    trajs = rollout(policy, [make_env(FrozenLakeEnv, max_turns=2) for _ in tasks], tasks, builder, max_turns=2,
                    generator=[torch.Generator().manual_seed(i) for i in range(len(tasks))])
    rows = build_rows(trajs, [0.5 * (-1) ** i for i in range(len(trajs))])
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=0.0)
    st = ppo_update(policy, opt, rows, cfg.algo, random.Random(0))
    assert st["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert st["update/sampler_kl"] != 0.0
    assert {p.dtype for p in _frozen(policy)} == {torch.float32}


def test_sampler_dtype_settings():
    same = build_policy(load_config(overrides=TINY + ["model.dtype=bf16", "model.sampler_dtype=bf16"]))
    assert same.sampler_weights is None  # already bf16: nothing to copy
    with pytest.raises(ConfigError, match="model.sampler_dtype='bf16'.*model.dtype='fp16'"):
        load_config(overrides=TINY + ["model.dtype=fp16", "model.sampler_dtype=bf16"])
    with pytest.raises(ConfigError, match="sampler_dtype"):
        load_config(overrides=TINY + ["model.sampler_dtype=fp8"])
