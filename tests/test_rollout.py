"""Generation, prompts and rollouts through the real code path, on the tiny model in fp32.

The central property is token-in, token-out: the training sample is exactly the ids the model saw and produced,
and the log-probs the update recomputes on it equal the ones recorded at rollout time.
"""

import inspect
import os
import warnings

import pytest
import torch

from selfevolve.agent.parsing import parse_action
from selfevolve.agent.prompt import PromptBuilder
from selfevolve.config import load_config
from selfevolve.envs import FrozenLakeEnv, make_env
from selfevolve.models.compat import cache_kwargs
from selfevolve.models.generation import generate
from selfevolve.rollout.runner import RolloutStats, rollout
from selfevolve.tasks.source import SeedTasks, eval_tasks
from selfevolve.train.samples import build_rows, collate
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
        gens = [torch.Generator().manual_seed(i) for i in range(4)]
        runs[dedupe] = generate(policy.model, nxt, max_new_tokens=5, stop_ids={2}, pad_id=2, generator=gens,
                                state=state, dedupe=dedupe)
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
    body, _ = policy._body_and_head()
    takes = "cache" if "cache" in inspect.signature(type(body).forward).parameters else "past_key_values"
    assert cache_kwargs(policy.model, 0) == cache_kwargs(body, 0) == {takes: 0}  # the peft wrapper looked through
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        prefix = list(range(100, 120))
        gen = generate(policy.model, [prefix + [5, 6], prefix + [7]], max_new_tokens=3, stop_ids={2}, pad_id=2,
                       greedy=True, prefix_ids=prefix)
        generate(policy.model, [s + [8] for s in gen.state.seqs], max_new_tokens=2, stop_ids={2}, pad_id=2,
                 greedy=True, state=gen.state)
        ids = torch.tensor([prefix + [5, 6], prefix + [7, 8]])
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
    tasks = eval_tasks("frozenlake", 3)
    stats = RolloutStats()
    trajs = rollout(policy, [make_env(OneShot) for _ in tasks], tasks, builder, max_turns=4,
                    generator=torch.Generator().manual_seed(0), stats=stats)
    assert stats.generate_calls == 1 and all(len(t.steps) == 1 for t in trajs)


def test_invalid_replies_are_penalised_not_fatal(policy):
    """The random tiny model writes gibberish: every step is an invalid action with the penalty, no exception."""
    cfg = load_config(overrides=["model.name=tiny"])
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = eval_tasks("frozenlake", 2)
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
    tasks = eval_tasks("frozenlake", 3)
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
    tasks = eval_tasks("frozenlake", 2)
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
    tasks = eval_tasks("frozenlake", 1)
    for name in ("beam", "lookahead"):
        with pytest.raises(ValueError, match="PrefixedLake sets one"):
            search_rollouts(policy, PrefixedLake, tasks, builder, SearchSpec(name), max_turns=2)


def test_shared_prefix_training_forward_matches_plain(policy):
    """Training log-probs and gradients with the shared-prefix forward equal those of the plain forward."""
    from selfevolve.train.samples import Row, shared_prefix_len

    prefix = list(range(200, 230))
    rows = [
        Row(ids=prefix + [5, 6, 7, 8], mask=[0] * 32 + [1, 1], old_logprobs=[0.0] * 2, advantages=[1.0] * 2),
        Row(ids=prefix + [9, 10, 11], mask=[0] * 31 + [1, 1], old_logprobs=[0.0] * 2, advantages=[1.0] * 2),
    ]
    P = shared_prefix_len(rows)
    assert P == 30
    b = collate(rows, policy.pad_id, policy.device)
    params = policy.trainable_parameters()
    results = []
    for p in (0, P):
        policy.model.zero_grad()
        logp, _ = policy.action_logprobs(b["input_ids"], b["attention_mask"], b["loss_mask"], prefix_len=p)
        logp.sum().backward()
        results.append((logp.detach(), [q.grad.clone() for q in params if q.grad is not None]))
    (a, ga), (c, gc) = results
    assert (a - c).abs().max() < 1e-5
    # gradients reach ~10 with the tiny model's wide init: compare relative to their scale (fp32 sums differ)
    assert len(ga) == len(gc) > 0
    assert all((x - y).abs().max() <= 1e-5 * max(1.0, float(x.abs().max())) for x, y in zip(ga, gc))
    policy.model.zero_grad()


