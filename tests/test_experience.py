"""The experience pool, SEER recall and self-navigating, on real parts: a real SQLite pool, the real MiniLM
embedding model, the tiny policy, real worlds and the real trainer."""

import copy
import json
import math
import sqlite3

import numpy as np
import pytest
import torch

from selfevolve import Trainer, load_config
from selfevolve.agent.context import EpisodeContext
from selfevolve.agent.guidance import Guidance
from selfevolve.algos.loss import ppo_clip_loss
from selfevolve.envs import ENVS, make_env
from selfevolve.errors import ConfigError, SelfEvolveError
from selfevolve.experience import navigation as nav
from selfevolve.experience.embed import Embedder
from selfevolve.experience.guide import Experience, expert_episode, seed_items
from selfevolve.experience.intent import classify, parse_intent
from selfevolve.experience.pool import ExperiencePool, NewItem
from selfevolve.experience.recall import Query, SeerRecall, Weights, s2_tool_coverage, s3_intent, seer_scores, top_k
from selfevolve.models.llm import LLM
from selfevolve.objectives.samples import Row, build_rows, collate, row_logprobs
from selfevolve.rollout.runner import rollout
from selfevolve.tasks.source import seed_tasks
from selfevolve.train.trainer import build_policy, build_prompt
from selfevolve.types import Task, Trajectory

TINY = ["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=6"]
FAST = [*TINY, "train.tasks_per_step=1", "algo.group_size=2", "eval.episodes=2", "train.progress=false",
        "train.eval_every=0", "train.warm_start_steps=0", "env.max_turns=2", "train.save_every=1"]


@pytest.fixture(scope="module")
def embedder():
    return Embedder()


@pytest.fixture(scope="module")
def policy():
    return build_policy(load_config(overrides=TINY))


def traj_item(text, tools=(), intent=None, success=True, request="req"):
    return NewItem(kind="trajectory", text=text, key_text=request, tools=list(tools), intent=intent,
                   turns=[(request, "act")], success=success)


# ---- SEER scores --------------------------------------------------------------------------------------------
def test_seer_scores_by_hand():
    # unit vectors: cos with the query = 1, 0, -1 -> s1 = (1 + cos) / 2 = 1, 0.5, 0
    query = np.array([1.0, 0.0])
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    history = ["get_order", "cancel_order"]
    tools = [["get_order"], ["get_order", "cancel_order", "list_orders"], []]  # s2 = 1/2, 2/2, 0/2
    intents = ["cancel", None, "status"]  # s3 against "cancel" = 1, 0, 0
    s = seer_scores(query, vectors, history, tools, "cancel", intents, Weights())
    assert s.tolist() == pytest.approx([1 + 0.5 + 1, 0.5 + 1 + 0, 0 + 0 + 0])
    s = seer_scores(query, vectors, history, tools, "cancel", intents, Weights(similarity=1, tools=0, intent=2))
    assert s.tolist() == pytest.approx([1 + 2, 0.5, 0])
    assert s2_tool_coverage([], ["get_order"]) == 0.0  # before the first tool call
    assert s2_tool_coverage(["a", "a", "b"], ["b"]) == 0.5  # sets of names
    assert s3_intent(None, None) == 0.0  # an unknown intent never matches
    assert top_k(np.array([1.0, 2.0, 2.0, 0.0]), 2) == [1, 2]  # ties: the older row first
    assert top_k(np.array([1.0]), 4) == [0]


