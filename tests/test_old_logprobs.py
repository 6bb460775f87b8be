"""π_old of the PPO ratio (``algo.old_logprobs``, objectives/old_logprobs.py): the sampled log-probs or the
trainer's own, on hand numbers and through the real update on the tiny model."""

import random

import pytest
import torch

from selfevolve.config import load_config
from selfevolve.envs import FrozenLakeEnv, make_env
from selfevolve.objectives import old_logprobs
from selfevolve.objectives.samples import build_rows, row_logprobs
from selfevolve.objectives.update import ppo_update
from selfevolve.rollout.runner import rollout
from selfevolve.tasks.source import SeedTasks
from selfevolve.train.trainer import build_policy, build_prompt


def test_current_as_old_and_the_sampler_kl_by_hand():
    """Three tokens, the middle one guided: π_old is the current log-prob detached except there; the ratio is 1 and
    its gradient that of log π_θ. sampler_kl = mean over the unguided tokens of sampled − current =
    ((−1 − −1.2) + (−3 − −2.9)) / 2 = (0.2 − 0.1) / 2 = 0.05."""
    sampled = torch.tensor([-1.0, -2.0, -3.0])
    current = torch.tensor([-1.2, -2.2, -2.9], requires_grad=True)
    guided = torch.tensor([False, True, False])
    old = old_logprobs.current_as_old(sampled, current, guided)
    assert old.tolist() == pytest.approx([-1.2, -2.0, -2.9])
    ratio = torch.exp(current - old)
    assert ratio.tolist() == pytest.approx([1.0, torch.exp(torch.tensor(-0.2)).item(), 1.0])
    ratio.sum().backward()
    # d ratio / d current = ratio: 1 where π_old is the detached current (∇ log π_θ), e^−0.2 at the guided token
    assert current.grad.tolist() == pytest.approx([1.0, float(torch.exp(torch.tensor(-0.2))), 1.0])
    gap = old_logprobs.SamplerGap()
    gap.add(sampled, current, guided)
    assert gap.metrics()["update/sampler_kl"] == pytest.approx(0.05, abs=1e-6)
    none = old_logprobs.SamplerGap()
    none.add(sampled, current, torch.ones(3, dtype=torch.bool))
    assert none.metrics() == {}  # no unguided token: nothing logged


@pytest.fixture(scope="module")
def setting():
    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=6"])
    policy = build_policy(cfg)
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = [t for t in SeedTasks("frozenlake", seed=0).next(2) for _ in range(3)]
    trajs = rollout(policy, [make_env(FrozenLakeEnv, max_turns=3) for _ in tasks], tasks, builder, max_turns=3,
                    generator=[torch.Generator().manual_seed(i) for i in range(len(tasks))])
    return policy, trajs


def _rows(trajs, shift: float):
    """Training rows whose sampled log-probs are off by ``shift`` (a sampler that rounds differently)."""
    rows = build_rows(trajs, [0.5 * (-1) ** i for i in range(len(trajs))])
    for r in rows:
        r.old_logprobs = [x + shift for x in r.old_logprobs]
    return rows


def _update(policy, rows, mode: str, *extra):
    state = {k: v.clone() for k, v in policy.adapter_state().items()}
    opt = torch.optim.SGD(policy.trainable_parameters(), lr=0.1)
    algo = load_config(overrides=[f"algo.old_logprobs={mode}", *extra]).algo
    st = ppo_update(policy, opt, rows, algo, random.Random(0))
    after = {k: v.clone() for k, v in policy.adapter_state().items()}
    policy.load_adapter_state(state)
    return st, after


