"""Self-AC: the shadow prompt's exactness, the TD(1..n) critic by hand, and the value head's life cycle.

(a) actor log-probs from the single pass equal those of the episode without critic prompts; (b) each V(s_k)
equals a separate forward of "prefix up to s_k + cp_k" — both in fp32 on `tiny`, with real FrozenLake rollouts,
for both attention implementations available on CPU; (c) TD targets and losses against hand-computed numbers.
The end-to-end learning run is in tests/test_train.py (self_ac: reward rises, the critic's loss ratio falls).
"""

import json
import math
import random

import pytest
import torch
from safetensors.torch import load_file

from selfevolve import Trainer, load_config
from selfevolve.envs import FrozenLakeEnv, make_env
from selfevolve.errors import ConfigError
from selfevolve.objectives.samples import build_rows, collate
from selfevolve.objectives.self_ac.critic import critic_loss, returns_and_advantages, td_target, turn_logprobs
from selfevolve.models import decode_attention
from selfevolve.objectives.self_ac.shadow import (build_shadow_episode, check_shadow_attention, collate_shadow,
                                                 critic_prompt_ids, critic_rows, final_state_ids, shadow_mask)
from selfevolve.objectives.self_ac.update import episode_forward, episode_values, self_ac_losses, self_ac_update
from selfevolve.rollout.runner import rollout
from selfevolve.tasks.source import SeedTasks
from selfevolve.train.run import load_run
from selfevolve.train.trainer import build_policy, build_prompt
from selfevolve.types import Step, Task, Trajectory

close = lambda a, b: torch.testing.assert_close(torch.as_tensor(a).double(), torch.as_tensor(b, dtype=torch.float64),
                                                 atol=1e-6, rtol=1e-6)


def hand_episode():
    """Two turns of an incremental chat with a 3-token critic prompt (ids chosen by hand)."""
    p0 = [1, 2, 3, 4, 5]
    a0 = [30, 31]
    p1 = [*p0, *a0, 22, 23]
    a1 = [32]
    steps = [Step(prompt_ids=p0, action_ids=a0, logprobs=[-0.1, -0.2], reward=0.0),
             Step(prompt_ids=p1, action_ids=a1, logprobs=[-0.3], reward=1.0)]
    traj = Trajectory(task=Task(id="t", env="x", seed=0), steps=steps)
    return traj, [*p1, *a1, 24]


def test_the_shadow_sequence_lays_out_positions_and_episode_vectors_as_the_seed():
    traj, final = hand_episode()
    ep = build_shadow_episode(traj, [90, 91, 92], final)
    assert ep.ids == [1, 2, 3, 4, 5, 90, 91, 92, 30, 31, 22, 23, 90, 91, 92, 32, 24, 90, 91, 92]
    # critic prompts continue from their state; the next real token reuses the critic prompt's first position
    assert ep.positions == [0, 1, 2, 3, 4, 5, 6, 7, 5, 6, 7, 8, 9, 10, 11, 9, 10, 11, 12, 13]
    assert ep.block == [0] * 5 + [1] * 3 + [0] * 4 + [2] * 3 + [0, 0] + [3] * 3
    assert (ep.cp_start, ep.cp_end) == ([5, 12, 17], [7, 14, 19])  # n + 1 = 3 critic prompts
    assert (ep.a_start, ep.a_end) == ([8, 15], [9, 15])
    assert ep.pred == [4, 8, 11] and ep.target == [8, 9, 15]  # a_k's first token is predicted from s_k's last
    assert ep.token_turn == [0, 0, 1] and ep.rewards == [0.0, 1.0]
    allowed = interleaved_mask(ep)[0, 0] == 0
    see = lambda i: allowed[i].nonzero().flatten().tolist()
    assert see(15) == [0, 1, 2, 3, 4, 8, 9, 10, 11, 15]  # a_1 sees every real token, no critic prompt
    assert see(13) == [0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13]  # cp_1 sees the prefix up to s_1 and itself
    assert see(19) == [0, 1, 2, 3, 4, 8, 9, 10, 11, 15, 16, 17, 18, 19]
    assert critic_rows(ep)[1] == ([1, 2, 3, 4, 5, 30, 31, 22, 23, 90, 91, 92], list(range(12)))
    # the same visibility in the two stages of the forward: real tokens [1..5, 30, 31, 22, 23, 32, 24], then the
    # critic prompts' 9 tokens, which see real tokens up to their state and their own prompt
    b = collate_shadow([ep], pad_id=0, dtype=torch.float32)
    assert b["real_ids"].tolist() == [[1, 2, 3, 4, 5, 30, 31, 22, 23, 32, 24]] and "real_mask" not in b
    assert b["real_pos"].tolist() == [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]
    assert b["cp_pos"].tolist() == [[5, 6, 7, 9, 10, 11, 11, 12, 13]]
    cp_sees = b["cp_mask"][0, 0] == 0
    assert cp_sees[4].nonzero().flatten().tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 11 + 3, 11 + 4]
    assert cp_sees[8].nonzero().flatten().tolist() == [*range(11), 11 + 6, 11 + 7, 11 + 8]
    assert b["pred"].tolist() == [4, 5, 8] and b["target"].tolist() == [5, 6, 9]
    assert b["value_idx"].tolist() == [[2, 5, 8]]