def test_recall_over_a_real_pool(embedder):
    pool = ExperiencePool(":memory:", embedder)
    texts = ["Request: where is my order?\nAction: get_order(id=1)\nResult: shipped",
             "Request: cancel order 7\nAction: cancel_order(id=7)\nResult: canceled",
             "Request: what is the total of order 3?\nAction: get_order(id=3)\nResult: total 12.50",
             "Request: cancel order 9\nAction: cancel_order(id=9)\nResult: error"]
    pool.add([traj_item(texts[0], ["get_order"], "order_status", request="where is my order?"),
              traj_item(texts[1], ["cancel_order"], "cancel_order", request="cancel order 7"),
              traj_item(texts[2], ["get_order"], "order_total", request="what is the total of order 3?"),
              traj_item(texts[3], ["cancel_order"], "cancel_order", success=False, request="cancel order 9")],
             step=0, origin="seed")
    q = Query(text="Request: cancel order 5\nAction: get_order(id=5)\nResult: placed", tools=["get_order"],
              intent="cancel_order")
    # the scores by the formula, from the same embeddings: only the 3 successes are candidates
    e = embedder.encode([q.text])[0]
    v = embedder.encode(texts[:3])
    expect = (1 + v @ e) / 2 + np.array([1.0, 0.0, 1.0]) + np.array([0.0, 1.0, 0.0])
    got = SeerRecall(pool, k=2).recall([q])[0]
    assert [it.text for it in got] == [texts[i] for i in np.argsort(-expect)[:2]]
    assert all(it.success for it in SeerRecall(pool, k=9).recall([q])[0])  # the failure is never recalled
    assert len(SeerRecall(pool, k=9).recall([q])[0]) == 3
    # query-only mode: the request against the stored requests (key embeddings)
    got = SeerRecall(pool, k=1, mode="query").recall([Query("cancel order 5", [], None)])[0]
    assert got[0].key_text == "cancel order 7"
    # an exact history is its own best match: s1 = 1
    assert float(pool.matrix()[0] @ embedder.encode([texts[0]])[0]) == pytest.approx(1.0, abs=1e-5)


# ---- the pool -----------------------------------------------------------------------------------------------
def test_pool_file_records_model_truncates_imports_and_copies(tmp_path, embedder):
    run = tmp_path / "run"
    run.mkdir()
    pool = ExperiencePool(run / "experience.sqlite", embedder)
    for step in range(3):
        pool.add([traj_item(f"trajectory of step {step}", request=f"request {step}")], step=step, origin="rollout")
    pool.add([NewItem(kind="insight", text="check the order first", key_text="cancelling an order")], step=2,
             origin="extracted")
    pool.close()

    again = ExperiencePool(run / "experience.sqlite", embedder)  # reopened from the file
    meta = dict(again.conn.execute("SELECT key, value FROM meta"))
    assert meta["embedder"] == "all-MiniLM-L6-v2" and meta["dim"] == "384"
    assert again.matrix().shape == (3, 384) and again.matrix("insight", key=True).shape == (1, 384)
    assert [(it.step, it.origin) for it in again.items()] == [(0, "rollout"), (1, "rollout"), (2, "rollout")]
    assert again.items("insight")[0].key_text == "cancelling an order"

    scratch = again.scratch_copy()  # evaluation's accumulation writes here, never to the file
    scratch.add([traj_item("an eval success")], step=0, origin="eval")
    assert scratch.count() == 5 and again.count() == 4

    assert again.truncate(1) == 2  # the step-2 trajectory and insight
    assert [it.step for it in again.items()] == [0, 1] and again.count("insight") == 0

    other = ExperiencePool(tmp_path / "other.sqlite", embedder)
    assert other.import_from(run, step=0) == 2  # a run folder names its pool
    assert [it.text for it in other.items()] == ["trajectory of step 0", "trajectory of step 1"]
    assert np.allclose(other.matrix(), again.matrix())
    with pytest.raises(SelfEvolveError, match="no experience pool there"):
        other.import_from(tmp_path / "nowhere")
    (tmp_path / "junk.sqlite").write_text("not a database at all, just text" * 20)
    with pytest.raises(SelfEvolveError, match="not an experience pool"):
        ExperiencePool(tmp_path / "junk.sqlite", embedder)
    with pytest.raises(ValueError, match="kind"):
        other.add([NewItem(kind="memory", text="x", key_text="x")], step=0, origin="seed")


def test_seed_examples_are_train_tasks_spread_over_intents():
    shop = ENVS["shop"]
    n = len(shop.intents)  # 8
    items = seed_items(shop, {}, n, "shop")
    train_ids = {t.id for t in make_env("shop", split="train").tasks}
    assert len(items) == n and {it.task_id for it in items} <= train_ids  # never a test task
    assert {it.intent for it in items} == set(shop.intents)  # round-robin: one per intent
    assert all(it.success and it.tools and it.turns for it in items)


