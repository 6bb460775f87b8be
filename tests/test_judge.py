"""The LLM-judge outcome reward (AgentEvolver): parsing, bands, retries and fallback, agreement, a real call."""

from __future__ import annotations

import json

import pytest

from selfevolve.config import load_config
from selfevolve.envs import make_env
from selfevolve.errors import ConfigError
from selfevolve.rewards.judge import (JUDGE_EXAMPLE, JUDGE_SYSTEM, achieved, agreement, game_rules, judge,
                                      judge_messages, judge_trajectories, parse_reward, parse_verdict,
                                      to_band)
from selfevolve.types import Step, Task, Trajectory


class ScriptedLLM:
    """Stand-in for ``LLM``: answers each ``chat`` call with the next scripted list, and records the calls."""

    def __init__(self, *replies: list[str]):
        self.replies = list(replies)
        self.calls: list[tuple[str, list]] = []

    def chat(self, conversations, purpose, max_new_tokens=None):
        self.calls.append((purpose, conversations))
        out = self.replies.pop(0)
        assert len(out) == len(conversations)
        return out


@pytest.mark.parametrize("text, expected", [
    ("Good work. <reward>85</reward>", 85),
    ("<reward> 0 </reward>", 0),
    ("<REWARD>100</REWARD>", 100),
    ("<reward>30</reward> no wait <reward>70</reward>", 70),  # the last tag wins
    ("<reward>70</reward> score: 10", 70),  # a tag outranks the looser forms
    ("Reward: 65", 65),
    ("the score = 12 overall", 12),
    ("score: 20, then score: 35", 35),
    ("I give it 75/100.", 75),
    ("75 / 100", 75),
    ("  42\n", 42),
    ("80.", 80),
])
def test_parse_reward_forms(text, expected):
    assert parse_reward(text) == expected


@pytest.mark.parametrize("text", [
    "", "nonsense", "The attempt was fine.", "<reward>101</reward>", "<reward>-5</reward>", "score: 250",
    "150/100", "3 of 4 steps were right", "<reward>high</reward>", "101",
])
def test_parse_reward_garbage_and_out_of_range(text):
    assert parse_reward(text) is None


@pytest.mark.parametrize("text, expected", [
    # SmolLM2-135M's FrozenLake judgements, verbatim openings: a verdict, then a loop, never a score
    ("The goal was not reached. The action was not done. The goal was not reached.", 0),
    ("The goal was reached. The action was completed. The action was completed.", 60),
    ("The task has been completed successfully.", 60),
    ("The request was never fulfilled.", 0),
    ("The goal was reached. Later: the goal was not reached.", 60),  # the first verdict decides
    # its shop judgements: the first outcome sentence decides
    ("The water bottle was exchanged for 750ml, steel one. The attempt was not completed.", 0),
    ("The return item returned 21.99. The attempt was not successful. The goal was not achieved.", 0),
    ("The order was finished.\n\nThe goal was achieved. The attempt was not completed.", 60),
])
def test_parse_verdict_reads_a_verdict_in_words(text, expected):
    assert parse_reward(text) is None and parse_verdict(text) == expected


@pytest.mark.parametrize("text", ["The attempt was fine.", "The ice is melting.", "nonsense", "",
                                  "The goal is to reach the goal.", "The goal was to return the Office Chair."])
def test_parse_verdict_needs_an_outcome(text):
    assert parse_verdict(text) is None


def test_judge_scores_a_verdict_without_retrying():
    llm = ScriptedLLM(["The goal was reached. The goal was reached.", "The goal was not reached.", "hmm"],
                      ["<reward>30</reward>"])
    scores, stats = judge(llm, [("a", None, "x"), ("b", None, "y"), ("c", None, "z")])
    assert scores == [0.6, 0.0, 0.3]
    assert stats["judge/verdict"] == 2 and stats["judge/malformed"] == 1 and stats["judge/retried"] == 1
    assert stats["judge/fallback"] == 0


def test_to_band_by_hand():
    assert [to_band(s) for s in (0, 40, 41, 50, 51, 59, 60, 100)] == [0, 40, 40, 40, 60, 60, 60, 100]
    assert to_band(-3) == 0 and to_band(130) == 100
    assert achieved(0.6) and not achieved(0.4) and achieved(1.0)


