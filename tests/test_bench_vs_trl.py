"""benchmarks/bench_vs_trl.py: the task both libraries train on, and each side's step on a tiny model.

The selfevolve side needs nothing optional and always runs; the TRL side needs the optional extra
``selfevolve[peers]`` (trl 1.16) in this Python and is skipped without it.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_vs_trl as bench  # noqa: E402


def test_the_rewards_are_the_digit_and_trls_length_reward():
    seed = 3
    digit = random.Random(seed).randint(0, 9)  # the secret, as the task defines it
    other = (digit + 1) % 10
    assert bench.reward("sparse", seed, f"My guess is {digit}.") == 1.0
    assert bench.reward("sparse", seed, f"{other}, or {digit}") == 0.0  # the first digit counts
    assert bench.reward("sparse", seed, "seven") == 0.0
    assert bench.reward("dense", seed, "x" * 20) == 0.0  # -|20 - 20| / 20
    assert bench.reward("dense", seed, "abc") == -0.85  # -|20 - 3| / 20
    assert bench.reward("dense", seed, "") == -1.0


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """One warm-up step and one measured step on the tiny model, saved once for both sides."""
    args = argparse.Namespace(model="tiny", seed=0, warmup=1, steps=1)
    return bench.make_plan(args, tmp_path_factory.mktemp("plan"))


def test_the_plan_holds_each_steps_tasks_and_both_sides_render_the_same_prompt(plan):
    from transformers import AutoTokenizer

    from selfevolve.agent.prompt import PromptBuilder
    from selfevolve.tasks.source import SeedTasks

    seeds = [t.seed for t in SeedTasks("digit_guess", seed=0).next(8)]  # 4 prompts x (1 warm-up + 1 measured)
    assert len(plan["fl_tasks"]) == 8
    tok = AutoTokenizer.from_pretrained(plan["trl_model"])
    for regime, (rules, examples) in bench.TASKS.items():
        assert [t["seed"] for t in plan["tasks"][regime]] == seeds
        messages = plan["tasks"][regime][0]["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]  # rules, example, task
        trl_ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
        assert trl_ids["input_ids"] == PromptBuilder(tok, instructions=rules, examples=list(examples)).render(messages)


@pytest.mark.parametrize("regime, zero_spread", [("dense", 0.0), ("sparse", 1.0)])
def test_the_selfevolve_side_times_real_steps(plan, tmp_path, regime, zero_spread):
    result = bench.run_selfevolve(plan, regime, 8, tmp_path / "run")
    assert len(result["steps"]) == 2  # warm-up + measured
    for step in result["steps"]:
        assert step["rollout"] > 0 and step["update"] > 0
        assert step["total"] >= step["rollout"] + step["update"]
        assert step["metrics"]["turns/mean"] == 1.0  # one-turn episodes
    # dense: replies of 8 random tokens differ in length within every group; sparse: the untrained tiny model
    # guesses no secret, so every group's 8 rewards are 0
    assert [s["metrics"]["filter/zero_std_frac"] for s in result["steps"]] == [zero_spread] * 2
    assert result["prompt_tokens"] > 0 and result["peak_rss_gb"] > 0


def test_the_trl_side_times_real_steps(plan, tmp_path):
    pytest.importorskip("trl", reason="the optional extra selfevolve[peers]")
    from vs_trl_peer import run_trl

    result = run_trl(plan, "dense", 8, tmp_path / "run", grad_ckpt=True)  # TRL's default
    assert len(result["steps"]) == 2
    assert all(s["rollout"] > 0 and s["update"] > 0 for s in result["steps"])
    assert [s["metrics"]["frac_reward_zero_std"] for s in result["steps"]] == [0.0, 0.0]