# ---- through the trainer: seeding, recall, resume, another run's pool ---------------------------------------
def test_run_seeds_recalls_resumes_and_imports_its_pool(tmp_path):
    run = tmp_path / "run"
    common = [*FAST, "env.name=shop", "experience.recall=seer", "experience.seed_examples=3",
              f"train.out_dir={run}"]
    Trainer(load_config(overrides=[*common, "train.steps=1"])).train()
    pool = sqlite3.connect(run / "experience.sqlite")
    seeds = pool.execute("SELECT origin, step, success FROM items").fetchall()
    assert seeds[:3] == [("seed", 0, 1)] * 3
    step = json.loads((run / "trajectories.jsonl").read_text().splitlines()[0])["steps"][0]
    assert len(step["info"]["recalled"]) == 3  # k = 4, but the pool holds 3 successes
    calls = [json.loads(x) for x in (run / "llm_calls.jsonl").read_text().splitlines()]
    assert {c["purpose"] for c in calls} == {"intent"} and all(c["backend"] == "policy" for c in calls)
    assert calls[0]["messages"][-1]["content"].endswith("Category:") and isinstance(calls[0]["output"], str)

    # a crash after step 2 added rows: the resume from step 1's checkpoint drops them
    with pool:
        pool.execute("INSERT INTO items (kind, text, key_text, embedding, key_embedding, origin, step, success, "
                     "turns) SELECT kind, 'added by a crashed step', key_text, embedding, key_embedding, 'rollout', "
                     "2, 1, turns FROM items LIMIT 1")
    n = pool.execute("SELECT COUNT(*) FROM items").fetchone()[0]
    pool.close()
    Trainer(load_config(overrides=[*common, "train.steps=2", "train.resume=true"])).train()
    pool = sqlite3.connect(run / "experience.sqlite")
    texts = [r[0] for r in pool.execute("SELECT text FROM items")]
    assert "added by a crashed step" not in texts and len(texts) >= n - 1
    pool.close()

    # experience.pool=RUN starts another run from this run's rows
    other = tmp_path / "other"
    Trainer(load_config(overrides=[*FAST, "env.name=shop", "experience.recall=seer", f"experience.pool={run}",
                                   "train.steps=1", f"train.out_dir={other}"])).train()
    a = [r[0] for r in sqlite3.connect(run / "experience.sqlite").execute("SELECT text FROM items ORDER BY id")]
    b = [r[0] for r in sqlite3.connect(other / "experience.sqlite").execute("SELECT text FROM items ORDER BY id")]
    assert b[:len(a)] == a


def test_evaluation_with_and_without_recall(tmp_path):
    base = [*FAST, "env.name=shop", "experience.recall=seer", "experience.seed_examples=2", "train.steps=1",
            "eval.episodes=2", "eval.chunk=1"]
    on = Trainer(load_config(overrides=[*base, "eval.accumulate=true", f"train.out_dir={tmp_path / 'on'}"])).train()
    off = Trainer(load_config(overrides=[*base, "eval.experience=off", f"train.out_dir={tmp_path / 'off'}"])).train()
    assert on["eval/experience/recalled_per_turn"] == pytest.approx(2.0)  # the pool's 2 seeds, every turn
    assert "eval/experience/intent_accuracy" in on
    assert not any(k.startswith("eval/experience/") for k in off)


# ---- self-navigating: split, stripping, old log-probs, boosting ---------------------------------------------
def test_eta_split_counts(policy):
    assert [nav.guided_count(g, 0.5) for g in (1, 2, 3, 4, 8)] == [1, 1, 2, 2, 4]  # halves round up
    assert nav.guided_count(4, 0.25) == 1 and nav.guided_count(5, 0.0) == 0 and nav.guided_count(5, 1.0) == 5
    cfg = load_config(overrides=[*TINY, "env.name=frozenlake", "experience.navigate=true", "experience.eta=0.5",
                                 "experience.seed_examples=0"])
    exp = Experience(cfg, None, policy, ENVS["frozenlake"], {}, "frozenlake")
    tasks = [t for t in seed_tasks("frozenlake", 2) for _ in range(3)]
    assert exp.guide(tasks, 3, training=True).guided == [True, True, False] * 2
    assert exp.guide(tasks, 3, training=False).guided == [True] * 6  # evaluation: every episode


