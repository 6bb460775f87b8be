"""The seeds' methods together: pairings the configuration once refused, each checked against numbers derived
by hand and trained for a step or two on the tiny model (docs/configuration.md, "Combining methods").

- step attribution (AgentEvolver's self-attributing) on every estimator: A'_t = A_t + α·Σ_{k≥t} r̃_k, with A_t
  GiGPO's, PPO's GAE or Self-AC's R_k − V(s_k);
- self-navigating with Self-AC: shadow episodes of the stripped prompts, their old log-probs restated by the shadow
  forward itself, the boost on guided episodes' actor clip;
- trajectory search with experience (TSR with SEER recall and self-navigating): a search guided as a whole, every
  expansion's prompt with the examples recalled from that node's own history, trained on the stripped twin;
- experience on a Ray worker (the worker class in this process): recall from the driver's pool, intents classified
  there, the calls sent back. Search and experience on real Ray workers: tests/test_ray.py.
"""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from selfevolve import Trainer
from selfevolve.agent.context import EpisodeContext
from selfevolve.agent.guidance import Guidance
from selfevolve.build import build_policy, build_prompt
from selfevolve.envs import ENVS, make_env
from selfevolve.experience import navigation as nav
from selfevolve.experience.embed import Embedder
from selfevolve.experience.guide import Experience, seed_items
from selfevolve.experience.pool import ExperiencePool, NewItem
from selfevolve.objectives import make_objective, value_head_kind
from selfevolve.objectives.self_ac.shadow import build_shadow_episode, collate_shadow
from selfevolve.objectives.self_ac.update import self_ac_losses
from selfevolve.rollout.runner import rollout
from selfevolve.rollout.search import SearchSpec, search_rollouts
from selfevolve.tasks.source import seed_tasks
from selfevolve.algos.attribution import attribution_advantages, fuse_turn_advantages, label_returns
from selfevolve.algos.gae import gae_advantages
from selfevolve.config import load_config
from selfevolve.objectives.credit import credit_batch, step_advantages
from selfevolve.objectives.self_ac.critic import returns_minus_values
from selfevolve.rewards.oracle import BAD, GOOD
from selfevolve.types import Step, Task, Trajectory
from credit_helpers import close, padded as _padded

R3 = math.sqrt(3)
TINY = ["model.name=tiny", "model.dtype=fp32", "train.tasks_per_step=2", "algo.group_size=4", "eval.episodes=2",
        "train.progress=false", "train.warm_start_steps=0", "train.eval_every=0", "eval.at_start=false",
        "agent.max_new_tokens=3"]
LAKE = ["env.name=frozenlake", "env.size=3", "env.max_turns=3"]