def test_messages_hold_principles_example_and_reference():
    msgs = judge_messages("Find order 7.", "get_order(id=7)\nfinish(answer=shipped)", "Request: Find order 7.")
    assert msgs[0] == {"role": "system", "content": JUDGE_SYSTEM}
    for phrase in ("score is 0", "at most 20", "reference solution", "60 to 100", "0 to 40", "Never give 41 to 59",
                   "<reward>N</reward>"):
        assert phrase in JUDGE_SYSTEM
    # The worked example comes before the real task and shows the answer format.
    assert msgs[1:3] == list(JUDGE_EXAMPLE) and [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert parse_reward(msgs[2]["content"]) is not None
    assert "Find order 7." not in msgs[1]["content"]
    real = msgs[-1]["content"]
    assert "Task: Find order 7." in real and "get_order(id=7)\nfinish(answer=shipped)" in real
    assert "none is available" in judge_messages("Find order 7.", None, "Request: x")[-1]["content"]
    assert "none is available" in judge_messages("Find order 7.", "  ", "Request: x")[-1]["content"]
    long = "Request: q\n" + "Action: look()\nResult: nothing\n" * 400 + "Action: finish(answer=42)"
    cut = judge_messages("q", None, long)[-1]["content"]
    assert len(cut) < 3000 and "finish(answer=42)" in cut and "Request: q" in cut  # start and end kept


def test_judge_retry_and_fallback():
    llm = ScriptedLLM(["<reward>85</reward>", "nonsense", "score: 45"], ["still nonsense"])
    items = [("q1", "ref1", "ep1"), ("q2", None, "ep2"), ("q3", "ref3", "ep3")]
    scores, stats = judge(llm, items)
    assert scores == [0.85, 0.0, 0.4]  # 45 lies in the gap: moved to 40; the unreadable one scores 0
    assert stats == {"judge/calls": 4, "judge/malformed": 1, "judge/retried": 1, "judge/fallback": 1,
                     "judge/verdict": 0, "judge/mean": pytest.approx(1.25 / 3), "judge/achieved": pytest.approx(1 / 3)}
    assert [p for p, _ in llm.calls] == ["judge", "judge_retry"]
    retry = llm.calls[1][1][0]
    # The retry is the malformed item's conversation, its bad reply, and the format asked for again.
    assert retry[:-2] == judge_messages("q2", None, "ep2")
    assert retry[-2] == {"role": "assistant", "content": "nonsense"} and "<reward>N</reward>" in retry[-1]["content"]


def test_judge_retry_recovers_and_no_retries():
    llm = ScriptedLLM(["?", "<reward>10</reward>"], ["<reward>55</reward>"])
    scores, stats = judge(llm, [("a", None, "x"), ("b", None, "y")])
    assert scores == [0.6, 0.1] and stats["judge/malformed"] == 1 and stats["judge/fallback"] == 0
    scores, stats = judge(ScriptedLLM(["?", "?"]), [("a", None, "x"), ("b", None, "y")], retries=0)
    assert scores == [0.0, 0.0] and stats["judge/retried"] == 0 and stats["judge/fallback"] == 2
    assert judge(ScriptedLLM(), []) == ([], {})


def test_judge_trajectories_builds_items():
    step = Step(prompt_ids=[], action_ids=[], logprobs=[], action_text="get_order(id=7)", observation="shipped")
    t1 = Trajectory(task=Task(id="a", env="shop", seed=0, instruction="Where is order 7?", reference="get_order(7)"),
                    steps=[step], query="Where is my order 7?")
    t2 = Trajectory(task=Task(id="b", env="shop", seed=0, instruction="Cancel order 9."), steps=[])
    llm = ScriptedLLM(["<reward>90</reward>", "<reward>5</reward>"])
    scores, _ = judge_trajectories(llm, [t1, t2])
    assert scores == [0.9, 0.05]
    first, second = (c[-1]["content"] for c in llm.calls[0][1])
    assert "Task: Where is my order 7?" in first and "get_order(7)" in first and "Result: shipped" in first
    assert "Task: Cancel order 9." in second and "none is available" in second  # no query flag: the instruction


def test_game_rules_reach_the_judge():
    """A FrozenLake board alone does not say what the goal is: the judge reads the game's instructions first. A tool
    world's request is the whole task, so it gets none."""
    lake = make_env("frozenlake")
    rules = game_rules(lake)
    assert "Reach the goal G" in rules and game_rules(make_env("shop")) == ""
    board = lake.reset(3)
    t = Trajectory(task=Task(id="f", env="frozenlake", seed=3), query=board,
                   steps=[Step(prompt_ids=[], action_ids=[], logprobs=[], action_text="Down", observation="X")])
    llm = ScriptedLLM(["<reward>0</reward>"])
    judge_trajectories(llm, [t], rules=rules)
    ask = llm.calls[0][1][0][-1]["content"]
    assert ask.startswith(f"Task: {rules}\nStart:\n{board}")


def test_agreement_by_hand():
    judged = [True, True, True, True, True, False, False, False, False, False]
    verified = [True, True, True, False, False, True, False, False, False, False]
    # tp = 3, fp = 2, fn = 1, tn = 4. p_o = 7/10 = 0.7; p_J = 5/10, p_V = 4/10;
    # p_e = 0.5·0.4 + 0.5·0.6 = 0.5; κ = (0.7 − 0.5)/(1 − 0.5) = 0.4. precision 3/5, recall 3/4.
    a = agreement(judged, verified)
    assert (a["tp"], a["fp"], a["fn"], a["tn"], a["n"]) == (3, 2, 1, 4, 10)
    assert a["accuracy"] == pytest.approx(0.7) and a["kappa"] == pytest.approx(0.4)
    assert a["precision"] == pytest.approx(0.6) and a["recall"] == pytest.approx(0.75)


def test_agreement_degenerate():
    same = agreement([True] * 3, [True] * 3)  # both constant and equal: p_e = 1, κ defined as 1
    assert same["kappa"] == 1.0 and same["accuracy"] == 1.0 and same["precision"] == 1.0
    # A constant judge against a mixed verifier: p_e = p_o, κ = 0 (no division by zero).
    const = agreement([True] * 4, [True, False, True, False])
    assert const["kappa"] == pytest.approx(0.0) and const["precision"] == 0.5 and const["recall"] == 1.0
    none = agreement([False] * 2, [True] * 2)
    assert none["precision"] == 0.0 and none["recall"] == 0.0 and none["kappa"] == pytest.approx(0.0)
    assert agreement([], [])["kappa"] == 0.0
    with pytest.raises(ValueError):
        agreement([True], [])


def test_judge_with_tiny_model(tmp_path):
    from selfevolve.config import load_config
    from selfevolve.models.llm import LLM
    from selfevolve.train.trainer import build_policy

    policy = build_policy(load_config(overrides=["model.name=tiny", "model.dtype=fp32"]))
    llm = LLM("policy", policy, log_dir=tmp_path, max_new_tokens=16)
    items = [("Where is order 7?", "get_order(id=7)", "Request: Where is order 7?\nAction: get_order(id=7)\n"
              "Result: shipped"), ("Cancel order 9.", None, "Request: Cancel order 9.")]
    scores, stats = judge(llm, items)
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 and not 0.40 < s < 0.60 for s in scores)
    assert 0 <= stats["judge/fallback"] <= stats["judge/malformed"] <= 2
    assert stats["judge/retried"] == stats["judge/malformed"]  # one retry round
    assert stats["judge/calls"] == 2 + stats["judge/retried"]
    assert stats["judge/mean"] == pytest.approx(sum(scores) / 2)
    rows = [json.loads(line) for line in (tmp_path / "llm_calls.jsonl").read_text().splitlines()]
    assert len(rows) == stats["judge/calls"]
    assert [r["purpose"] for r in rows[:2]] == ["judge", "judge"]
    assert all(r["purpose"] == "judge_retry" for r in rows[2:])
    assert [r["messages"] for r in rows[:2]] == [judge_messages(*it) for it in items]
    assert all(r["backend"] == "policy" and isinstance(r["output"], str) for r in rows)


