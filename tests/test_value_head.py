"""The value head on the policy's own body: where it reads, that one pass serves actor and critic, that it
learns, and how it is saved and loaded."""

import random

import pytest
import torch

from selfevolve.config import LoraConfig, load_config
from selfevolve.errors import SelfEvolveError
from selfevolve.models.loading import load_model
from selfevolve.models.policy import Policy
from selfevolve.models.value_head import ValueHead
from selfevolve.objectives.samples import build_rows, collate
from selfevolve.objectives.update import compute_values, ppo_update
from selfevolve.types import Step, Task, Trajectory


def make_policy(critic=True, seed=0):
    model, tok = load_model("tiny", "fp32", seed=seed)
    policy = Policy(model, tok, lora=LoraConfig(r=4, alpha=8))
    if critic:
        policy.attach_value_head("linear")
        torch.manual_seed(seed)
        torch.nn.init.normal_(policy.value_head.net.weight, std=0.5)  # a non-trivial head (it starts at zero)
    return policy


def two_turn_episode(shared=(1, 2, 3, 4, 5, 6), ret=(0.5, 1.0)):
    """An incremental two-turn chat: turn 2's prompt extends turn 1's prompt + reply (one packed row)."""
    p1 = [*shared, 20, 21]
    a1 = [30, 31]
    p2 = [*p1, *a1, 22, 23]
    a2 = [32]
    steps = [Step(prompt_ids=p1, action_ids=a1, logprobs=[-1.0, -1.0]), Step(prompt_ids=p2, action_ids=a2, logprobs=[-1.0])]
    return Trajectory(task=Task(id="t", env="x", seed=0), steps=steps), list(ret)


def test_value_positions_are_each_turns_last_prompt_token():
    traj, ret = two_turn_episode()
    (row,) = build_rows([traj], [[0.1, 0.2]], returns=[ret], values=[[0.0, 0.0]])
    assert row.value_pos == [7, 11]  # p1 (8 ids) ends at index 7; p2 = p1 + a1 + 2 ids (12) ends at 11
    assert row.ids[row.value_pos[0] + 1] == 30 and row.ids[row.value_pos[1] + 1] == 32  # the reply follows
    assert row.turns == [(0, 0), (0, 1)] and row.returns == [0.5, 1.0]


def test_one_pass_gives_actor_logprobs_and_critic_values_of_separate_forwards():
    policy = make_policy()
    trajs = [two_turn_episode()[0], two_turn_episode()[0]]
    trajs[1].steps[0].prompt_ids[-1] = 24  # different rows after the shared prefix
    trajs[1].steps[1].prompt_ids[7] = 24
    rows = build_rows(trajs, [[0.0, 0.0]] * 2)
    b = collate(rows, policy.pad_id, policy.device)
    with torch.no_grad():
        logp, _, values = policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"],
                                              value_mask=b["value_mask"], prefix_len=5)
        plain_logp, _ = policy.action_logprobs(b["input_ids"], b["attention_mask"], b["loss_mask"])
        # V(s_t) by hand: the head on the body's last hidden state of the prompt alone
        body = policy.model.get_base_model().get_decoder()
        want = []
        for t in trajs:
            for s in t.steps:
                h = body(input_ids=torch.tensor([s.prompt_ids], device=policy.device)).last_hidden_state[0, -1]
                want.append(policy.value_head(h))
    torch.testing.assert_close(logp, plain_logp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, torch.stack(want), atol=1e-5, rtol=1e-5)
    recomputed = torch.tensor(sum(compute_values(policy, rows, 4096), []), device=values.device)
    torch.testing.assert_close(recomputed, values, atol=1e-5, rtol=1e-5)


def test_the_value_loss_trains_the_head_and_the_shared_body():
    policy = make_policy()
    cfg = load_config(overrides=["algo.lr=5e-3"])
    trajs = [two_turn_episode(ret=(1.0, -1.0))[0] for _ in range(2)]
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=cfg.algo.lr)
    lora_before = {k: v.clone() for k, v in policy.adapter_state().items() if "lora_B" in k}
    losses = []
    for _ in range(15):
        values = [compute_values(policy, build_rows([t], [[0.0, 0.0]]), 4096)[0] for t in trajs]
        rows = build_rows(trajs, [[0.0, 0.0]] * 2, returns=[[1.0, -1.0]] * 2, values=values)
        st = ppo_update(policy, opt, rows, cfg.algo, random.Random(0), vf_coef=1.0, vf_clip=None)
        losses.append(st["loss/value"])
    assert losses[-1] < 0.1 * losses[0], losses
    moved = [k for k, v in policy.adapter_state().items() if k in lora_before and not torch.equal(v, lora_before[k])]
    assert moved  # the critic's gradient reaches the LoRA body it shares with the actor


def test_value_head_is_saved_with_the_adapter_and_loaded_strictly():
    critic, plain = make_policy(seed=1), make_policy(critic=False)
    state = critic.adapter_state()
    assert {"value_head.net.weight", "value_head.net.bias"} <= set(state)
    other = make_policy(seed=2)
    other.load_adapter_state(state)
    assert torch.equal(other.value_head.net.weight, critic.value_head.net.weight)
    with pytest.raises(SelfEvolveError, match="has a value head"):
        plain.load_adapter_state(state)
    plain.load_adapter_state(state, value_head="ignore")  # evaluation: acting needs no critic
    with pytest.raises(SelfEvolveError, match="has no value head"):
        other.load_adapter_state(plain.adapter_state())
    fresh = make_policy(seed=3)
    w = fresh.value_head.net.weight.clone()
    fresh.load_adapter_state(plain.adapter_state(), value_head="optional")  # e.g. PPO from a GRPO warm start
    assert torch.equal(fresh.value_head.net.weight, w)


def test_value_head_kinds_start_at_zero():
    for kind in ("linear", "mlp"):
        head = ValueHead(16, kind)
        assert torch.equal(head(torch.randn(3, 16)), torch.zeros(3))
    with pytest.raises(ValueError, match="allowed: linear, mlp"):
        ValueHead(16, "deep")
