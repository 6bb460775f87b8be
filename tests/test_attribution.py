"""Self-attributing (AgentEvolver's ADCA): the credit math against a hand example, the judge's parser and its
fallbacks, the oracles on hand-built episodes of each environment, and training end to end (tiny model)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from selfevolve import Trainer
from selfevolve.algos.advantages import grpo_advantages, rloo_advantages
from selfevolve.algos.attribution import (attribution_advantages, fuse_step_rewards, group_zscore_steps,
                                          suffix_sums)
from selfevolve.config import load_config
from selfevolve.envs.base import StepResult, TextEnv
from selfevolve.envs.games.frozenlake import FrozenLakeEnv
from selfevolve.envs.games.sokoban import SokobanEnv, solve
from selfevolve.envs.tools.calls import format_tool_call
from selfevolve.envs.tools.shop import ShopEnv
from selfevolve.envs.tools.tables import TablesEnv
from selfevolve.errors import ConfigError
from selfevolve.objectives.credit import credit_batch, step_advantages
from selfevolve.rewards.attribution import (ATTRIBUTION_EXAMPLE, ATTRIBUTION_SYSTEM, Attributor, JudgeItem,
                                            attribution_messages, judge_item, judge_steps, parse_step_judgments)
from selfevolve.rewards.oracle import BAD, GOOD, Oracle, OracleMismatch, agreement, first_bad, lake_distances
from selfevolve.types import Step, Task, Trajectory
from credit_helpers import close, padded as _padded

R3 = math.sqrt(3)


# ---- the credit math ---------------------------------------------------------------------------------------------


def test_group_zscore_weighs_each_trajectory_equally():
    # group a: [GOOD, BAD] and [BAD, BAD, BAD, BAD]. Trajectory means 0 and -1 -> mu = -1/2 (pooled over the six
    # steps it would be -2/3); per-trajectory mean squared deviations 5/4 and 1/4 -> sigma^2 = 3/4.
    # group b: all GOOD -> sigma = 0 -> every z is 0. Group c: one trajectory [GOOD, BAD] -> mu 0, sigma 1.
    labels, mask = _padded([[1, -1], [-1, -1, -1, -1], [1, 1, 1], [1], [1, -1]])
    z = group_zscore_steps(labels, mask, ["a", "a", "b", "b", "c"], eps=0.0)
    expected = [[R3, -1 / R3, 0, 0], [-1 / R3] * 4, [0, 0, 0, 0], [0, 0, 0, 0], [1, -1, 0, 0]]
    close(z, expected)
    # the equal-weight statistics: mean of the trajectories' mean z is 0, their mean second moment is 1
    a = z[:2]
    assert float(sum(a[i, :n].mean() for i, n in enumerate([2, 4])) / 2) == pytest.approx(0, abs=1e-12)
    assert float(sum((a[i, :n] ** 2).mean() for i, n in enumerate([2, 4])) / 2) == pytest.approx(1)


def test_fusion_and_suffix_sums_by_hand():
    labels, mask = _padded([[1, -1], [-1, -1, -1, -1]])
    outcome = torch.tensor([1 / math.sqrt(2), -1 / math.sqrt(2)], dtype=torch.float64)
    z = group_zscore_steps(labels, mask, ["g", "g"], eps=0.0)
    fused = fuse_step_rewards(z, mask, outcome, alpha=0.2)
    s2 = 1 / math.sqrt(2)
    close(fused, [[0.2 * R3, -0.2 / R3 + s2, 0, 0], [-0.2 / R3, -0.2 / R3, -0.2 / R3, -0.2 / R3 - s2]])
    adv = suffix_sums(fused, mask)
    close(adv, [[0.2 * R3 - 0.2 / R3 + s2, -0.2 / R3 + s2, 0, 0],
                [-0.8 / R3 - s2, -0.6 / R3 - s2, -0.4 / R3 - s2, -0.2 / R3 - s2]])
    close(attribution_advantages(labels, mask, outcome, ["g", "g"], alpha=0.2, eps=0.0), adv.tolist())
    # alpha = 0: the outcome advantage alone, on every step (GRPO's broadcast)
    plain = attribution_advantages(labels, mask, outcome, ["g", "g"], alpha=0.0)
    close(plain, [[s2, s2, 0, 0], [-s2] * 4])


def _traj(group, labels, rewards, success=False):
    steps = [Step(prompt_ids=[], action_ids=[], logprobs=[], reward=r,
                  info={"attribution": {"label": lab, "rationale": "", "source": "oracle", "defaulted": False}})
             for lab, r in zip(labels, rewards)]
    return Trajectory(task=Task(id=group, env="x", seed=0), steps=steps, group_id=group, success=success)


@pytest.mark.parametrize("algo", ["grpo", "rloo"])
def test_credit_path_fuses_labels_with_the_estimators_outcome(algo):
    trajs = [_traj("g", [GOOD, BAD], [0.0, 1.0], True), _traj("g", [BAD] * 4, [0.0] * 4)]
    cfg = load_config(overrides=[f"algo.name={algo}", "reward.attribution=oracle", "attribution.alpha=0.2"])
    batch, _ = credit_batch(trajs, cfg, vocab_size=10)
    assert batch.step_labels.tolist() == [[1, -1, 0, 0], [-1, -1, -1, -1]]
    adv, returns = step_advantages(algo, batch, cfg.algo, cfg.attribution)
    assert returns is None
    # R~: GRPO's z-score (+-1/sqrt(2) for rewards 1, 0) or RLOO's leave-one-out difference (+-1)
    o = 1 / math.sqrt(2) if algo == "grpo" else 1.0
    close(adv, [[0.2 * R3 - 0.2 / R3 + o, -0.2 / R3 + o, 0, 0],
                [-0.8 / R3 - o, -0.6 / R3 - o, -0.4 / R3 - o, -0.2 / R3 - o]], tol=1e-5)
    # without labels the same batch gets the plain estimator, broadcast
    for t in trajs:
        for s in t.steps:
            del s.info["attribution"]
    plain_batch, _ = credit_batch(trajs, cfg, vocab_size=10)
    assert plain_batch.step_labels is None
    plain, _ = step_advantages(algo, plain_batch, cfg.algo, cfg.attribution)
    close(plain, [[o, o, 0, 0], [-o] * 4], tol=1e-5)


def test_a_batch_is_labelled_whole_or_not_at_all():
    trajs = [_traj("g", [GOOD], [1.0]), _traj("g", [BAD], [0.0])]
    del trajs[1].steps[0].info["attribution"]
    with pytest.raises(ValueError, match="some steps"):
        credit_batch(trajs, load_config(), vocab_size=10)


def test_config_errors_name_what_is_allowed():
    for algo in ("gigpo", "ppo", "self_ac"):  # every estimator takes step labels (tests/test_combinations.py)
        assert load_config(overrides=["reward.attribution=llm", f"algo.name={algo}"]).algo.name == algo
    with pytest.raises(ConfigError, match="reward.attribution"):
        load_config(overrides=["reward.attribution=judge"])
    with pytest.raises(ConfigError, match="attribution.alpha"):
        load_config(overrides=["attribution.alpha=-1"])
    cfg = load_config(overrides=["reward.attribution=llm", "algo.name=rloo", "attribution.steps=5"])
    assert cfg.attribution.steps == 5 and cfg.attribution.alpha == 0.2


# ---- the judge: prompt and parsing -------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected, how", [
    ("Step 1 Analysis: moved closer.\nStep 1 Judgment: GOOD\nStep 2 Analysis: repeated.\nStep 2 Judgment: BAD",
     [(GOOD, "moved closer."), (BAD, "repeated.")], "numbered"),
    ("**Step 1 Judgment:** good\n**Step 2 judgement**: Bad", [(GOOD, ""), (BAD, "")], "numbered"),
    ("Step 1: GOOD\nStep 2: BAD", [(GOOD, ""), (BAD, "")], "numbered"),
    ("Step 1 Judgment: the step was BAD\nStep 2 Verdict - GOOD", [(BAD, ""), (GOOD, "")], "numbered"),
    # the first label of a step counts; numbers out of range are ignored; a missing step stays None
    ("Step 1 Judgment: GOOD\nStep 1 Judgment: BAD\nStep 7 Judgment: BAD", [(GOOD, ""), (None, "")], "numbered"),
    # a label written where the analysis belongs counts when the step has no judgment
    ("Step 1 Analysis: ok\nStep 1 Judgment: GOOD\nStep 2 Analysis: moved\nStep 2 Analysis: BAD.",
     [(GOOD, "ok"), (BAD, "moved")], "numbered"),
    ("Step 1 Analysis: GOOD\nStep 1 Judgment: BAD\nStep 2 Analysis: Bad", [(BAD, ""), (BAD, "")], "numbered"),
    # numbered from 0: shifted
    ("Step 0 Judgment: BAD\nStep 1 Judgment: GOOD", [(BAD, ""), (GOOD, "")], "numbered"),
    # a GOOD inside an analysis is not a label
    ("Step 1 Analysis: a good move\nStep 2 Analysis: also good", [(None, "a good move"), (None, "also good")],
     "none"),
    ("GOOD BAD\nStep 1 Analysis: a good move", [(GOOD, "a good move"), (BAD, "")], "bare"),
    # no numbered label: the bare words in order, when there are enough of them
    ("GOOD, then BAD.", [(GOOD, ""), (BAD, "")], "bare"),
    ("BAD", [(None, ""), (None, "")], "none"),
    ("", [(None, ""), (None, "")], "none"),
])
def test_parse_step_judgments(text, expected, how):
    assert parse_step_judgments(text, 2) == (expected, how)


def test_parse_bounds():
    assert parse_step_judgments("Step 1 Judgment: GOOD", 0) == ([], "none")
    assert parse_step_judgments("Step 1 Judgment: GOOD " + "x" * 40_000, 1) == ([(None, "")], "none")
    long = parse_step_judgments("Step 1 Analysis: " + "why " * 200 + "\nStep 1 Judgment: BAD", 1)
    assert long[0][0][0] == BAD and len(long[0][0][1]) == 300
    assert parse_step_judgments("Step 1 Judgment: \ud800 GOOD", 1)[0] == [(GOOD, "")]


def test_prompt_shows_the_rules_the_example_and_the_trajectory():
    msgs = attribution_messages("Reach G.", "P _\n_ G", [("Right", "_ P\n_ G"), ("Down", "_ _\n_ √")], True)
    assert msgs[0] == {"role": "system", "content": ATTRIBUTION_SYSTEM} and msgs[1:3] == list(ATTRIBUTION_EXAMPLE)
    user = msgs[-1]["content"]
    assert user.startswith("Task: Reach G.\n\nStart:\nP _\n_ G\n\nStep 1\nAction: Right\nResult: _ P\n_ G")
    assert "Outcome: success (the task was solved)." in user and user.endswith("Judge each of the 2 steps.")
    # the worked example parses to the labels it shows
    example = ATTRIBUTION_EXAMPLE[1]["content"]
    assert [lab for lab, _ in parse_step_judgments(example, 4)[0]] == [GOOD, BAD, BAD, BAD]


class ScriptedLLM:
    batch_size = 2

    def __init__(self, reply):
        self.reply, self.calls = reply, []

    def chat(self, conversations, purpose, max_new_tokens=None):
        self.calls.append((purpose, len(conversations), max_new_tokens))
        return [self.reply(c[-1]["content"]) for c in conversations]


def test_judge_defaults_missing_labels_to_the_outcome_and_counts_them():
    items = [JudgeItem("t", None, [("a", "r")] * 3, True), JudgeItem("t", None, [("a", "r")] * 1, False),
             JudgeItem("t", None, [("a", "r")] * 2, False), JudgeItem("t", None, [], True)]

    def reply(user):  # labels only the first step, and only in the 3-step trajectory; nothing for the others
        return "Step 1 Analysis: fine\nStep 1 Judgment: BAD" if "3 steps" in user else "I cannot tell."

    llm = ScriptedLLM(reply)
    judged, stats = judge_steps(llm, items, tokens_per_step=10, max_new_tokens=25)
    assert [[j["label"] for j in js] for js in judged] == [[BAD, GOOD, GOOD], [BAD], [BAD, BAD], []]
    assert [j["defaulted"] for j in judged[0]] == [False, True, True]
    assert judged[0][0] == {"label": BAD, "rationale": "fine", "source": "llm", "defaulted": False}
    assert stats == {"attribution/calls": 3, "attribution/defaulted": 5, "attribution/unparsed": 2,
                     "attribution/bare": 0}
    # shortest first, in chunks of the batch size, each with its own budget (10 per step + 8, capped at 25)
    assert llm.calls == [("attribution", 2, 25), ("attribution", 1, 25)]


def test_judge_budget_follows_the_longest_trajectory_of_a_chunk():
    llm = ScriptedLLM(lambda user: "")
    items = [JudgeItem("t", None, [("a", "r")] * n, False) for n in (1, 1, 5)]
    judge_steps(llm, items, tokens_per_step=10, max_new_tokens=100)
    assert [c[2] for c in llm.calls] == [18, 58]


# ---- the oracles -------------------------------------------------------------------------------------------------
def play(env, seed, actions) -> Trajectory:
    """An episode recorded as the rollout records it (state key before each step, observation, info)."""
    traj = Trajectory(task=Task(id=f"{env.name}-{seed}", env=env.name, seed=seed), group_id="g")
    traj.query = env.reset(seed)
    for a in actions:
        key = env.state_key()
        obs, reward, done, info = env.step(a)
        traj.steps.append(Step(prompt_ids=[], action_ids=[], logprobs=[], action_text=a, observation=obs,
                               reward=reward, done=done, valid=info["valid_action"], state_key=key, info=dict(info)))
        traj.success = bool(info.get("success"))
        if done:
            break
    return traj


class Lake(FrozenLakeEnv):
    MAP = ["SFF", "FHF", "FFG"]  # distances to G: (0,0) 4, (0,1) 3, (1,0) 3, (0,2) 2, (2,0) 2, (1,2) 1, (2,1) 1

    def reset(self, seed):
        return self.load(self.MAP, seed=seed)


def labels_of(oracle, traj):
    return [(x["label"], x["rationale"]) for x in oracle.labels(traj)]


def test_lake_distances():
    dist = lake_distances(Lake.MAP)
    assert dist[(0, 0)] == 4 and dist[(2, 2)] == 0 and dist[(1, 2)] == 1 and (1, 1) not in dist


def test_frozenlake_oracle_by_hand():
    oracle = Oracle(Lake())
    lost = play(Lake(), 0, ["Right", "Up", "jump", "Left", "Down", "Right"])
    assert labels_of(oracle, lost) == [
        (GOOD, "distance to the goal 4 -> 3"), (BAD, "distance to the goal 3 -> 3"),  # the edge: no progress
        (BAD, "invalid action: nothing changed"), (BAD, "distance to the goal 3 -> 4"),
        (GOOD, "distance to the goal 4 -> 3"), (BAD, "fell into a hole")]
    won = play(Lake(), 0, ["Down", "Down", "Right", "Right"])
    assert [lab for lab, _ in labels_of(oracle, won)] == [GOOD] * 4 and won.success
    assert labels_of(oracle, won)[-1] == (GOOD, "reached the goal")
    # several moves in one turn: judged by the turn's end state
    multi = play(Lake(moves_per_turn=3), 0, ["Down Down Up", "Down Right"])
    assert labels_of(Oracle(Lake(moves_per_turn=3)), multi) == [(GOOD, "distance to the goal 4 -> 3"),
                                                                  (GOOD, "distance to the goal 3 -> 1")]


def test_frozenlake_oracle_replays_generated_maps():
    env = FrozenLakeEnv(size=4)
    traj = play(FrozenLakeEnv(size=4), 12, ["Down", "Right", "Right", "Down", "Down", "Right", "Up", "Left"])
    labels = Oracle(env).labels(traj)
    assert len(labels) == len(traj.steps) and {x["label"] for x in labels} <= {GOOD, BAD}


class Room(SokobanEnv):
    ROOM = "\n".join(["# # # # # #", "# _ _ _ _ #", "# _ P X O #", "# _ _ _ _ #", "# # # # # #"])

    def reset(self, seed):
        return self.load(self.ROOM)


class DeadRoom(Room):
    ROOM = "\n".join(["# # # # # #", "# _ _ _ _ #", "# _ X _ _ #", "# O P _ _ #", "# # # # # #"])


def test_sokoban_oracle_by_hand():
    assert len(solve(Room.ROOM)) == 1
    traj = play(Room(), 0, ["Up", "Down", "Right"])
    assert labels_of(Oracle(Room()), traj) == [(BAD, "distance to a solved room 1 -> 2"),
                                               (GOOD, "distance to a solved room 2 -> 1"),
                                               (GOOD, "reached a solved room")]
    # pushing the box against the top wall leaves no solution; nothing after that can help
    dead = play(DeadRoom(), 0, ["Up", "Left", "Up"])
    assert labels_of(Oracle(DeadRoom()), dead) == [(BAD, "no solution is left"),
                                                   (BAD, "a solved room could no longer be reached"),
                                                   (BAD, "a solved room could no longer be reached")]


def call(name, **arguments):
    return format_tool_call(name, arguments)


def test_shop_oracle_by_hand():
    env = ShopEnv()
    env.reset(0)
    assert env.reference_text() == 'get_order({"order_id": "W9289"})\nfinish({"answer": "delivered"})'
    oracle = Oracle(ShopEnv())
    lost = play(ShopEnv(), 0, ["hello", call("get_order", order_id="W0000"), call("get_order", order_id="W9289"),
                               call("get_order", order_id="W9289"), call("finish", answer="shipped")])
    assert labels_of(oracle, lost) == [
        (BAD, "not a valid tool call"), (BAD, "get_order failed"),
        (GOOD, "get_order: a reference call (same result)"),
        (BAD, "get_order: not in the reference solution, or repeated"), (BAD, "finished with a wrong result")]
    won = play(ShopEnv(), 0, [call("get_order", order_id="W9289"), call("finish", answer="delivered")])
    assert [lab for lab, _ in labels_of(oracle, won)] == [GOOD, GOOD] and won.success
    # an equivalent call (another spelling, the same result) counts as the reference call
    env.reset(1)
    assert env.reference_text().startswith('find_products({"query": "Water Bottle"})')
    same = play(ShopEnv(), 1, [call("find_products", query="water bottle"), call("find_products", query="Water")])
    assert [lab for lab, _ in labels_of(oracle, same)] == [GOOD, BAD]


def test_tables_oracle_judges_a_call_by_its_result_in_context():
    env = TablesEnv()
    env.reset(1)
    ref = env.task.solution
    assert [c["name"] for c in ref] == ["load_table", "filter_rows", "aggregate", "finish"]
    steps = [call(c["name"], **c["arguments"]) for c in ref]
    # the reference's count, but taken before the filter it needs: another result, BAD; in place: GOOD
    early = play(TablesEnv(), 1, [steps[0], steps[2], steps[1], steps[2], steps[3]])
    assert [lab for lab, _ in labels_of(Oracle(TablesEnv()), early)] == [GOOD, BAD, GOOD, GOOD, GOOD]
    assert early.success


def test_oracle_refuses_a_replay_that_leaves_the_recorded_states():
    traj = play(Lake(), 0, ["Right", "Down"])
    traj.steps[1].state_key = "2,2"
    with pytest.raises(OracleMismatch, match="step 2"):
        Oracle(Lake()).labels(traj)


def test_no_oracle_for_an_env_without_truth():
    with pytest.raises(ConfigError, match="no attribution oracle for env 'coin'"):
        Oracle(Coin())


def test_agreement_by_hand():
    truth = [[True, False, True], [False, False], [True]]
    pred = [[True, True, True], [True, False], [True]]
    a = agreement(pred, truth, failed=[True, True, False])
    assert a["steps"] == 6 and a["accuracy"] == pytest.approx(4 / 6)
    assert a["good_recall"] == 1.0 and a["bad_recall"] == pytest.approx(1 / 3)
    assert a["balanced_accuracy"] == pytest.approx((1 + 1 / 3) / 2)
    # first errors: trajectory 1 oracle 1 vs judge none (a miss), trajectory 2 oracle 0 vs judge 1 (a miss)
    assert a["first_error_accuracy"] == 0.0 and a["failed_with_error"] == 2
    assert agreement([[False, True]], [[False, True]], [True])["first_error_accuracy"] == 1.0
    only_good = agreement([[False]], [[True]], [False])
    assert only_good["balanced_accuracy"] == 0.0 and "bad_recall" not in only_good
    assert "first_error_accuracy" not in only_good
    assert first_bad([True, True]) is None and first_bad([True, False, False]) == 1
    with pytest.raises(ValueError):
        agreement([[True]], [[True, False]], [False])


def test_judge_item_for_games_and_tool_worlds():
    lake = play(Lake(), 0, ["<think>hm</think><answer>Right</answer>", "jump"])
    item = judge_item(lake, rules="Reach the goal.")
    assert item.task == "Reach the goal." and item.start == lake.query
    assert [a for a, _ in item.steps] == ["Right", "jump"] and item.success is False
    shop = play(ShopEnv(), 0, [call("get_order", order_id="W9289")])
    item = judge_item(shop)
    assert item.task == shop.query and item.start is None


# ---- the stage and training end to end (tiny) ---------------------------------------------------------------------
class Coin(TextEnv):
    """Any reply is valid; a reply of even length wins. Outcomes differ within a group, so do default labels."""

    name = "coin"
    instructions = "Say something."
    examples = [("Say something.", "hi")]
    max_turns = 3

    def reset(self, seed):
        self.turn = 0
        return "Say something."

    def step(self, action):
        self.turn += 1
        win = len(action) % 2 == 0
        return StepResult("again" if not win else "yes", float(win), win or self.turn >= self.max_turns,
                          {"success": win, "valid_action": True})


TINY = ["model.name=tiny", "model.dtype=fp32", "train.tasks_per_step=2", "algo.group_size=4", "eval.episodes=2",
        "train.progress=false", "train.warm_start_steps=0", "agent.max_new_tokens=3"]


def _read(out, name):
    return [json.loads(x) for x in (out / name).read_text().splitlines()]


def _recomputed(trajs, algo):
    """The advantages of eqs. (1)-(3) from the logged labels and rewards of one step's trajectories."""
    labels, mask = _padded([[1.0 if s["info"]["attribution"]["label"] == GOOD else -1.0 for s in t["steps"]]
                            for t in trajs])
    rewards = torch.tensor([t["reward"] for t in trajs], dtype=torch.float64)
    groups = [t["group_id"] for t in trajs]
    outcome = grpo_advantages(rewards, groups) if algo == "grpo" else rloo_advantages(rewards, groups)
    adv = attribution_advantages(labels, mask, outcome, groups, alpha=0.3)
    return [row[:len(t["steps"])] for row, t in zip(adv.tolist(), trajs)]