def test_recompute_makes_the_first_ratio_one_and_steps_as_if_the_sampler_had_matched(setting):
    """Sampled log-probs 0.1 above the trainer's: with ``sampled`` the first step's ratio is e^−0.1 and
    sampler_kl 0.1; with ``recompute`` (one optimizer step: the update's own forward) the ratio is exactly 1, no
    token is clipped, sampler_kl still reports 0.1, and the adapter moves exactly as ``sampled`` moves it when the
    sampler had given the trainer's own log-probs."""
    policy, trajs = setting
    off = _rows(trajs, 0.1)
    st_s, _ = _update(policy, off, "sampled")
    assert st_s["ratio_mean"] == pytest.approx(float(torch.exp(torch.tensor(-0.1))), rel=1e-4)
    assert st_s["update/sampler_kl"] == pytest.approx(0.1, abs=1e-4)
    st_r, w_r = _update(policy, _rows(trajs, 0.1), "recompute")
    assert st_r["ratio_mean"] == 1.0 and st_r["clip_frac"] == 0.0 and st_r["approx_kl"] == 0.0
    assert st_r["update/sampler_kl"] == pytest.approx(0.1, abs=1e-4)
    exact = _rows(trajs, 0.0)
    for r, lp in zip(exact, row_logprobs(policy, exact, 4096)):
        r.old_logprobs = lp
    st_e, w_e = _update(policy, exact, "sampled")
    assert st_e["loss/policy"] == pytest.approx(st_r["loss/policy"], abs=1e-6)
    assert all(torch.allclose(w_r[k], w_e[k], atol=1e-6) for k in w_r)


def test_recompute_over_several_steps_restates_unguided_rows_before_the_first(setting, monkeypatch):
    """Two minibatches: the first forward would not be at the sampling weights for the second, so one no-grad
    forward restates π_old first — unguided rows only; a guided row keeps its sampled log-probs. sampler_kl is
    measured by that forward: 0.1 (the shift of the unguided rows' sampled log-probs), not 0."""
    policy, trajs = setting
    rows = _rows(trajs, 0.1)
    rows[0].guided = True
    kept = list(rows[0].old_logprobs)
    truth = row_logprobs(policy, rows, 4096)
    calls = []
    restate = old_logprobs.restate
    monkeypatch.setattr(old_logprobs, "restate", lambda items, *a: calls.append(len(items)) or restate(items, *a))
    st, _ = _update(policy, rows, "recompute", "algo.minibatches=2")
    assert calls == [len(rows)]
    assert rows[0].old_logprobs == kept
    for r, lp in zip(rows[1:], truth[1:]):
        assert r.old_logprobs == pytest.approx(lp, abs=1e-5)
    assert st["update/sampler_kl"] == pytest.approx(0.1, abs=1e-4)


def test_a_guided_row_keeps_its_sampled_log_probs_in_the_one_step_update(setting):
    """All rows guided (self-navigating's off-policy rows): ``recompute`` leaves their ratio as sampled, e^−0.1
    for a sampled log-prob 0.1 above the trainer's, and there is no unguided token to log sampler_kl over."""
    policy, trajs = setting
    rows = _rows(trajs, 0.1)
    for r in rows:
        r.guided = True
    st, _ = _update(policy, rows, "recompute")
    assert st["ratio_mean"] == pytest.approx(float(torch.exp(torch.tensor(-0.1))), rel=1e-4)
    assert "update/sampler_kl" not in st


def test_auto_recomputes_in_half_precision_only():
    """``auto``: the trainer's log-probs under a bf16 body, the sampled ones in fp32; the explicit modes win."""
    algo = lambda mode: load_config(overrides=[f"algo.old_logprobs={mode}"]).algo  # noqa: E731
    for dtype, auto in (("fp32", False), ("bf16", True)):
        policy = build_policy(load_config(overrides=["model.name=tiny", f"model.dtype={dtype}"]))
        assert old_logprobs.recomputes(policy, algo("auto")) is auto
        assert old_logprobs.recomputes(policy, algo("sampled")) is False
        assert old_logprobs.recomputes(policy, algo("recompute")) is True
    assert load_config().algo.old_logprobs == "auto"
    with pytest.raises(Exception, match="old_logprobs"):
        load_config(overrides=["algo.old_logprobs=rollout"])
