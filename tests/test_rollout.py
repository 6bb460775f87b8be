"""Prompts and rollouts through the real code path, on the tiny model in fp32.

The central property is token-in, token-out: the training sample is exactly the ids the model saw and produced,
and the log-probs the update recomputes on it equal the ones recorded at rollout time.
"""

import pytest
import torch

from selfevolve.agent.parsing import parse_action
from selfevolve.agent.prompt import PromptBuilder
from selfevolve.config import load_config
from selfevolve.envs import FrozenLakeEnv, make_env
from selfevolve.objectives.samples import build_rows, collate
from selfevolve.rollout.runner import RolloutStats, rollout
from selfevolve.tasks.source import SeedTasks, seed_tasks
from selfevolve.train.trainer import build_policy, build_prompt


@pytest.fixture(scope="module")
def policy():
    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=6"])
    return build_policy(cfg)


def test_parse_action_forms():
    assert parse_action("Left") == "Left"
    assert parse_action("  Down \n") == "Down"
    assert parse_action("<think>hole below, go right</think><answer>Right</answer>") == "Right"
    assert parse_action("<think>hmm</think> Up") == "Up"
    assert parse_action("<think>never closed") == ""
    assert parse_action("<answer>Left") == ""


def test_incremental_prompt_equals_rendered_chat(policy):
    tok = policy.tokenizer
    b = PromptBuilder(tok, "rules", [("example board", "Right")], history=None)
    p0 = b.prompt_ids(["board 0"], [])
    reply = tok.encode("Down", add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
    p1 = b.next_prompt_ids(p0, reply, ["board 0", "board 1"], ["Down"])
    assert p1 == b.prompt_ids(["board 0", "board 1"], ["Down"])
    # a reply cut by the token budget is closed by the prompt, not by pretending the model said it
    cut = tok.encode("Down Down", add_special_tokens=False)
    p1b = b.next_prompt_ids(p0, cut, ["board 0", "board 1"], ["Down Down"])
    assert p1b[: len(p0) + len(cut)] == p0 + cut
    assert p1b[len(p0) + len(cut)] == tok.convert_tokens_to_ids("<|im_end|>")


def test_bounded_history_shows_only_the_last_turns(policy):
    b = PromptBuilder(policy.tokenizer, "rules", [("ex", "Up")], history=1)
    msgs = b.messages(["o0", "o1", "o2"], ["a0", "a1"])
    contents = [m["content"] for m in msgs]
    assert contents == ["rules", "ex", "Up", "o1", "a1", "o2"]


def test_rollout_is_token_in_token_out(policy):
    """Each step stores the exact prompt and reply ids; the packed training row is their concatenation and the
    update's recomputed log-probs equal the rollout's old log-probs."""
    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32"])
    env = make_env(FrozenLakeEnv)
    builder = build_prompt(cfg, policy, env)
    tasks = [t for t in SeedTasks("frozenlake").next(2) for _ in range(2)]
    envs = [make_env(FrozenLakeEnv, max_turns=3) for _ in tasks]
    stats = RolloutStats()
    trajs = rollout(policy, envs, tasks, builder, max_turns=3, generator=torch.Generator().manual_seed(0),
                    stats=stats)
    assert stats.generate_calls == 3 and stats.new_tokens == sum(len(s.action_ids) for t in trajs for s in t.steps)
    for traj in trajs:
        assert traj.steps[0].prompt_ids == builder.prompt_ids([env.reset(traj.task.seed)], [])
        for prev, nxt in zip(traj.steps, traj.steps[1:]):
            # the next prompt extends the previous prompt + the exact reply ids (never re-tokenised)
            assert nxt.prompt_ids[: len(prev.prompt_ids) + len(prev.action_ids)] == prev.prompt_ids + prev.action_ids
        for s in traj.steps:
            assert s.action_text == policy.decode(s.action_ids)
            assert len(s.logprobs) == len(s.action_ids) == len(s.entropy) == len(s.top1) == len(s.top2)
    rows = build_rows(trajs, [1.0] * len(trajs))
    assert len(rows) == len(trajs)  # full-history episodes pack into one row each
    for row, traj in zip(rows, trajs):
        last = traj.steps[-1]
        assert row.ids == last.prompt_ids + last.action_ids
        generated = [i for i, m in zip(row.ids, row.mask) if m]
        assert generated == [t for s in traj.steps for t in s.action_ids]
        assert row.old_logprobs == [lp for s in traj.steps for lp in s.logprobs]
    batch = collate(rows, policy.pad_id, policy.device)
    with torch.no_grad():
        logp, _ = policy.action_logprobs(batch["input_ids"], batch["attention_mask"], batch["loss_mask"])
    assert logp.shape == batch["old_logprobs"].shape
    assert (logp - batch["old_logprobs"]).abs().max() < 1e-4


def test_finished_environments_leave_the_batch(policy):
    """An episode that ends at turn 1 is not generated for again."""

    class OneShot(FrozenLakeEnv):
        def step(self, action):
            res = super().step(action)
            res.done = True
            return res

    cfg = load_config(overrides=["model.name=tiny"])
    builder = build_prompt(cfg, policy, make_env(OneShot))
    tasks = seed_tasks("frozenlake", 3)
    stats = RolloutStats()
    trajs = rollout(policy, [make_env(OneShot) for _ in tasks], tasks, builder, max_turns=4,
                    generator=torch.Generator().manual_seed(0), stats=stats)
    assert stats.generate_calls == 1 and all(len(t.steps) == 1 for t in trajs)


def test_invalid_replies_are_penalised_not_fatal(policy):
    """The random tiny model writes gibberish: every step is an invalid action with the penalty, no exception."""
    cfg = load_config(overrides=["model.name=tiny"])
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = seed_tasks("frozenlake", 2)
    trajs = rollout(policy, [make_env(FrozenLakeEnv, max_turns=2) for _ in tasks], tasks, builder, max_turns=2,
                    greedy=True)
    for t in trajs:
        assert [s.valid for s in t.steps] == [False, False]
        assert [s.reward for s in t.steps] == [-0.1, -0.1]
        assert t.steps[-1].info["truncated"] is True


def test_cache_reuse_across_turns_is_exact(policy):
    """Rollouts that keep each episode's KV cache between turns give the same tokens and log-probs as rollouts
    that re-encode every prompt, while encoding fewer prompt tokens."""
    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32"])
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = seed_tasks("frozenlake", 3)
    runs = {}
    for reuse in (True, False):
        stats = RolloutStats()
        trajs = rollout(policy, [make_env(FrozenLakeEnv, max_turns=3) for _ in tasks], tasks, builder, max_turns=3,
                        greedy=True, stats=stats, reuse_cache=reuse)
        runs[reuse] = (trajs, stats)
    (a, sa), (b, sb) = runs[True], runs[False]
    for ta, tb in zip(a, b):
        assert [s.action_ids for s in ta.steps] == [s.action_ids for s in tb.steps]
        for sa_, sb_ in zip(ta.steps, tb.steps):
            assert sa_.prompt_ids == sb_.prompt_ids
            assert max(abs(x - y) for x, y in zip(sa_.logprobs, sb_.logprobs)) < 1e-4
    assert sa.prompt_tokens < sb.prompt_tokens


class PrefixedLake(FrozenLakeEnv):
    """FrozenLake whose replies must start with "Ri" (a reply prefix, as exploration sets one)."""

    def reply_prefix(self) -> str:
        return "Ri"


def test_reply_prefix_is_part_of_the_prompt_and_of_the_action_text(policy):
    """With ``TextEnv.reply_prefix``, the prefix's tokens end the step's prompt, the action ids are the model's
    own (their log-probs recompute exactly on prompt + action), the action text is prefix + reply, and keeping
    the cache between turns gives the same steps as re-encoding."""
    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32"])
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = seed_tasks("frozenlake", 2)
    prefix = policy.tokenizer.encode("Ri", add_special_tokens=False)
    runs = [rollout(policy, [make_env(PrefixedLake, max_turns=3) for _ in tasks], tasks, builder, max_turns=3,
                    greedy=True, reuse_cache=reuse) for reuse in (True, False)]
    for ta, tb in zip(*runs):
        assert [s.action_ids for s in ta.steps] == [s.action_ids for s in tb.steps]
        assert [s.prompt_ids for s in ta.steps] == [s.prompt_ids for s in tb.steps]
        for s in ta.steps:
            assert s.prompt_ids[-len(prefix):] == prefix
            assert s.action_text == "Ri" + policy.decode(s.action_ids)
            with torch.no_grad():
                ids = torch.tensor([s.prompt_ids + s.action_ids], device=policy.device)
                logits = policy.model(ids).logits[0].float()
            logp = torch.log_softmax(logits, -1)
            ref = [logp[len(s.prompt_ids) - 1 + j, t].item() for j, t in enumerate(s.action_ids)]
            assert max(abs(a - b) for a, b in zip(ref, s.logprobs)) < 1e-4
        # the next turn's prompt holds the whole earlier reply, prefix included
        if len(ta.steps) > 1:
            first = ta.steps[0]
            assert ta.steps[1].prompt_ids[:len(first.prompt_ids) + len(first.action_ids)] == \
                first.prompt_ids + first.action_ids


def test_beam_search_refuses_a_reply_prefix(policy):
    from selfevolve.rollout.search import SearchSpec, search_rollouts

    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32"])
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = seed_tasks("frozenlake", 1)
    for name in ("beam", "lookahead"):
        with pytest.raises(ValueError, match="PrefixedLake sets one"):
            search_rollouts(policy, PrefixedLake, tasks, builder, SearchSpec(name), max_turns=2)