# ---- the judge stage of the trainer (reward.source) ---------------------------------------------------------
def _run(tmp_path, source):
    from selfevolve import Trainer

    out = tmp_path / source
    Trainer(load_config(overrides=[
        "model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=4", "env.name=shop", "env.max_turns=2",
        "train.steps=1", "train.tasks_per_step=1", "algo.group_size=2", "eval.episodes=1", "train.progress=false",
        "train.warm_start_steps=0", "reward.judge_max_new_tokens=8", f"reward.source={source}",
        f"train.out_dir={out}"])).train()
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()][-1]
    trajs = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    calls = [json.loads(x) for x in (out / "llm_calls.jsonl").read_text().splitlines()]
    return metrics, trajs, calls


def test_trainer_rewards_from_the_judge(tmp_path):
    metrics, trajs, calls = _run(tmp_path, "judge")
    assert metrics["judge/calls"] >= 2 and "judge/kappa" in metrics
    for t in trajs:  # the judge's score is the outcome: on the last step, nothing elsewhere
        assert [s["reward"] for s in t["steps"]][:-1] == [0.0] * (len(t["steps"]) - 1)
        assert t["steps"][-1]["reward"] == t["flags"]["judge_score"]
        assert t["flags"]["reference"].startswith(("get_", "find_", "list_"))  # the tool world's solution
    judge_calls = [c for c in calls if c["purpose"] == "judge"]
    assert len(judge_calls) == 2 and all(c["step"] == 1 for c in calls)
    assert "Reference solution:\n" + trajs[0]["flags"]["reference"] in judge_calls[0]["messages"][-1]["content"]


def test_trainer_measures_the_judge_beside_the_verifier(tmp_path):
    metrics, trajs, _ = _run(tmp_path, "both")
    assert 0.0 <= metrics["judge/accuracy"] <= 1.0
    for t in trajs:  # the environment's rewards are kept
        assert "judge_score" in t["flags"]
        assert t["reward"] == sum(s["reward"] for s in t["steps"])
    with pytest.raises(ConfigError, match="reward.source"):
        load_config(overrides=["reward.source=llm"])