@pytest.mark.parametrize("algo", ["grpo", "rloo"])
def test_training_with_llm_attribution(tmp_path, algo):
    out = tmp_path / algo
    cfg = load_config(overrides=[*TINY, f"algo.name={algo}", "train.steps=2", "reward.attribution=llm",
                                 "attribution.steps=1", "attribution.alpha=0.3", "attribution.tokens_per_step=8",
                                 f"train.out_dir={out}"])
    Trainer(cfg, env=Coin).train()
    metrics = {m["step"]: m for m in _read(out, "metrics.jsonl")}
    first = metrics[1]
    assert first["attribution/calls"] == 8 and 0 <= first["attribution/good_share"] <= 1
    assert first["attribution/defaulted"] >= 0 and first["attribution/seconds"] > 0
    assert "attribution/accuracy" not in first  # no oracle for this world
    assert not any(k.startswith("attribution/") for k in metrics[2])  # attribution.steps=1: plain after that
    trajs = _read(out, "trajectories.jsonl")
    step1 = [t for t in trajs if t["step"] == 1]
    for t in step1:
        for s in t["steps"]:
            j = s["info"]["attribution"]
            assert j["source"] == "llm" and j["label"] in (GOOD, BAD) and isinstance(j["rationale"], str)
            if j["defaulted"]:
                assert j["label"] == (GOOD if t["success"] else BAD)
    for t, adv in zip(step1, _recomputed(step1, algo)):
        assert t["flags"]["advantages"] == pytest.approx(adv, abs=1e-4)
    assert any(len(set(t["flags"]["advantages"])) > 1 for t in step1)  # step-level credit, not one per episode
    step2 = [t for t in trajs if t["step"] == 2]
    assert all("attribution" not in s["info"] for t in step2 for s in t["steps"])
    for t in step2:  # the plain estimator: one advantage broadcast to every turn
        assert len(set(t["flags"]["advantages"])) == 1
    calls = _read(out, "llm_calls.jsonl")
    assert len(calls) == 8 and {c["purpose"] for c in calls} == {"attribution"} and {c["step"] for c in calls} == {1}
    assert calls[0]["messages"][0]["content"] == ATTRIBUTION_SYSTEM


