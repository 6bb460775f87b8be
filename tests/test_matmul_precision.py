"""The frozen body's matrix products in bf16, everything else in fp32 (``model.matmul_dtype``,
models/matmul_precision.py), on the tiny model: each body linear rounds its input and weight to bf16 and returns
fp32, and the adapter's delta is added to that fp32 output, where a bf16 model rounds it away."""

import random

import pytest
import torch
import torch.nn.functional as F

from served_run import make_run
from selfevolve.config import load_config
from selfevolve.envs import FrozenLakeEnv, make_env
from selfevolve.errors import ConfigError
from selfevolve.objectives import old_logprobs
from selfevolve.objectives.samples import build_rows
from selfevolve.objectives.update import ppo_update
from selfevolve.rollout.runner import rollout
from selfevolve.tasks.source import SeedTasks
from selfevolve.train.run import load_run
from selfevolve.train.trainer import build_policy, build_prompt

TINY = ["model.name=tiny", "agent.max_new_tokens=6"]


@pytest.fixture(scope="module")
def mixed():
    cfg = load_config(overrides=TINY + ["model.matmul_dtype=bf16"])
    return cfg, build_policy(cfg)


def _q_proj(policy):
    return policy.body_and_head()[0].layers[0].self_attn.q_proj  # peft's LoRA layer around the frozen linear


def test_the_body_holds_bf16_weights_and_everything_else_stays_fp32(mixed):
    _, policy = mixed
    body, head = policy.body_and_head()
    frozen = {n: p for n, p in policy.model.named_parameters() if not p.requires_grad}
    linear = {n for n in frozen if n.endswith(("proj.weight", "proj.base_layer.weight"))}
    assert len(linear) == 7 * len(body.layers)  # q, k, v, o, gate, up, down in every layer
    assert {frozen[n].dtype for n in linear} == {torch.bfloat16}
    assert {p.dtype for n, p in frozen.items() if n not in linear} == {torch.float32}  # norms, embedding = head
    assert head.weight.dtype == torch.float32
    assert {p.dtype for p in policy.trainable_parameters()} == {torch.float32}
    assert policy.matmul_dtype == torch.bfloat16
    logits = policy.model(torch.tensor([[1, 2, 3]])).logits
    assert logits.dtype == torch.float32