@pytest.fixture(scope="module")
def guided_rollout(policy):
    """One training batch of FrozenLake, 2 tasks x G = 4, η = 0.5, with two insights in the pool."""
    cfg = load_config(overrides=[*TINY, "env.name=frozenlake", "env.size=3", "experience.navigate=true",
                                 "experience.seed_examples=0"])
    env_cls = ENVS["frozenlake"]
    exp = Experience(cfg, None, policy, env_cls, {"size": 3}, "frozenlake")
    exp.pool.add([NewItem(kind="insight", text="Move towards the goal and away from holes.",
                          key_text="walking on a frozen lake"),
                  NewItem(kind="insight", text="Never walk into the edge of the map.",
                          key_text="moving on a grid")], step=0, origin="extracted")
    tasks = [t for t in seed_tasks("frozenlake", 2) for _ in range(4)]
    envs = [make_env(env_cls, size=3) for _ in tasks]
    builder = build_prompt(cfg, policy, envs[0])
    trajs = rollout(policy, envs, tasks, builder, max_turns=3, group_ids=[t.id for t in tasks],
                    generator=torch.Generator().manual_seed(0), guide=exp.guide(tasks, 4, training=True))
    return builder, tasks, trajs


def test_guided_prompts_are_stripped_token_exact(guided_rollout, policy):
    builder, tasks, trajs = guided_rollout
    assert [t.guided for t in trajs] == [True, True, False, False] * 2
    block = policy.tokenizer.encode(nav.BLOCK_TITLE, add_special_tokens=False)

    def contains(ids, sub):
        return any(ids[i:i + len(sub)] == sub for i in range(len(ids) - len(sub) + 1))

    for traj in trajs:
        # the same episode replayed by the prompt builder without any block: same replies, same observations
        plain = EpisodeContext(builder, traj.task.instruction, traj.query, Guidance())
        assert plain.prompt == builder.prompt_ids([traj.query], [], traj.task.instruction, Guidance())
        for step in traj.steps:
            if traj.guided:
                assert contains(step.prompt_ids, block)  # sampled with the block ...
                assert step.train_prompt_ids == plain.prompt  # ... trained without it, as if never shown
            else:
                assert step.train_prompt_ids is None and step.prompt_ids == plain.prompt
            plain.advance(step.action_ids, step.action_text, step.observation)
    rows = build_rows(trajs, [1.0] * len(trajs))
    assert [r.guided for r in rows] == [t.guided for t in trajs]  # causal: one row each
    for row, traj in zip(rows, trajs):
        first = traj.steps[0].train_prompt_ids or traj.steps[0].prompt_ids
        assert row.ids[:len(first)] == first
        assert not contains(row.ids, block)