def _read(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


# ---- attribution x a per-turn advantage ---------------------------------------------------------------------------
# labels [GOOD, BAD] and [BAD]*4 in one group: r~ = [√3, −1/√3] and [−1/√3]*4 (tests/test_attribution.py)
LABELS = [[1, -1], [-1, -1, -1, -1]]


def test_fused_turn_advantage_by_hand():
    labels, mask = _padded(LABELS)
    base, _ = _padded([[0.5, -0.25], [1.0, 2.0, 3.0, 4.0]])
    fused = fuse_turn_advantages(labels, mask, base, ["g", "g"], alpha=0.2, eps=0.0)
    close(fused, [[0.5 + 0.2 * (R3 - 1 / R3), -0.25 - 0.2 / R3, 0, 0],
                  [1 - 0.8 / R3, 2 - 0.6 / R3, 3 - 0.4 / R3, 4 - 0.2 / R3]])
    close(label_returns(labels, mask, ["g", "g"], 0.2, eps=0.0),
          [[0.2 * (R3 - 1 / R3), -0.2 / R3, 0, 0], [-0.8 / R3, -0.6 / R3, -0.4 / R3, -0.2 / R3]])
    # an episode-level base (GRPO's R~ on every turn) gives the seed's eqs. (2)-(3) to the last bit
    outcome = torch.tensor([1 / math.sqrt(2), -1 / math.sqrt(2)], dtype=torch.float64)
    broadcast = outcome[:, None] * mask
    assert torch.equal(fuse_turn_advantages(labels, mask, broadcast, ["g", "g"], alpha=0.2),
                       attribution_advantages(labels, mask, outcome, ["g", "g"], alpha=0.2))


def _traj(group, labels, rewards, keys, success=False):
    steps = [Step(prompt_ids=[], action_ids=[], logprobs=[], reward=r, state_key=k,
                  info={"attribution": {"label": lab, "rationale": "", "source": "oracle", "defaulted": False}})
             for lab, r, k in zip(labels, rewards, keys)]
    return Trajectory(task=Task(id=group, env="x", seed=0), steps=steps, group_id=group, success=success)


def _labelled_batch(algo):
    trajs = [_traj("g", [GOOD, BAD], [0.0, 1.0], ["s0", "s1"], True),
             _traj("g", [BAD] * 4, [0.0] * 4, ["s0", "s2", "s2", "s3"])]
    cfg = load_config(overrides=[f"algo.name={algo}", "reward.attribution=oracle", "attribution.alpha=0.2",
                                 "algo.norm=mean", "algo.ppo.whiten=false", "algo.gamma=0.5"])
    batch, _ = credit_batch(trajs, cfg, vocab_size=10)
    return trajs, cfg, batch


def test_gigpo_with_step_labels_by_hand():
    _, cfg, batch = _labelled_batch("gigpo")
    adv, returns = step_advantages("gigpo", batch, cfg.algo, cfg.attribution)
    assert returns is None
    # GiGPO, mean norm, γ = 0.5: A^E = ±1/2 (rewards 1 and 0); step returns [0.5, 1] and [0]*4; the one anchor
    # group with two samples is s0 (returns 0.5 and 0, A^S = ±0.25); ω = 1
    gigpo = [[0.5 + 0.25, 0.5, 0, 0], [-0.5 - 0.25, -0.5, -0.5, -0.5]]
    close(adv, [[gigpo[0][0] + 0.2 * (R3 - 1 / R3), gigpo[0][1] - 0.2 / R3, 0, 0],
                [g - 0.2 * (4 - t) / R3 for t, g in enumerate(gigpo[1])]], tol=1e-6)


def test_ppo_with_step_labels_keeps_the_critic_on_the_returns():
    _, cfg, batch = _labelled_batch("ppo")
    batch.values, _ = _padded([[0.2, 0.4], [0.1, 0.1, 0.1, 0.1]])
    adv, returns = step_advantages("ppo", batch, cfg.algo, cfg.attribution)
    gae, target = gae_advantages(batch.step_rewards, batch.values, batch.mask, gamma=0.5, lam=cfg.algo.ppo.lam)
    close(returns, target.tolist())  # the labels credit the actor; V still learns the environment's return
    bonus = [[0.2 * (R3 - 1 / R3), -0.2 / R3, 0, 0], [-0.8 / R3, -0.6 / R3, -0.4 / R3, -0.2 / R3]]
    close(adv, (gae + torch.tensor(bonus, dtype=torch.float64)).tolist(), tol=1e-5)
    # δ by hand for the first episode: δ_1 = 1 − 0.4, δ_0 = 0 + 0.5·0.4 − 0.2; A = δ_0 + 0.5·λ·δ_1, λ = 0.95
    assert float(gae[0, 0]) == pytest.approx(0.0 + 0.5 * 0.95 * 0.6)


def test_self_ac_advantage_adds_the_label_credit():
    assert returns_minus_values([0.0, 1.0], [0.2, 0.4, 0.0], 0.5, [0.1, -0.3]) == [
        round(0.5 - 0.2 + 0.1, 5), round(1.0 - 0.4 - 0.3, 5)]
    assert returns_minus_values([0.0, 1.0], [0.2, 0.4, 0.0], 0.5) == [0.3, 0.6]


@pytest.mark.parametrize("algo", ["gigpo", "ppo", "self_ac"])
def test_training_with_oracle_attribution(tmp_path, algo):
    """One tiny run per estimator: every step labelled, and for Self-AC the logged advantage is R_k − V(s_k) plus
    the labels' α·Σ r̃ recomputed from the logged labels."""
    out = tmp_path / algo
    cfg = load_config(overrides=[*TINY, *LAKE, f"algo.name={algo}", "train.steps=1", "reward.attribution=oracle",
                                 "attribution.alpha=0.3", f"train.out_dir={out}"])
    Trainer(cfg).train()
    metrics = _read(out / "metrics.jsonl")
    assert "attribution/good_share" in metrics[-1] and math.isfinite(metrics[-1]["grad_norm"])
    trajs = _read(out / "trajectories.jsonl")
    assert len(trajs) == 8 and all(s["info"]["attribution"]["source"] == "oracle" for t in trajs for s in t["steps"])
    if algo != "self_ac":
        return
    labels, mask = _padded([[1.0 if s["info"]["attribution"]["label"] == GOOD else -1.0 for s in t["steps"]]
                            for t in trajs])
    credit = label_returns(labels, mask, [t["group_id"] for t in trajs], 0.3)
    for t, c in zip(trajs, credit.tolist()):
        rewards = [s["reward"] for s in t["steps"]]
        expected = returns_minus_values(rewards, t["flags"]["values"], cfg.algo.gamma, c[:len(rewards)])
        assert t["flags"]["advantages"] == pytest.approx(expected, abs=2e-5)


# ---- self-navigating x Self-AC ------------------------------------------------------------------------------------
INSIGHTS = [NewItem(kind="insight", text="Move towards the goal and away from holes.", key_text="walking on a frozen lake"),
            NewItem(kind="insight", text="Never walk into the edge of the map.", key_text="moving on a grid")]
NAV_SELF_AC = [*TINY, *LAKE, "algo.name=self_ac", "experience.navigate=true", "experience.seed_examples=0"]


def _contains(ids, sub):
    return any(ids[i:i + len(sub)] == sub for i in range(len(ids) - len(sub) + 1))


@pytest.fixture(scope="module")
def guided_self_ac():
    """A training batch of FrozenLake (2 tasks x G = 4, η = 0.5: two guided episodes a task) and the Self-AC
    objective over the policy that played it."""
    cfg = load_config(overrides=[*NAV_SELF_AC, "experience.old_logprobs=recompute"])
    policy = build_policy(cfg, value_head=value_head_kind(cfg))
    exp = Experience(cfg, None, policy, ENVS["frozenlake"], {"size": 3}, "frozenlake")
    exp.pool.add(INSIGHTS, step=0, origin="extracted")
    tasks = [t for t in seed_tasks("frozenlake", 2) for _ in range(4)]
    envs = [make_env(ENVS["frozenlake"], size=3) for _ in tasks]
    builder = build_prompt(cfg, policy, envs[0])
    trajs = rollout(policy, envs, tasks, builder, max_turns=3, group_ids=[t.id for t in tasks],
                    generator=torch.Generator().manual_seed(0), guide=exp.guide(tasks, 4, training=True))
    objective = make_objective(cfg, policy, builder, torch.optim.AdamW(policy.trainable_parameters()),
                               random.Random(0))
    return exp, policy, builder, trajs, objective


def test_self_ac_trains_guided_episodes_on_the_stripped_prompts(guided_self_ac):
    exp, policy, builder, trajs, objective = guided_self_ac
    assert [t.guided for t in trajs] == [True, True, False, False] * 2
    episodes, _ = objective.credit(trajs)
    assert [e.guided for e in episodes] == [t.guided for t in trajs]
    block = policy.tokenizer.encode(nav.BLOCK_TITLE, add_special_tokens=False)
    for ep, t in zip(episodes, trajs):
        assert _contains(t.steps[0].prompt_ids, block) == t.guided  # sampled with the block when guided ...
        assert not _contains(ep.ids, block)  # ... its shadow episode holds none of it
        plain = builder.prompt_ids([t.query], [], t.task.instruction, Guidance())
        assert ep.ids[:len(plain)] == plain  # it starts as the episode without guidance
    # old log-probs restated by the shadow forward: the ratio of a guided episode starts at exactly 1
    first = exp.prepare_rows(episodes, objective.current_logprobs)
    assert first["experience/ratio_drift"] > 0 and first["experience/guided_tokens"] == sum(
        len(e.target) for e in episodes if e.guided)
    assert [e.clip_high for e in episodes] == [0.6 if e.guided else None for e in episodes]
    again = exp.prepare_rows(episodes, objective.current_logprobs)
    assert again["experience/ratio_drift"] == pytest.approx(0.0, abs=1e-6)
    # the same forward on unguided episodes gives the log-probs they were sampled with
    plain_eps = [e for e in episodes if not e.guided]
    got = objective.current_logprobs(plain_eps)
    assert torch.allclose(torch.tensor([x for g in got for x in g]),
                          torch.tensor([x for e in plain_eps for x in e.old_logprobs]), atol=1e-3)


@pytest.mark.parametrize("ratio", ["token", "turn"])
def test_boost_reaches_the_self_ac_actor_on_guided_episodes_only(ratio):
    """ratio 1.5 per token, A = R = 1 (V = 0, one turn of reward 1): a guided episode's tokens are bounded by
    1 + 0.6, a plain one's by 1 + 0.28. Per turn the ratio is 1.5² = 2.25, bounded by 1.6 and 1.28."""
    one = Trajectory(task=Task(id="t", env="x", seed=0),
                     steps=[Step(prompt_ids=[1, 2], action_ids=[3, 4], logprobs=[0.0, 0.0], reward=1.0)])
    guided, plain = build_shadow_episode(one, [9]), build_shadow_episode(one, [9])
    guided.clip_high = 0.6
    batch = collate_shadow([guided, plain], pad_id=0, dtype=torch.float32)
    assert batch["clip_high"].tolist()[:2] == pytest.approx([0.6, 0.6]) and all(
        math.isnan(x) for x in batch["clip_high"].tolist()[2:])
    algo = load_config(overrides=["algo.name=self_ac", f"algo.self_ac.ratio={ratio}"]).algo
    logp = torch.full((4,), math.log(1.5))
    losses, _ = self_ac_losses(batch, logp, torch.zeros(batch["value_mask"].shape), algo.self_ac, algo)
    expected = (-1.5 * 2 - 1.28 * 2) / 4 if ratio == "token" else (-1.6 - 1.28) / 2
    assert float(losses["actor"]) == pytest.approx(expected, abs=1e-6)


def test_training_self_ac_with_navigation(tmp_path):
    """A tiny run: half of each group guided by the imported insights, trained as shadow episodes of the stripped
    prompts, the restated ratio logged."""
    pool = ExperiencePool(tmp_path / "insights.sqlite", Embedder(load_config().experience.embedder))
    pool.add(INSIGHTS, step=0, origin="extracted")
    pool.close()
    out = tmp_path / "run"
    Trainer(load_config(overrides=[*NAV_SELF_AC, "train.steps=1", "experience.old_logprobs=recompute",
                                   "experience.llm_max_new_tokens=8", f"experience.pool={tmp_path / 'insights.sqlite'}",
                                   f"train.out_dir={out}"])).train()
    (m,) = [r for r in _read(out / "metrics.jsonl") if r["step"] == 1]
    assert m["experience/guided_share"] == 0.5 and m["experience/guided_tokens"] > 0
    assert math.isfinite(m["experience/ratio_drift"]) and math.isfinite(m["grad_norm"]) and "loss/critic" in m
    trajs = _read(out / "trajectories.jsonl")
    assert sum(t["flags"].get("guided", False) for t in trajs) == 4
    assert all(len(t["flags"]["values"]) >= len(t["steps"]) for t in trajs)


# ---- trajectory search x experience -------------------------------------------------------------------------------
def _lake_experience(policy, overrides):
    """An experience over FrozenLake (3x3) whose pool holds two expert episodes (SEER's examples) and two
    insights (self-navigating's block)."""
    cfg = load_config(overrides=[*TINY, *LAKE, "experience.seed_examples=0", *overrides])
    exp = Experience(cfg, None, policy, ENVS["frozenlake"], {"size": 3}, "frozenlake")
    exp.pool.add([*seed_items(ENVS["frozenlake"], {"size": 3}, 2, "frozenlake"), *INSIGHTS], step=0, origin="seed")
    return cfg, exp


@pytest.fixture(scope="module")
def tiny_policy():
    return build_policy(load_config(overrides=TINY))


def _examples(exp, ids):
    items = {it.id: it for it in exp.pool.items("trajectory")}
    return tuple(tuple(tuple(turn) for turn in items[i].turns) for i in ids)


@pytest.mark.parametrize("strategy", ["beam", "lookahead", "best_of_n"])
def test_search_prompts_carry_the_recall_and_the_block(tiny_policy, strategy):
    policy = tiny_policy
    cfg, exp = _lake_experience(policy, ["experience.recall=seer", "experience.navigate=true"])
    builder = build_prompt(cfg, policy, make_env(ENVS["frozenlake"], size=3))
    spec = SearchSpec(strategy, n=2, m=2, beams=2, depth=1)
    tasks = [t for t in seed_tasks("frozenlake", 2) for _ in range(2)]  # two searches a task, η = 0.5: one guided
    guide = exp.guide(tasks, 2, training=True)
    result = search_rollouts(policy, lambda: make_env(ENVS["frozenlake"], size=3), tasks, builder, spec,
                             max_turns=3, generator=torch.Generator().manual_seed(0), guide=guide)
    kept = result.trajectories
    assert [t.guided for t in kept] == [True, False, True, False] and all(t.insights for t in kept[::2])
    block = policy.tokenizer.encode(nav.BLOCK_TITLE, add_special_tokens=False)
    insights = {it.id: (it.key_text, it.text) for it in exp.pool.items("insight")}
    for t in kept:
        # the episode replayed by hand: the twin without any block, the guided one with the insights' block; each
        # turn shows the examples recalled for that step
        block_text = nav.experience_block([insights[i] for i in t.insights]) if t.guided else ""
        twin = EpisodeContext(builder, t.task.instruction, t.query, Guidance())
        seen = EpisodeContext(builder, t.task.instruction, t.query, Guidance(block=block_text))
        for step in t.steps:
            assert len(step.info["recalled"]) == 2
            for ctx in (twin, seen):
                ctx.set_examples(_examples(exp, step.info["recalled"]))
            assert step.prompt_ids == seen.prompt and _contains(step.prompt_ids, block) == t.guided
            assert step.train_prompt_ids == (twin.prompt if t.guided else None)
            for ctx in (twin, seen):
                ctx.advance(step.action_ids, step.action_text, step.observation)
    turns = max(len(t.steps) for t in kept)
    if strategy == "lookahead":  # the continuations recalled too, before each of their turns
        assert guide.turns > turns


@pytest.mark.parametrize("search", [["rollout.search=beam", "search.m=2"], ["rollout.search=best_of_n", "search.n=2"]])
def test_training_search_with_seer_and_navigation(tmp_path, search):
    embedder = Embedder(load_config().experience.embedder)
    pool = ExperiencePool(tmp_path / "pool.sqlite", embedder)
    pool.add([*seed_items(ENVS["frozenlake"], {"size": 3}, 2, "frozenlake"), *INSIGHTS], step=0, origin="seed")
    pool.close()
    out = tmp_path / "run"
    Trainer(load_config(overrides=[*TINY, *LAKE, *search, "train.steps=1", "experience.recall=seer",
                                   "experience.navigate=true", "experience.llm_max_new_tokens=8",
                                   f"experience.pool={tmp_path / 'pool.sqlite'}", f"train.out_dir={out}"])).train()
    (m,) = [r for r in _read(out / "metrics.jsonl") if r["step"] == 1]
    assert m["experience/guided_share"] == 0.5 and m["experience/recalled_per_turn"] == 2
    assert m["experience/guided_tokens"] > 0 and m["search/compute_multiple"] > 1 and math.isfinite(m["grad_norm"])
    trajs = _read(out / "trajectories.jsonl")
    assert len(trajs) == 8 and all(t["flags"]["search"] for t in trajs)


# ---- experience on a Ray worker (the worker class itself, in this process) ----------------------------------------
def test_a_rollout_worker_guides_from_the_drivers_pool_and_returns_its_intent_calls(tmp_path):
    """What a Ray worker does with experience.*, without Ray: recall from the driver's pool (sent as bytes) with the
    driver's recall seed, classify intents with its own replica, and hand the LLM calls back. A local step of the
    same run samples the same episodes and writes the same calls."""
    from selfevolve.distributed.worker import RolloutWorker, lora_state
    from selfevolve.rollout.collect import step_episodes

    cfg = load_config(overrides=[*TINY, "env.name=shop", "env.max_turns=2", "train.tasks_per_step=1",
                                 "algo.group_size=2", "experience.recall=seer", "experience.seed_examples=2",
                                 f"train.out_dir={tmp_path / 'local'}"])
    local = Trainer(cfg)
    pool = local.experience.pool.to_bytes()  # the pool as the step starts
    seed = random.Random(f"experience-{cfg.seed}").randrange(2**31)  # the run's first recall seed
    cursor = local.tasks.cursor
    a, _ = local.collect()
    local_calls = (tmp_path / "local" / "llm_calls.jsonl").read_text().splitlines()
    worker = RolloutWorker("w0", cfg.model_dump(mode="json"), local.env_cls, local.env_options)
    worker.load_weights(0, lora_state(local.policy))
    local.tasks.cursor = cursor
    trajs, _, back = worker.rollout(0, 0, step_episodes(local.tasks.next(1), 2, 0), pool=pool, seed=seed,
                                    llm_step=local.experience.llm.step)
    assert [[s.action_ids for s in t.steps] for t in trajs] == [[s.action_ids for s in t.steps] for t in a]
    assert [[s.info["recalled"] for s in t.steps] for t in trajs] == [[s.info["recalled"] for s in t.steps] for t in a]
    assert [t.intent for t in trajs] == [t.intent for t in a] and all(t.classified for t in trajs)
    assert [json.loads(x) for x in back["llm_calls"]] == [json.loads(x) for x in local_calls]
    assert {json.loads(x)["purpose"] for x in back["llm_calls"]} == {"intent"} and back["recall_turns"] > 0
    local.close()