def test_only_the_product_rounds_and_the_delta_is_added_in_fp32(mixed):
    """By hand: the frozen layer returns F.linear(bf16(x), bf16(W)) in fp32, and the LoRA layer returns that plus
    the adapter's fp32 delta. In a bf16 model the same delta, a ten-thousandth of the output, rounds away on
    most outputs (bf16 keeps 8 bits: half its last bit is 2^-9 of the value)."""
    _, policy = mixed
    q = _q_proj(policy)
    x = torch.randn(4, q.base_layer.in_features, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base = q.base_layer(x)
        assert base.dtype == torch.float32
        assert torch.equal(base, F.linear(x.bfloat16(), q.base_layer.weight).float())
        b = q.lora_B["default"].weight
        b.copy_(torch.randn(b.shape, generator=torch.Generator().manual_seed(1)))
        delta = q.lora_B["default"](q.lora_A["default"](x)) * q.scaling["default"]
        b.mul_(1e-4 * base.abs().mean() / delta.abs().mean())  # the delta a ten-thousandth of the output
        delta = q.lora_B["default"](q.lora_A["default"](x)) * q.scaling["default"]
        out = q(x)
        assert torch.allclose(out - base, delta, rtol=0, atol=2e-6)  # fp32: its last bit at |out| < 16 is 1e-6
        assert (out != base).float().mean() > 0.99  # the delta moved every output
        bf16 = build_policy(load_config(overrides=TINY + ["model.dtype=bf16"]))
        bf16.load_adapter_state(policy.adapter_state())
        qb = _q_proj(bf16)
        xb = x.bfloat16()
        kept = (qb(xb) != qb.base_layer(xb)).float().mean()
        assert kept < 0.5  # rounded away on most outputs
        b.zero_()


def test_auto_recomputes_pi_old_and_the_weights_stay_as_they_are(mixed):
    """A decode step and the update's packed forward round their bf16 products differently, so ``auto``
    recomputes π_old (ratio exactly 1 at one optimizer step); the update leaves the body in bf16 and trains the
    fp32 adapter."""
    cfg, policy = mixed
    assert old_logprobs.recomputes(policy, cfg.algo)
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = [t for t in SeedTasks("frozenlake", seed=0).next(2) for _ in range(2)]
    trajs = rollout(policy, [make_env(FrozenLakeEnv, max_turns=2) for _ in tasks], tasks, builder, max_turns=2,
                    generator=[torch.Generator().manual_seed(i) for i in range(len(tasks))])
    rows = build_rows(trajs, [0.5 * (-1) ** i for i in range(len(trajs))])
    before = [p.detach().clone() for p in policy.trainable_parameters()]
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    st = ppo_update(policy, opt, rows, cfg.algo, random.Random(0))
    assert st["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert "update/sampler_kl" in st
    assert any(not torch.equal(a, p) for a, p in zip(before, policy.trainable_parameters()))
    assert _q_proj(policy).base_layer.weight.dtype == torch.bfloat16


def test_export_loads_the_run_in_full_precision(tmp_path):
    root, _ = make_run(tmp_path / "run", overrides=("model.matmul_dtype=bf16",))
    cfg, trained, _ = load_run(root)
    assert _q_proj(trained).base_layer.weight.dtype == torch.bfloat16  # as it trained and evaluates
    _, full, _ = load_run(root, full_precision=True)  # what export merges into
    assert {p.dtype for p in full.model.parameters()} == {torch.float32} and full.matmul_dtype is None
    assert cfg.model.matmul_dtype == "bf16"


def test_matmul_dtype_settings():
    same = build_policy(load_config(overrides=TINY + ["model.dtype=bf16", "model.matmul_dtype=bf16"]))
    assert same.matmul_dtype is None  # already bf16 everywhere: nothing to change
    with pytest.raises(ConfigError, match="model.matmul_dtype='bf16'.*model.dtype='fp16'"):
        load_config(overrides=TINY + ["model.dtype=fp16", "model.matmul_dtype=bf16"])
    with pytest.raises(ConfigError, match="model.matmul_dtype='bf16' and model.sampler_dtype='bf16'"):
        load_config(overrides=TINY + ["model.sampler_dtype=bf16", "model.matmul_dtype=bf16"])
    with pytest.raises(ConfigError, match="matmul_dtype"):
        load_config(overrides=TINY + ["model.matmul_dtype=fp8"])


def test_bf16_update_computes_in_bf16_inside_the_update_only():
    """``bf16_update``: generation keeps the fp32 products (greedy ids and log-probs exactly an fp32 policy's), the
    update's forward and backward run on the bf16 copy (its first-step ratio exactly 1 with π_old recomputed), and
    the weights are fp32 again after it, also after an update that failed half way."""
    cfg = load_config(overrides=TINY + ["model.matmul_dtype=bf16_update"])
    policy, fp32 = build_policy(cfg), build_policy(load_config(overrides=TINY))
    q = _q_proj(policy)
    full = q.base_layer.weight.data_ptr()
    assert q.base_layer.weight.dtype == torch.float32 and policy.matmul_dtype == torch.bfloat16
    prompts = [policy.encode("the frozen lake"), policy.encode("a map of holes and ice")]
    a, b = policy.generate(prompts, greedy=True), fp32.generate(prompts, greedy=True)
    assert a.ids == b.ids and a.logprobs == b.logprobs
    seen = []
    handle = q.base_layer.register_forward_hook(lambda m, args, out: seen.append(m.weight.dtype))
    try:
        builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
        tasks = [t for t in SeedTasks("frozenlake", seed=0).next(2) for _ in range(2)]
        trajs = rollout(policy, [make_env(FrozenLakeEnv, max_turns=2) for _ in tasks], tasks, builder, max_turns=2,
                        generator=[torch.Generator().manual_seed(i) for i in range(len(tasks))])
        assert set(seen) == {torch.float32}
        seen.clear()
        rows = build_rows(trajs, [0.5 * (-1) ** i for i in range(len(trajs))])
        assert old_logprobs.recomputes(policy, cfg.algo)
        opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
        st = ppo_update(policy, opt, rows, cfg.algo, random.Random(0))
        assert set(seen) == {torch.bfloat16}
    finally:
        handle.remove()
    assert st["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert q.base_layer.weight.data_ptr() == full and policy.update_products.depth == 0

    def broken(*args, **kwargs):
        raise RuntimeError("update failed")

    with pytest.raises(RuntimeError, match="update failed"):
        ppo_update(policy, opt, rows, cfg.algo, random.Random(0), extra=broken)
    assert q.base_layer.weight.data_ptr() == full and policy.update_products.depth == 0


def test_bf16_update_covers_every_objective_and_acting_loads_make_no_copy(tmp_path):
    """Self-AC's update does not go through ``ppo_update``: the trainer's whole update stage runs inside
    ``Policy.updating``. A run loaded to act (evaluation, serving, a rollout worker) makes no bf16 copy."""
    from selfevolve import Trainer

    out = tmp_path / "run"
    cfg = load_config(overrides=[
        "train.warm_start_steps=0", "train.warm_start_tasks=null", "model.name=tiny", "agent.max_new_tokens=4",
        "train.tasks_per_step=2", "algo.group_size=4", "eval.episodes=2", "train.progress=false",
        "train.eval_every=0", "algo.name=self_ac", "model.matmul_dtype=bf16_update", "train.steps=1",
        "env.max_turns=2", f"train.out_dir={out}"])
    trainer = Trainer(cfg)
    seen = []
    layer = _q_proj(trainer.policy).base_layer
    handle = layer.register_forward_hook(lambda m, args, o: seen.append((torch.is_grad_enabled(), m.weight.dtype)))
    try:
        trainer.train()
    finally:
        handle.remove()
    assert {dtype for grad, dtype in seen if grad} == {torch.bfloat16}  # every forward with gradients: the update's
    assert torch.float32 in {dtype for grad, dtype in seen if not grad}  # generation: fp32 products
    assert layer.weight.dtype == torch.float32
    _, acting, _ = load_run(out)
    assert acting.update_products is None and acting.matmul_dtype is None


def test_auto_takes_bf16_update_only_on_a_cpu_with_bf16_and_the_default_dtype(monkeypatch):
    """``model.matmul_dtype=auto`` (the default): bf16_update where the model is fp32 because it runs on a CPU
    (``model.dtype=auto``) with bf16 arithmetic and generation keeps its precision; 'same' everywhere else."""
    from selfevolve.models.matmul_precision import CPU_BF16_ENV, auto_choice

    def choice(*overrides):
        return auto_choice(load_config(overrides=TINY + list(overrides)).model)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU, whatever host runs the tests
    monkeypatch.setenv(CPU_BF16_ENV, "1")
    assert load_config(overrides=TINY).model.matmul_dtype == "auto"
    assert choice() == "bf16_update"
    assert choice("model.dtype=fp32") == "same"  # fp32 asked for by name: fp32 throughout
    assert choice("model.sampler_dtype=bf16") == "same"  # would conflict (both lower the precision)
    assert choice("model.dtype=fp16") == "same" and choice("model.matmul_dtype=bf16") == "bf16"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert choice() == "same"  # model.dtype=auto is bf16 on a GPU already
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    assert choice() == "same"
    monkeypatch.setenv(CPU_BF16_ENV, "yes")
    with pytest.raises(ConfigError, match="SELFEVOLVE_CPU_BF16='yes': set 1 .* 0 .* or nothing"):
        choice()
    monkeypatch.delenv(CPU_BF16_ENV)
    assert choice() == ("bf16_update" if torch.cpu._is_avx512_bf16_supported() else "same")


def test_auto_is_recorded_in_the_run_and_a_resume_keeps_the_runs_choice(tmp_path, monkeypatch):
    """The trainer makes ``auto`` concrete before it writes config.yaml; a resume on a machine that would choose
    otherwise keeps the run's choice (no 'settings differ'), and a run saved before the setting existed resumes
    with 'same', the precision it ran with."""
    import yaml

    from selfevolve import Trainer
    from selfevolve.models.matmul_precision import CPU_BF16_ENV

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU, whatever host runs the tests
    out = tmp_path / "run"
    base = ["train.warm_start_steps=0", "train.warm_start_tasks=null", "model.name=tiny", "agent.max_new_tokens=4",
            "train.tasks_per_step=1", "algo.group_size=2", "eval.episodes=2", "train.progress=false",
            "train.eval_every=0", "env.max_turns=2", f"train.out_dir={out}"]
    monkeypatch.setenv(CPU_BF16_ENV, "1")
    trainer = Trainer(load_config(overrides=base + ["train.steps=1"]))
    assert trainer.policy.update_products is not None and trainer.cfg.model.matmul_dtype == "bf16_update"
    trainer.train()
    assert yaml.safe_load((out / "config.yaml").read_text())["model"]["matmul_dtype"] == "bf16_update"
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    resumed = Trainer(load_config(overrides=base + ["train.steps=2", "train.resume=true"]))
    assert resumed.resumed and resumed.policy.update_products is not None
    saved = yaml.safe_load((out / "config.yaml").read_text())
    del saved["model"]["matmul_dtype"]  # as a run saved before the setting existed
    (out / "config.yaml").write_text(yaml.safe_dump(saved))
    monkeypatch.setenv(CPU_BF16_ENV, "1")
    old = Trainer(load_config(overrides=base + ["train.steps=3", "train.resume=true"]))
    assert old.resumed and old.policy.update_products is None and old.cfg.model.matmul_dtype == "same"


def test_resolve_products_keeps_what_the_resumed_run_ran_with(monkeypatch):
    """``build.resolve_products``: a new run takes this CPU's choice; a resumed one keeps its saved value, and a
    saved config without the setting (older than it) ran with 'same'. A setting named by the user stays."""
    from selfevolve.build import resolve_products
    from selfevolve.models.matmul_precision import CPU_BF16_ENV

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(CPU_BF16_ENV, "1")
    cfg = load_config(overrides=TINY)

    def chosen(saved):
        return resolve_products(cfg, saved).model.matmul_dtype

    assert chosen(None) == "bf16_update"
    assert chosen({}) == chosen({"model": {}}) == chosen({"model": None}) == "same"
    assert chosen({"model": {"matmul_dtype": "bf16"}}) == "bf16"
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    assert chosen(None) == "same" and chosen({"model": {"matmul_dtype": "bf16_update"}}) == "bf16_update"
    named = load_config(overrides=TINY + ["model.matmul_dtype=bf16"])
    assert resolve_products(named, {"model": {"matmul_dtype": "same"}}) is named