def test_recalled_examples_stripped_from_the_training_prompt(policy):
    """``experience.train_prompt=stripped``: SEER's recalled examples are shown to the sampler at every turn, and
    the training prompt is the one without recall (the static examples), token for token: one causal row per
    episode, off-policy like a guided one (boosted clip); shown (the default) trains on what was shown."""
    def played(train_prompt):
        cfg = load_config(overrides=[*TINY, "env.name=frozenlake", "env.size=3", "experience.recall=seer",
                                     "experience.seed_examples=3", "experience.intent=none",
                                     f"experience.train_prompt={train_prompt}"])
        env_cls = ENVS["frozenlake"]
        exp = Experience(cfg, None, policy, env_cls, {"size": 3}, "frozenlake")
        exp.pool.add(seed_items(env_cls, {"size": 3}, 3, "frozenlake"), step=0, origin="seed")
        tasks = [t for t in seed_tasks("frozenlake", 2) for _ in range(2)]
        envs = [make_env(env_cls, size=3) for _ in tasks]
        builder = build_prompt(cfg, policy, envs[0])
        trajs = rollout(policy, envs, tasks, builder, max_turns=3, group_ids=[t.id for t in tasks],
                        generator=torch.Generator().manual_seed(0), guide=exp.guide(tasks, 2, training=True))
        return builder, trajs

    builder, trajs = played("stripped")
    assert all(t.guided for t in trajs)
    for traj in trajs:
        plain = EpisodeContext(builder, traj.task.instruction, traj.query, Guidance())
        for step in traj.steps:
            assert step.info["recalled"]  # shown the pool's examples ...
            assert step.prompt_ids != plain.prompt and step.train_prompt_ids == plain.prompt  # ... trained without
            plain.advance(step.action_ids, step.action_text, step.observation)
    rows = build_rows(trajs, [1.0] * len(trajs))
    assert len(rows) == len(trajs) and all(r.guided for r in rows)  # one causal sequence per episode
    nav.prepare_guided_rows(rows, lambda rs: row_logprobs(policy, rs, 4096), "sampled", 0.6)
    assert [r.clip_high for r in rows] == [0.6] * len(rows)

    _, shown = played("shown")  # trained as shown: the recalled examples in the rows
    assert not any(t.guided for t in shown)
    assert all(s.train_prompt_ids is None and s.info["recalled"] for t in shown for s in t.steps)
    first = build_rows(shown, [1.0] * len(shown))[0]
    assert first.ids[:len(shown[0].steps[0].prompt_ids)] == shown[0].steps[0].prompt_ids
    with pytest.raises(ConfigError, match="needs experience.recall=seer"):
        load_config(overrides=["experience.train_prompt=stripped"])


def test_old_logprobs_sampled_or_recomputed_and_boost_only_guided(guided_rollout, policy):
    _, _, trajs = guided_rollout
    rows = build_rows(trajs, [1.0] * len(trajs))
    sampled = copy.deepcopy(rows)
    logprobs_of = lambda rs: row_logprobs(policy, rs, 4096)  # noqa: E731 - the token objective's
    m = nav.prepare_guided_rows(sampled, logprobs_of, "sampled", 0.6)
    assert [r.clip_high for r in sampled] == [0.6 if r.guided else None for r in rows]
    assert all(a.old_logprobs == b.old_logprobs for a, b in zip(sampled, rows))  # kept as sampled
    assert m["experience/ratio_drift"] > 0  # the block changed the context the tokens were sampled in
    assert m["experience/guided_tokens"] == sum(len(r.advantages) for r in rows if r.guided)

    recomputed = copy.deepcopy(rows)
    nav.prepare_guided_rows(recomputed, logprobs_of, "recompute", 0.6)
    again = nav.prepare_guided_rows(recomputed, logprobs_of, "recompute", 0.6)
    assert again["experience/ratio_drift"] == pytest.approx(0.0, abs=1e-4)  # now they are the stripped ones
    for a, b in zip(recomputed, rows):
        if not a.guided:
            assert a.old_logprobs == b.old_logprobs
    # the recomputation itself is right: on unguided rows (sampled on the same prompt) it gives the sampled values
    plain = [r for r in rows if not r.guided]
    got = row_logprobs(policy, plain, 4096)
    assert np.allclose(np.concatenate(got), np.concatenate([r.old_logprobs for r in plain]), atol=1e-3)


def test_boosting_reaches_the_loss_on_guided_tokens_only():
    guided = Row(ids=[5, 6, 7], mask=[0, 1, 1], old_logprobs=[0.0, 0.0], advantages=[1.0, 1.0], clip_high=0.6,
                 guided=True)
    plain = Row(ids=[5, 8], mask=[0, 1], old_logprobs=[0.0], advantages=[1.0])
    b = collate([guided, plain], pad_id=0, clip_high=0.28)
    assert b["clip_high"].tolist() == pytest.approx([0.6, 0.6, 0.28])
    assert "clip_high" not in collate([plain], pad_id=0, clip_high=0.28)
    # ratio 1.5 and A = 1 everywhere: guided tokens are under 1 + 0.6 (L = -1.5), the plain one is clipped at
    # 1 + 0.28 (L = -1.28); token mean = (-1.5 - 1.5 - 1.28) / 3
    logp = torch.full((3,), math.log(1.5))
    loss, _ = ppo_clip_loss(logp, b["old_logprobs"], b["advantages"], torch.ones(3), clip_low=0.2,
                            clip_high=b["clip_high"])
    assert loss.item() == pytest.approx((-1.5 - 1.5 - 1.28) / 3, abs=1e-6)


