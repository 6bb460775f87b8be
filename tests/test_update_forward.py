"""The update's forward on the tiny model in fp32: a shared prefix, micro-batches, grouped attention and the rows
left out for having no advantage each give the same log-probs and gradients as the plain computation.
"""

import os

import pytest
import torch

from selfevolve.config import load_config
from selfevolve.envs import FrozenLakeEnv, make_env
from selfevolve.objectives.samples import build_rows, collate
from selfevolve.rollout.runner import rollout
from selfevolve.tasks.source import SeedTasks
from selfevolve.train.trainer import build_policy, build_prompt


@pytest.fixture(scope="module")
def policy():
    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=6"])
    return build_policy(cfg)


def test_shared_prefix_training_forward_matches_plain(policy):
    """Training log-probs and gradients with the shared-prefix forward equal those of the plain forward."""
    from selfevolve.objectives.samples import Row, shared_prefix_len

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
    """Rows of 200, 210, 500 and 520 tokens whose first 140 every row shares (encoded once a micro-batch, and the
    rest of each row unpadded): every row that joins a micro-batch saves 140 tokens, so the fewest micro-batches that
    fit win. A micro-batch is bounded by its tokens plus a sixteenth of the positions it keeps (each row: the
    longest row's). All four: 140 + 60 + 70 + 360 + 380 = 1010, + 4 x 520 / 16 = 130: 1140. At 900: {200, 210,
    500} is 630 + 3 x 500 / 16 = 723 and {500, 520} is 880 + 65 = 945, so the split is {200, 210, 500} + {520}
    (1150 tokens); one row each would encode 1430."""
    from selfevolve.objectives.samples import Row, encoded_tokens, micro_batches

    rows = [Row(ids=[1] * n, mask=[0] * n, old_logprobs=[], advantages=[]) for n in (520, 200, 500, 210)]
    lengths = lambda chunks: [[len(r) for r in c] for c in chunks]  # noqa: E731
    assert lengths(micro_batches(rows, 4096, shared=140)) == [[200, 210, 500, 520]]
    assert encoded_tokens(rows, 140) == 1010
    assert lengths(micro_batches(rows, 1140, shared=140)) == [[200, 210, 500, 520]]
    assert lengths(micro_batches(rows, 900, shared=140)) == [[200, 210, 500], [520]]
    assert lengths(micro_batches(rows, 4096)) == [[200, 210, 500, 520]]  # no shared prefix: filled greedily
    assert lengths(micro_batches(rows[:1], 100, shared=140)) == [[520]]  # a row longer than the limit still goes


def test_the_update_in_micro_batches_equals_the_update_in_one(policy):
    """The same rows trained as one micro-batch or split into several (the fewest-tokens split) give the same
    adapter: the loss is a token mean weighted across micro-batches."""
    import random

    from selfevolve.objectives.update import ppo_update

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

    # set when the policy's model was loaded onto the CPU; a CUDA model takes the switch back (its fused kernels)
    assert os.environ.get(SDPA_GQA_ENV) == ("1" if policy.device.type == "cpu" else None)
    copies = []
    repeat_kv = sdpa.repeat_kv
    monkeypatch.setattr(sdpa, "repeat_kv", lambda x, n: copies.append(n) or repeat_kv(x, n))
    ids = torch.tensor([list(range(100, 112)), list(range(200, 212))], device=policy.device)
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

    from selfevolve.objectives.update import ppo_update

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


def test_several_micro_batches_encode_their_shared_prefix_once(policy, monkeypatch):
    """Split into micro-batches, a minibatch's shared prefix goes through the body once (``EncodedPrefix``), not
    once per micro-batch, and the gradient still reaches it: the adapter is that of the update in one micro-batch
    (the test above), and the same as encoding the prefix with every micro-batch."""
    import random

    import selfevolve.objectives.update as update
    from selfevolve.objectives.samples import micro_batches, shared_prefix_len

    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32"])
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = [t for t in SeedTasks("frozenlake", seed=1).next(3) for _ in range(2)]
    trajs = rollout(policy, [make_env(FrozenLakeEnv, max_turns=3) for _ in tasks], tasks, builder, max_turns=3,
                    generator=[torch.Generator().manual_seed(i) for i in range(len(tasks))])
    rows = build_rows(trajs, [0.5 * (-1) ** i for i in range(len(trajs))])
    algo = load_config(overrides=[f"algo.micro_batch_tokens={max(len(r) for r in rows) + 1}"]).algo
    shared = shared_prefix_len(rows)
    assert shared > 0 and len(micro_batches(rows, algo.micro_batch_tokens, shared, grouped=True)) > 1
    made = []

    class Counted(update.EncodedPrefix):
        def __init__(self, body, ids):
            made.append(len(ids))
            super().__init__(body, ids)

    state = {k: v.clone() for k, v in policy.adapter_state().items()}
    adapters = []
    for encode_once in (True, False):
        monkeypatch.setattr(update, "EncodedPrefix", Counted if encode_once else lambda body, ids: None)
        policy.load_adapter_state(state)
        opt = torch.optim.SGD(policy.trainable_parameters(), lr=0.1)
        update.ppo_update(policy, opt, rows, algo, random.Random(0))
        adapters.append({k: v.clone() for k, v in policy.adapter_state().items()})
    policy.load_adapter_state(state)
    assert made == [shared]  # once, for the one optimizer step
    once, each = adapters
    assert any(not torch.equal(once[k], state[k]) for k in once)
    assert all(torch.allclose(once[k], each[k], atol=1e-6) for k in once)


def test_a_lone_micro_batch_attends_to_the_encoded_prefix_unless_a_kl_term_compares_it_with_the_reference(
        policy, monkeypatch):
    """Every row its own micro-batch (the bound at the longest row): without a KL term each lone row attends to the
    prefix encoded once for the minibatch; with one, a lone row is encoded plainly, as the reference's lone row
    is, so that at the reference the two encodings are the same and the KL is exactly 0."""
    import random

    from selfevolve.objectives.samples import micro_batches, shared_prefix_len
    from selfevolve.objectives.update import ppo_update

    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32"])
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = SeedTasks("frozenlake", seed=1).next(3)
    trajs = rollout(policy, [make_env(FrozenLakeEnv, max_turns=3) for _ in tasks], tasks, builder, max_turns=3,
                    generator=[torch.Generator().manual_seed(i) for i in range(len(tasks))])
    rows = build_rows(trajs, [0.5, -0.5, 0.25])
    bound = max(len(r) for r in rows)
    assert all(len(c) == 1 for c in micro_batches(rows, bound, shared_prefix_len(rows), grouped=True))
    given = []
    forward_rows = policy.forward_rows
    monkeypatch.setattr(policy, "forward_rows",
                        lambda *a, **k: given.append(k.get("prefix")) or forward_rows(*a, **k))
    state = {k: v.clone() for k, v in policy.adapter_state().items()}
    for kl_coef, encoded in ((0.0, True), (0.1, False)):
        algo = load_config(overrides=[f"algo.micro_batch_tokens={bound}", f"algo.kl_coef={kl_coef}"]).algo
        given.clear()
        st = ppo_update(policy, torch.optim.SGD(policy.trainable_parameters(), lr=0.0), rows, algo, random.Random(0))
        # three lone rows (and with the KL term, the reference's three forwards, plain)
        assert len(given) == (6 if kl_coef else 3) and all((p is not None) == encoded for p in given)
        if kl_coef:
            assert st["kl"] == 0.0  # the adapter's B is 0: the policy is the reference, encoded the same way
    policy.load_adapter_state(state)