def test_micro_batches_take_the_split_that_encodes_the_fewest_tokens():
    """Rows of 200, 210, 500 and 520 tokens whose first 140 every row shares (encoded once a micro-batch).
    One micro-batch encodes (520 - 140) x 4 + 140 = 1660 tokens; {200, 210} + {500, 520} encodes
    (70 x 2 + 140) + (380 x 2 + 140) = 1180, the fewest; one row each would encode 1430."""
    from selfevolve.train.samples import Row, micro_batches

    rows = [Row(ids=[1] * n, mask=[0] * n, old_logprobs=[], advantages=[]) for n in (520, 200, 500, 210)]
    lengths = lambda chunks: [[len(r) for r in c] for c in chunks]  # noqa: E731
    assert lengths(micro_batches(rows, 4096, shared=140)) == [[200, 210], [500, 520]]
    assert lengths(micro_batches(rows, 4096)) == [[200, 210, 500, 520]]  # no shared prefix: filled greedily
    # 1000 padded tokens at most: {500, 520} (1040) no longer fits, so the long rows go alone: 280 + 500 + 520
    assert lengths(micro_batches(rows, 1000, shared=140)) == [[200, 210], [500], [520]]
    assert lengths(micro_batches(rows[:1], 100, shared=140)) == [[520]]  # a row longer than the limit still goes


def test_the_update_in_micro_batches_equals_the_update_in_one(policy):
    """The same rows trained as one micro-batch or split into several (the fewest-tokens split) give the same
    adapter: the loss is a token mean weighted across micro-batches."""
    import random

    from selfevolve.train.update import ppo_update

    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32"])
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = [t for t in SeedTasks("frozenlake", seed=0).next(2) for _ in range(3)]
    gens = [torch.Generator().manual_seed(i) for i in range(len(tasks))]
    trajs = rollout(policy, [make_env(FrozenLakeEnv, max_turns=3) for _ in tasks], tasks, builder, max_turns=3,
                    generator=gens)
    rows = build_rows(trajs, [0.5 * (-1) ** i for i in range(len(trajs))])
    state = {k: v.clone() for k, v in policy.adapter_state().items()}
    results = []
    for mbt in (100_000, max(len(r) for r in rows) + 1):
        policy.load_adapter_state(state)
        opt = torch.optim.SGD(policy.trainable_parameters(), lr=0.1)
        algo = load_config(overrides=[f"algo.micro_batch_tokens={mbt}"]).algo
        st = ppo_update(policy, opt, rows, algo, random.Random(0))
        results.append((st, {k: v.clone() for k, v in policy.adapter_state().items()}))
    policy.load_adapter_state(state)
    (a, wa), (b, wb) = results
    assert a["loss/policy"] == pytest.approx(b["loss/policy"], rel=1e-4, abs=1e-6)
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def test_grouped_attention_reads_the_key_value_heads_without_copies_and_changes_nothing(policy, monkeypatch):
    """On the CPU, load_model lets SDPA read the grouped key/value heads as they are (the tiny model has 4 query
    heads over 2 key/value heads): the update's forward on padded rows gives the same log-probs and gradients as
    with transformers' copies (``repeat_kv``), which are then never made."""
    import transformers.integrations.sdpa_attention as sdpa

    from selfevolve.models.compat import SDPA_GQA_ENV, prefer_grouped_attention

    assert os.environ.get(SDPA_GQA_ENV) == "1"  # set when the policy's model was loaded
    copies = []
    repeat_kv = sdpa.repeat_kv
    monkeypatch.setattr(sdpa, "repeat_kv", lambda x, n: copies.append(n) or repeat_kv(x, n))
    ids = torch.tensor([list(range(100, 112)), list(range(200, 212))])
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0  # padding: a mask goes to the attention
    loss_mask = torch.zeros_like(ids)
    loss_mask[:, 5:8] = 1
    runs = {}
    for switch in ("0", "1"):
        monkeypatch.setenv(SDPA_GQA_ENV, switch)
        policy.model.zero_grad(set_to_none=True)
        logp, _, _ = policy.forward_rows(ids, mask, loss_mask)
        logp.sum().backward()
        runs[switch] = logp.detach(), [p.grad.clone() for p in policy.trainable_parameters()]
        assert bool(copies) == (switch == "0")
        copies.clear()
    assert torch.allclose(runs["0"][0], runs["1"][0], atol=1e-6)
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(runs["0"][1], runs["1"][1]))
    policy.model.zero_grad(set_to_none=True)
    monkeypatch.setenv(SDPA_GQA_ENV, "0")
    for device in ("cpu", "cuda"):
        prefer_grouped_attention(device)
        assert os.environ[SDPA_GQA_ENV] == "0"  # a value the user set is kept, whatever the device
    monkeypatch.delenv(SDPA_GQA_ENV)
    prefer_grouped_attention("cuda")
    assert SDPA_GQA_ENV not in os.environ  # not on CUDA: masked grouped heads would leave the fused kernels
    prefer_grouped_attention("cpu")
    assert os.environ[SDPA_GQA_ENV] == "1"
    prefer_grouped_attention("cuda")  # a CUDA model loaded later in the same process takes ours back
    assert SDPA_GQA_ENV not in os.environ
    prefer_grouped_attention("cpu")