def test_training_with_navigation_end_to_end(tmp_path):
    out = tmp_path / "nav"
    final = Trainer(load_config(overrides=[
        *FAST, "env.name=frozenlake", "env.size=3", "experience.navigate=true", "algo.group_size=4",
        "experience.old_logprobs=recompute", "experience.llm_max_new_tokens=16", "train.steps=2",
        "experience.recall=seer", "experience.seed_examples=2", f"train.out_dir={out}"])).train()
    # SEER on a world without tools or intents: recall by similarity alone, from BFS solutions of train seeds
    step = json.loads((out / "trajectories.jsonl").read_text().splitlines()[0])["steps"][0]
    assert len(step["info"]["recalled"]) == 2
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert last["experience/extract_calls"] == 1  # one group per step
    assert last["experience/malformed"] + last["experience/insights_added"] + \
        last["experience/insights_invalid"] >= 1  # the tiny model's reply was read (and most likely malformed)
    assert 0 <= final["eval/success"] <= 1
    calls = [json.loads(x) for x in (out / "llm_calls.jsonl").read_text().splitlines()]
    assert [c["step"] for c in calls] == [1, 2] and {c["purpose"] for c in calls} == {"extract"}  # no intents
    # the extractor is told the game's rules before the board (a board alone does not say what G is)
    assert calls[0]["messages"][-1]["content"].startswith("Task: FrozenLake: you are P on a frozen lake.")


# ---- accumulation and extraction ----------------------------------------------------------------------------
def test_accumulation_adds_only_verified_successes_once(policy):
    cfg = load_config(overrides=[*TINY, "env.name=shop", "experience.recall=seer", "experience.seed_examples=0"])
    exp = Experience(cfg, None, policy, ENVS["shop"], {}, "shop")
    env = make_env("shop", split="train")
    task = env.tasks[0]
    first = env.load(task)
    good = expert_episode(env, first, Task(id=task.id, env="shop", seed=0, intent=task.intent))
    good.query = first
    first = env.load(task)
    bad = expert_episode(env, first, Task(id=task.id, env="shop", seed=0, intent=task.intent))
    bad.steps, bad.success = bad.steps[:1], False  # stopped after one call: the verifier says no
    bad.query = first
    assert good.success
    assert exp.absorb([good, bad, Trajectory(task=good.task)], exp.pool, step=3, origin="rollout") == 1
    assert exp.absorb([good], exp.pool, step=4, origin="rollout") == 0  # already there
    (item,) = exp.pool.items()
    assert item.success and item.step == 3 and item.origin == "rollout" and item.tools == \
        [s.info["tool_call"]["name"] for s in good.steps if "tool_call" in s.info]


class Scripted:
    """An LLM that answers from a list (to drive the parser down each path; the real model is tested above)."""

    def __init__(self, replies):
        self.replies = replies

    def chat(self, conversations, purpose, max_new_tokens=None):
        return self.replies[:len(conversations)]