def interleaved_mask(ep, dtype=torch.float32):
    one = lambda x: torch.tensor([x])
    return shadow_mask(one(ep.segment), one(ep.block), torch.ones(1, len(ep), dtype=torch.bool), dtype)


def test_the_critic_prompt_is_rendered_in_the_models_chat_format():
    cfg = load_config(overrides=["model.name=tiny"])
    policy = build_policy(cfg)
    builder = build_prompt(cfg, policy, FrozenLakeEnv())
    ids = critic_prompt_ids(policy.tokenizer, builder.eot_id())
    assert policy.tokenizer.decode(ids) == ("<|im_end|>\n<|im_start|>system\nCritic Mode! Evaluate the current "
                                            "state with a single expressive word:<|im_end|>\n<|im_start|>assistant\n")
    check_shadow_attention(policy)  # sdpa: fine
    policy.model.get_base_model().config._attn_implementation = decode_attention.NAME  # bf16 on a CPU: fine
    check_shadow_attention(policy)
    policy.model.get_base_model().config._attn_implementation = "flash_attention_2"
    with pytest.raises(ConfigError, match="custom 4-D mask"):
        check_shadow_attention(policy)


def test_td_targets_and_critic_loss_by_hand():
    # episode 1: three turns, r = (0, 0, 1); episode 2: one turn, r = -1. γ = 0.5. The last slot of each is
    # its terminal state s_n (value read, target 0).
    V = torch.tensor([[0.2, 0.4, 0.6, 0.1], [0.3, 0.5, 0.0, 0.0]], dtype=torch.float64)
    r = torch.tensor([[0.0, 0.0, 1.0, 0.0], [-1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    turns = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
    vmask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    # y1_k = r_k + γ V_{k+1}, with V = 0 at the terminal slot: (0 + .5·.4, 0 + .5·.6, 1 + 0, 0)
    close(td_target(V, r, turns, 0.5, 1) * vmask, [[0.2, 0.3, 1.0, 0.0], [-1.0, 0.0, 0.0, 0.0]])
    close(td_target(V, r, turns, 0.5, 2) * vmask, [[0.15, 0.5, 1.0, 0.0], [-1.0, 0.0, 0.0, 0.0]])
    close(td_target(V, r, turns, 0.5, 3) * vmask, [[0.25, 0.5, 1.0, 0.0], [-1.0, 0.0, 0.0, 0.0]])
    # TD(1) squared errors 0, .01, .16, .01, 1.69, .25 -> 2.12/6; TD(2): .0025, .01, .16, .01, 1.69, .25 -> 2.1225/6
    loss, st = critic_loss(V, r, turns, vmask, 0.5, td_max=2)
    close(st["loss/td1"], 2.12 / 6)
    close(loss, (2.12 / 6 + 2.1225 / 6) / 2)
    R, A = returns_and_advantages(V, r, turns, 0.5)
    close(R, [[0.25, 0.5, 1.0, 0.0], [-1.0, 0.0, 0.0, 0.0]])
    close(A, [[0.05, 0.1, 0.4, 0.0], [-1.3, 0.0, 0.0, 0.0]])  # A = R − V, only at real turns


def test_targets_carry_no_gradient_and_turn_logprobs_sum_each_action():
    V = torch.tensor([[0.2, 0.4, 0.0]], requires_grad=True)
    r = torch.tensor([[0.0, 1.0, 0.0]])
    turns = torch.tensor([[True, True, False]])
    loss, _ = critic_loss(V, r, turns, torch.ones_like(turns), 0.9, td_max=1)
    loss.backward()
    # d/dV_k mean((V − y)²) with y detached = 2 (V_k − y_k) / 3: y = (.9·.4, 1, 0)
    close(V.grad, [[2 * (0.2 - 0.36) / 3, 2 * (0.4 - 1.0) / 3, 0.0]])
    close(turn_logprobs(torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([0, 0, 3]), 4), [-3.0, 0.0, 0.0, -0.5])


@pytest.fixture(scope="module")
def rollouts():
    """Real FrozenLake episodes of the tiny model, with a non-trivial value head: full-history chats (one
    segment each) and windowed ones (agent.history=1: the prompts do not extend, several segments)."""
    out = {}
    for history in ("null", "1"):
        cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=6",
                                     f"agent.history={history}"])
        policy = build_policy(cfg)
        policy.attach_value_head("mlp")
        torch.manual_seed(0)
        torch.nn.init.normal_(policy.value_head.net[-1].weight, std=0.5)
        builder = build_prompt(cfg, policy, FrozenLakeEnv())
        tasks = SeedTasks("frozenlake", seed=0).next(3)
        trajs = rollout(policy, [make_env(FrozenLakeEnv) for _ in tasks], tasks, builder, max_turns=4,
                        generator=torch.Generator().manual_seed(0))
        cp = critic_prompt_ids(policy.tokenizer, builder.eot_id())
        eps = [build_shadow_episode(t, cp, final_state_ids(t, builder), traj_index=i) for i, t in enumerate(trajs)]
        out[history] = (policy, trajs, eps)
    return out


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("history", ["null", "1"])
def test_one_pass_equals_the_actor_alone_and_one_critic_forward_per_state(rollouts, attn, history, monkeypatch):
    policy, trajs, eps = rollouts[history]
    calls = []
    if attn == "eager":  # make sure the eager kernel really runs (it adds the mask to the scores)
        import transformers.models.llama.modeling_llama as llama

        eager = llama.eager_attention_forward
        monkeypatch.setattr(llama, "eager_attention_forward", lambda *a, **k: calls.append(1) or eager(*a, **k))
    if history == "1":
        assert max(max(e.segment) for e in eps) > 0  # windowed prompts: several segments in one sequence
    assert all(len(e.cp_end) == len(t.steps) + 1 for e, t in zip(eps, trajs))
    config = policy.model.get_base_model().config
    old = config._attn_implementation
    config._attn_implementation = attn
    try:
        with torch.no_grad():
            batch, logp, _, values = episode_forward(policy, eps)
            rows = build_rows(trajs, [0.0] * len(trajs))
            rb = collate(rows, policy.pad_id, policy.device)
            plain, _ = policy.action_logprobs(rb["input_ids"], rb["attention_mask"], rb["loss_mask"])
            body = policy.model.get_base_model().get_decoder()
            separate = torch.zeros_like(values)
            for b, e in enumerate(eps):
                for k, (ids, pos) in enumerate(critic_rows(e)):
                    h = body(input_ids=torch.tensor([ids]), position_ids=torch.tensor([pos])).last_hidden_state
                    separate[b, k] = policy.value_head(h[0, -1])
            # the interleaved sequence in ONE forward with the 4-D shadow mask gives the same numbers
            inter_logp, inter_values = [], []
            for e in eps:
                h = body(input_ids=torch.tensor([e.ids]), position_ids=torch.tensor([e.positions]),
                         attention_mask=interleaved_mask(e)).last_hidden_state[0]
                inter_logp.append(policy.token_logprobs(policy.model.get_output_embeddings(), h[e.pred],
                                                         torch.tensor(e.ids)[e.target], False)[0])
                inter_values.append(policy.value_head(h[e.cp_end]))
    finally:
        config._attn_implementation = old
    assert bool(calls) == (attn == "eager")
    # rows are packed per segment; both list action tokens episode by episode, turn by turn
    assert (logp - plain).abs().max() < 1e-4  # (a)
    assert (logp - batch["old_logprobs"]).abs().max() < 1e-4  # and both equal the rollout's own log-probs
    assert (values - separate).abs().max() < 1e-4  # (b)
    assert (torch.cat(inter_logp) - logp).abs().max() < 1e-4
    assert (torch.cat(inter_values) - values[batch["value_mask"]]).abs().max() < 1e-4
    assert values[batch["value_mask"]].abs().min() > 0  # a real head: the check is not 0 == 0


def test_per_turn_forward_gives_the_same_losses_and_gradients(rollouts):
    policy, trajs, eps = rollouts["null"]
    cfg = load_config(overrides=["algo.name=self_ac"])
    grads = {}
    for how in ("shadow", "per_turn"):
        policy.model.zero_grad()
        policy.value_head.zero_grad()
        batch, logp, _, values = episode_forward(policy, eps, how)
        losses, _ = self_ac_losses(batch, logp, values, cfg.algo.self_ac, cfg.algo)
        (losses["critic"] + losses["actor"]).backward()
        grads[how] = torch.cat([p.grad.flatten() for p in policy.trainable_parameters() if p.grad is not None])
    torch.testing.assert_close(grads["shadow"], grads["per_turn"], atol=1e-4, rtol=1e-3)


def test_values_are_recorded_and_the_head_is_dropped_for_inference(tmp_path):
    out = tmp_path / "run"
    Trainer(load_config(overrides=[
        "model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=4", "train.tasks_per_step=2",
        "algo.group_size=2", "eval.episodes=2", "train.progress=false", "train.eval_every=0",
        "train.warm_start_steps=0", "env.max_turns=3", "train.steps=2", "algo.name=self_ac", "algo.lr=1e-2",
        f"train.out_dir={out}"])).train()
    lines = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    later = [t["flags"]["values"] for t in lines if t["step"] == 2]
    assert all(len(v) == len(t["steps"]) + 1 for v, t in zip(later, lines[-len(later):]))
    assert any(abs(x) > 0 for v in later for x in v)  # after one update the head is no longer zero
    # the PEFT adapter folder has no critic; `selfevolve eval` builds the policy without one
    ckpt = out / "checkpoints" / "step-2"
    assert any(k.startswith("value_head.") for k in load_file(str(ckpt / "adapter.safetensors")))
    assert not any("value_head" in k for k in load_file(str(ckpt / "adapter" / "adapter_model.safetensors")))
    _, acting, _ = load_run(out)
    assert acting.value_head is None
    _, policy_with_head, _ = load_run(out)
    policy_with_head.attach_value_head("linear")
    prompt = [[1, 2, 3, 4, 5, 6]]
    assert acting.generate(prompt, greedy=True).ids == policy_with_head.generate(prompt, greedy=True).ids


def test_episode_values_match_the_update_forward(rollouts):
    policy, _, eps = rollouts["null"]
    with torch.no_grad():
        _, _, _, values = episode_forward(policy, eps)
    got = episode_values(policy, eps, micro_batch_tokens=64)  # one episode per micro-batch
    for b, e in enumerate(eps):
        close(got[b], values[b, : len(e.cp_end)].cpu())


@pytest.mark.parametrize("extra", [[], ["algo.self_ac.ratio=turn", "algo.kl_coef=0.05"]])
def test_micro_batches_accumulate_to_the_full_batch_update(rollouts, extra):
    policy, _, eps = rollouts["null"]
    state = {k: v.clone() for k, v in policy.adapter_state().items()}
    results = []
    for mbt in (100_000, 64):
        policy.load_adapter_state(state)
        opt = torch.optim.SGD(policy.trainable_parameters(), lr=0.1)
        cfg = load_config(overrides=["algo.name=self_ac", f"algo.micro_batch_tokens={mbt}", *extra])
        st = self_ac_update(policy, opt, eps, cfg.algo, random.Random(0))
        results.append((st, {k: v.clone() for k, v in policy.adapter_state().items()}))
    policy.load_adapter_state(state)
    (a, wa), (b, wb) = results
    for key in ("loss/critic", "loss/actor", "grad_norm"):
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def test_the_critic_learns_turn_level_values_over_several_turns(tmp_path):
    """3-turn FrozenLake episodes of the untrained tiny model: every reply is invalid (−0.1 a turn), so the return
    from s_k is −0.1·(1 + γ + …) and differs by turn (−0.285, −0.195, −0.1, then 0 at the end): the head must
    read the turn from the shared body, through TD targets that bootstrap across turns. Its loss, relative to a
    know-nothing critic's on the same batch, must fall from 1."""
    out = tmp_path / "run"
    Trainer(load_config(overrides=[
        "model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=3", "train.tasks_per_step=2",
        "algo.group_size=4", "eval.episodes=2", "train.progress=false", "train.eval_every=0",
        "train.warm_start_steps=0", "algo.name=self_ac", "env.size=3", "env.max_turns=3", "train.steps=12",
        "algo.lr=1e-2", f"train.out_dir={out}"])).train()
    ratio = [json.loads(x)["value/loss_ratio"] for x in (out / "metrics.jsonl").read_text().splitlines()[1:]]
    assert ratio[0] == pytest.approx(1.0) and sum(ratio[-4:]) / 4 < 0.5, ratio


def test_actor_loss_by_hand_for_both_ratios():
    # one episode, two turns: a_0 has two tokens (ratios 1.1 and 1.0), a_1 one token (ratio 0.5); γ = 1,
    # r = (0, 1), V = (0.5, 0.2, 0 at the terminal state) -> R = (1, 1), A = R − V = (0.5, 0.8)
    batch = {"rewards": torch.tensor([[0.0, 1.0, 0.0]]), "turn_mask": torch.tensor([[True, True, False]]),
             "value_mask": torch.tensor([[True, True, True]]), "old_logprobs": torch.tensor([-1.0, -1.0, -2.0]),
             "token_slot": torch.tensor([0, 0, 1])}
    logp = torch.tensor([-1.0 + math.log(1.1), -1.0, -2.0 + math.log(0.5)])
    values = torch.tensor([[0.5, 0.2, 0.0]])
    for ratio, want in (("token", (-0.55 - 0.5 - 0.4) / 3),  # per token: −Aρ, except ρ = 0.5 < 0.8: −A·ρ (pessimistic max)
                        ("turn", (-0.55 - 0.4) / 2)):  # per turn: ρ_0 = 1.1·1.0, ρ_1 = 0.5
        cfg = load_config(overrides=["algo.name=self_ac", "algo.gamma=1", "algo.self_ac.td_max=1",
                                     f"algo.self_ac.ratio={ratio}"])
        losses, st = self_ac_losses(batch, logp, values, cfg.algo.self_ac, cfg.algo)
        close(losses["actor"], want)
        # TD(1) targets (0 + 0.2, 1 + 0, 0): squared errors .09, .64, 0 over 3 states
        close(losses["critic"], 0.73 / 3)
        close(st["adv/mean"], 0.65)


def test_empty_actions_and_empty_episodes_are_harmless(rollouts):
    policy, trajs, eps = rollouts["null"]
    traj, final = hand_episode()
    traj.steps[1].action_ids, traj.steps[1].logprobs = [], []  # a reply cut to nothing
    odd = build_shadow_episode(traj, eps[0].ids[eps[0].cp_start[0]: eps[0].cp_end[0] + 1], final)
    assert odd.a_end[1] == odd.a_start[1] - 1 and odd.token_turn == [0, 0]
    empty = build_shadow_episode(Trajectory(task=Task(id="e", env="x", seed=0)), [90, 91])
    cfg = load_config(overrides=["algo.name=self_ac"])
    opt = torch.optim.SGD(policy.trainable_parameters(), lr=0.0)
    st = self_ac_update(policy, opt, [eps[0], odd, empty], cfg.algo, random.Random(0))
    assert math.isfinite(st["loss/critic"]) and math.isfinite(st["loss/actor"])
    assert len(odd.values) == 3 and empty.values == []


def test_recomputed_old_logprobs_make_the_first_ratio_one(rollouts):
    """``algo.old_logprobs`` in Self-AC's update (objectives/old_logprobs.py): episodes whose sampled log-probs sit
    0.1 above the trainer's give a first ratio of e^−0.1 with ``sampled`` and exactly 1 with ``recompute``; over
    two optimizer steps, ``recompute`` restates them to the trainer's first (here the sampler's own, fp32);
    ``update/sampler_kl`` reports the 0.1 in every case."""
    import copy

    policy, _, eps = rollouts["null"]
    state = {k: v.clone() for k, v in policy.adapter_state().items()}
    for mode, ratio, steps in (("sampled", math.exp(-0.1), 1), ("recompute", 1.0, 1), ("recompute", None, 2)):
        shifted = [copy.deepcopy(e) for e in eps]
        for e in shifted:
            e.old_logprobs = [x + 0.1 for x in e.old_logprobs]
        cfg = load_config(overrides=["algo.name=self_ac", f"algo.old_logprobs={mode}", f"algo.minibatches={steps}"])
        st = self_ac_update(policy, torch.optim.SGD(policy.trainable_parameters(), lr=0.1), shifted, cfg.algo,
                            random.Random(0))
        policy.load_adapter_state(state)
        if ratio is not None:
            assert st["ratio_mean"] == pytest.approx(ratio, rel=1e-4), mode
        else:  # two steps: π_old restated by one forward before the first, which measures the sampler's gap
            for e, sampled in zip(shifted, eps):
                assert e.old_logprobs == pytest.approx(sampled.old_logprobs, rel=1e-5, abs=1e-5)  # fp32 noise
        assert st["update/sampler_kl"] == pytest.approx(0.1, abs=1e-4), mode