def test_training_with_oracle_attribution_and_resume(tmp_path):
    out = tmp_path / "run"
    base = [*TINY, "env.name=frozenlake", "env.size=3", "env.max_turns=3", "reward.attribution=oracle",
            "attribution.steps=2", f"train.out_dir={out}"]
    Trainer(load_config(overrides=[*base, "train.steps=1"])).train()
    Trainer(load_config(overrides=[*base, "train.steps=3", "train.resume=true"])).train()
    metrics = {m["step"]: m for m in _read(out, "metrics.jsonl")}
    assert "attribution/good_share" in metrics[1] and "attribution/good_share" in metrics[2]
    assert "attribution/good_share" not in metrics[3]  # the restored step counter ends attribution on time
    assert "attribution/calls" not in metrics[1]  # no LLM
    trajs = [t for t in _read(out, "trajectories.jsonl") if t["step"] <= 2]
    assert trajs and all(s["info"]["attribution"]["source"] == "oracle" for t in trajs for s in t["steps"])
    assert not (out / "llm_calls.jsonl").exists() or not (out / "llm_calls.jsonl").read_text()


def test_llm_attribution_is_measured_against_the_oracle(tmp_path):
    from selfevolve.models.llm import LLM
    from selfevolve.train.trainer import build_policy

    policy = build_policy(load_config(overrides=["model.name=tiny", "model.dtype=fp32"]))
    spec = load_config(overrides=["attribution.tokens_per_step=8"]).attribution
    attributor = Attributor("llm", spec, Lake(), LLM("policy", policy, log_dir=tmp_path))
    trajs = [play(Lake(), 0, ["Right", "Up", "Left"]), play(Lake(), 0, ["Down", "Down", "Right", "Right"])]
    metrics = attributor(trajs, step=1)
    for key in ("accuracy", "balanced_accuracy", "first_error_accuracy", "oracle_good_share", "good_share"):
        assert 0.0 <= metrics[f"attribution/{key}"] <= 1.0, key
    assert metrics["attribution/oracle_good_share"] == pytest.approx(5 / 7)
    assert [s.info["attribution"]["oracle"] for s in trajs[0].steps] == [GOOD, BAD, BAD]
    assert all(s.info["attribution"]["source"] == "llm" for t in trajs for s in t.steps)
    with pytest.raises(ConfigError, match="no attribution oracle"):
        Attributor("oracle", spec, Coin())