def test_insight_parsing_validation_and_dedup(embedder):
    ok = '[{"when_to_use": "cancelling an order", "content": "Look the order up before cancelling it."}]'
    assert nav.parse_insights("Sure! " + ok + " Hope it helps.") == json.loads(ok)
    assert nav.parse_insights('{"when_to_use": "a  b c d e", "content": "x y z w v u"}') == \
        [{"when_to_use": "a b c d e", "content": "x y z w v u"}]
    for bad in ("no json here", "[1, 2]", '[{"when": "x"}]', '{"when_to_use": 3, "content": "x"}', "[{", ""):
        assert nav.parse_insights(bad) is None, bad
    assert not nav.valid_insight({"when_to_use": "short", "content": "Look the order up first."})
    assert not nav.valid_insight({"when_to_use": "the situation it applies to", "content": "what to do"})
    copied = {"when_to_use": "Booking something with a tool", "content": "Check it is available first, then "
              "give every required argument of the booking call."}  # the prompt's worked example, echoed
    assert not nav.valid_insight(copied) and not nav.valid_insight({**copied, "when_to_use": "walking on ice"})
    # the paraphrase seen in a FrozenLake run: 13 of the content's 14 words shared, Jaccard 13/15 ≥ 0.6
    near = {"when_to_use": "Booking the game", "content": "Check it is available first, then give every "
            "required argument of the game call."}
    assert not nav.valid_insight(near)
    assert nav.valid_insight({"when_to_use": "a hole is below you", "content": "Move right instead of down."})
    assert nav.novel(np.array([[1.0, 0.0], [0.9, 0.436], [0.0, 1.0]]), np.zeros((0, 2)), 0.5) == [True, False, True]

    pool = ExperiencePool(":memory:", embedder)
    replies = [ok, "I cannot answer that.", ok.replace("cancelling an order", "when cancelling orders"),
               '[{"when_to_use": "tiny", "content": "Look the order up."}]']
    groups = [("cancel order 7", ["a success"], ["a failure"])] * 4
    m = nav.extract(Scripted(replies), pool, groups, step=5, dedup=0.5)
    assert m == {"experience/extract_calls": 4, "experience/malformed": 1, "experience/insights_invalid": 1,
                 "experience/insights_added": 1}  # the near-duplicate when_to_use was dropped
    (ins,) = pool.items("insight")
    assert ins.step == 5 and ins.origin == "extracted" and ins.info["from"] == "contrast"


def test_malformed_output_of_the_real_model_is_survived(policy, embedder, tmp_path):
    llm = LLM("base", policy, log_dir=tmp_path, max_new_tokens=12)
    pool = ExperiencePool(":memory:", embedder)
    m = nav.extract(llm, pool, [("go to the goal", [], ["Request: go\nAction: left\nResult: hole"])], step=1,
                    dedup=0.5)
    assert m["experience/extract_calls"] == 1
    assert m["experience/malformed"] + m["experience/insights_invalid"] + m["experience/insights_added"] >= 1
    (call,) = [json.loads(x) for x in (tmp_path / "llm_calls.jsonl").read_text().splitlines()]
    assert call["purpose"] == "extract" and call["backend"] == "base" and call["messages"][0]["role"] == "system"


def test_intent_parsing_and_classification(policy):
    intents = ["order_status", "cancel_order", "return_item"]
    assert parse_intent("It is cancel order.", intents) == "cancel_order"
    assert parse_intent("RETURN_ITEM, or maybe order_status", intents) == "return_item"  # the first named
    assert parse_intent("cancel_orders", intents) is None and parse_intent("", intents) is None
    found, malformed = classify(LLM("policy", policy), ["where is order 5?", "where is order 5?", "cancel 7"],
                                intents)
    assert len(found) == 3 and found[0] == found[1] and all(f is None or f in intents for f in found)
    assert malformed == sum(f is None for f in (found[0], found[2]))


def test_experience_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"experience\.recal\b.*recall"):
        load_config(overrides=["experience.recal=seer"])
    with pytest.raises(ConfigError, match="recall"):
        load_config(overrides=["experience.recall=always"])
    assert load_config(overrides=["experience.recall=seer", "rollout.search=beam"]).rollout.search == "beam"
    assert load_config(overrides=["experience.navigate=true", "algo.name=self_ac"]).experience.navigate
    with pytest.raises(ConfigError, match="not a local SentenceTransformer"):
        Embedder(str(tmp_path / "no-model")).encode(["x"])
    with pytest.raises(SelfEvolveError, match="no experience pool there"):
        Trainer(load_config(overrides=[*FAST, "experience.recall=seer", f"experience.pool={tmp_path / 'none'}",
                                       f"train.out_dir={tmp_path / 'run'}"])).train()