def test_rows_with_zero_advantage_are_not_run_and_the_update_is_unchanged(policy, monkeypatch):
    """A group whose rollouts all scored the same has zero advantage everywhere: without a KL term or a critic
    those rows add nothing to the loss, so the update leaves them out of the forward. They still count in the
    token mean: the step equals a step on the other rows alone with the learning rate scaled by
    (tokens run) / (all tokens), as loss = Σ_run ℓ_t / N_all = (N_run / N_all) · Σ_run ℓ_t / N_run."""
    import random

    from selfevolve.train.update import ppo_update

    builder = build_prompt(load_config(overrides=["model.name=tiny"]), policy, make_env(FrozenLakeEnv))
    tasks = [t for t in SeedTasks("frozenlake", seed=0).next(2) for _ in range(3)]
    gens = [torch.Generator().manual_seed(i) for i in range(len(tasks))]
    trajs = rollout(policy, [make_env(FrozenLakeEnv, max_turns=3) for _ in tasks], tasks, builder, max_turns=3,
                    generator=gens)
    rows = build_rows(trajs, [0.0, 0.0, 0.0, 0.7, -0.2, -0.5])  # the first task's group: all the same reward
    live = rows[3:]
    n_all, n_run = sum(len(r.advantages) for r in rows), sum(len(r.advantages) for r in live)
    algo = load_config(overrides=["algo.max_grad_norm=1e9"]).algo  # no clipping: the two steps must scale
    seen = []
    forward_rows = policy.forward_rows
    monkeypatch.setattr(policy, "forward_rows",
                        lambda ids, *a, **k: seen.append(len(ids)) or forward_rows(ids, *a, **k))
    state = {k: v.clone() for k, v in policy.adapter_state().items()}
    after = []
    for train_rows, lr in ((rows, 0.1), (live, 0.1 * n_run / n_all)):
        policy.load_adapter_state(state)
        st = ppo_update(policy, torch.optim.SGD(policy.trainable_parameters(), lr=lr), train_rows, algo,
                        random.Random(0))
        after.append({k: v.clone() for k, v in policy.adapter_state().items()})
        if train_rows is rows:
            assert sum(seen) == 3 and st["update/idle_rows"] == pytest.approx(0.5)  # 3 of 6 rows run
    assert all(torch.allclose(after[0][k], after[1][k], atol=1e-6) for k in state)
    assert not all(torch.equal(after[0][k], state[k]) for k in state)  # the step did move the adapter

    seen.clear()  # a minibatch with nothing to learn: no forward, a zero gradient, the optimizer still steps
    policy.load_adapter_state(state)
    st = ppo_update(policy, torch.optim.SGD(policy.trainable_parameters(), lr=0.1), rows[:3], algo, random.Random(0))
    assert seen == [] and st["update/idle_rows"] == 1.0
    assert all(p.grad is not None and not p.grad.any() for p in policy.trainable_parameters())
    assert all(torch.equal(v, state[k]) for k, v in policy.adapter_state().items())

    kl = load_config(overrides=["algo.kl_coef=0.1"]).algo  # a KL term: every row carries loss, all are run
    st = ppo_update(policy, torch.optim.SGD(policy.trainable_parameters(), lr=0.0), rows, kl, random.Random(0))
    assert "update/idle_rows" not in st and seen[0] == 6  # (then the reference policy's forward)
    policy.load_adapter_state(state)
    policy.model.zero_grad(set_to_none=True)
