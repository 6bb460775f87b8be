"""Which tasks a step trains on: dynamic sampling (groups with a reward spread) and learnability selection."""

from __future__ import annotations

import json
import random

import pytest

from selfevolve import Trainer, load_config
from selfevolve.rollout.dynamic_sampling import has_spread, sample_with_spread
from selfevolve.tasks.learnability import (LearnabilityTasks, learnability_weight, success_estimate,
                                           weighted_sample)
from selfevolve.tasks.source import SeedTasks
from selfevolve.types import Step, Task, Trajectory


def group(task_id: str, rewards: list[float]) -> list[Trajectory]:
    return [Trajectory(task=Task(id=task_id, env="e", seed=0), group_id=task_id,
                       steps=[Step(prompt_ids=[], action_ids=[], logprobs=[], reward=r)], success=r >= 1)
            for r in rewards]


def test_dynamic_sampling_fills_the_batch_with_groups_that_have_a_spread_and_stops_at_its_cap():
    """Target 3 groups. Round 1 plays tasks 0-2: only task 1 has a spread. Round 2 plays the 2 missing (3, 4):
    task 4 has one. Round 3 plays 1 (task 5): it has one. Kept: 1, 4, 5; 6 groups played; 3 rounds."""
    outcomes = {0: [0, 0], 1: [0, 1], 2: [1, 1], 3: [0.5, 0.5], 4: [1, 0], 5: [0.2, 0.1], 6: [0, 1]}
    drawn, played = iter(range(100)), []

    def draw(n):
        return [next(drawn) for _ in range(n)]

    def play(tasks):
        played.append(list(tasks))
        return [t for k in tasks for t in group(f"t{k}", outcomes[k])], {"tasks": len(tasks)}

    trajs, stats, m = sample_with_spread(draw, play, target=3, max_rounds=5)
    assert played == [[0, 1, 2], [3, 4], [5]] and stats == [{"tasks": 3}, {"tasks": 2}, {"tasks": 1}]
    assert [t.group_id for t in trajs] == ["t1", "t1", "t4", "t4", "t5", "t5"]
    assert m == {"sampling/rounds": 3, "sampling/groups": 6, "sampling/kept_groups": 3,
                 "sampling/zero_spread_first": pytest.approx(2 / 3)}
    # the cap: 2 rounds, still one group short → trains on the 2 it has
    drawn, played = iter(range(100)), []
    trajs, _, m = sample_with_spread(draw, play, target=3, max_rounds=2)
    assert played == [[0, 1, 2], [3, 4]] and m["sampling/kept_groups"] == 2 and len(trajs) == 4
    # nothing with a spread: the step still reports what it played
    drawn, played = iter([0, 2, 3]), []
    trajs, _, m = sample_with_spread(draw, play, target=3, max_rounds=1)
    assert len(trajs) == 6 and m["sampling/kept_groups"] == 0
    assert not has_spread(group("a", [0.3, 0.3])) and has_spread(group("a", [0.3, 0.31]))


def test_learnability_weights_on_a_hand_example():
    """Prior 0.5 with weight 2 (Beta(1, 1)): 3 of 4 solved → p̂ = (3 + 1) / (4 + 2) = 2/3, weight 2/9 + 0.05;
    0 of 6 → 1/8, weight 7/64 + 0.05; 8 of 8 → 9/10, weight 0.09 + 0.05; unplayed → 0.5, weight 0.3."""
    assert success_estimate(3, 4, 0.5, 2) == pytest.approx(2 / 3)
    assert learnability_weight(2 / 3, 0.05) == pytest.approx(2 / 9 + 0.05)
    assert success_estimate(0, 6, 0.5, 2) == pytest.approx(1 / 8) and success_estimate(8, 8, 0.5, 2) == 0.9
    assert learnability_weight(0.5, 0.05) == pytest.approx(0.3)
    # draws follow the weights: a task of weight 0.3 is drawn 0.3 / 0.35 of the time against one of 0.05
    rng = random.Random(0)
    hits = sum(weighted_sample(["a", "b"], [0.3, 0.05], 1, rng) == ["a"] for _ in range(20_000))
    assert abs(hits / 20_000 - 0.3 / 0.35) < 0.01
    assert sorted(weighted_sample(list("abcd"), [1, 1, 0, 1], 3, rng)) == ["a", "b", "d"]  # weight 0: never


def test_learnability_tasks_stop_drawing_what_is_always_or_never_solved():
    """Tasks 0-3 are played 8 times: 0 and 1 always solved, 2 never, 3 half the time. Estimates (prior 0.5,
    weight 2): 9/10, 9/10, 1/10, 5/10; weights 0.14, 0.14, 0.14, 0.30 (sum 0.72). With no fresh tasks offered,
    task 3 is drawn 0.30 / 0.72 = 41.7 % of the time, each of the others 19.4 %."""
    source = LearnabilityTasks(SeedTasks("e", seed=0), seed=1)
    first = source.next(4)
    assert len({t.id for t in first}) == 4
    outcome = {first[0].id: [1] * 8, first[1].id: [1] * 8, first[2].id: [0] * 8, first[3].id: [1, 0] * 4}
    source.update([t for task in first for t in group(task.id, outcome[task.id])])
    source.fresh = 0
    counts = {t.id: 0 for t in first}
    for _ in range(20_000):
        counts[source.next(1)[0].id] += 1
    assert abs(counts[first[3].id] / 20_000 - 0.30 / 0.72) < 0.015
    assert all(abs(counts[first[k].id] / 20_000 - 0.14 / 0.72) < 0.015 for k in range(3))
    assert source.metrics()["tasks/p_high"] == source.metrics()["tasks/p_low"] * 2 == 0.5
    state = json.loads(json.dumps(source.state_dict()))
    again = LearnabilityTasks(SeedTasks("e", seed=0), seed=1)
    again.load_state_dict(state)
    again.cursor, again.fresh = source.cursor, 0
    assert [t.id for t in again.next(3)] == [t.id for t in source.next(3)]  # resume draws the same


def test_a_run_with_dynamic_sampling_and_learnability(tmp_path):
    """A real (tiny) run: the sampling metrics are logged every step, and a resumed run's task record continues."""
    cfg = load_config(overrides=["model.name=tiny", "env.size=3", "train.steps=2", "train.tasks_per_step=2",
                                 "algo.group_size=2", "train.warm_start_steps=0", "eval.episodes=2",
                                 "eval.at_start=false", "sampling.dynamic=true", "sampling.max_rounds=2",
                                 "sampling.tasks=learnability", f"train.out_dir={tmp_path}", "train.progress=false"])
    Trainer(cfg).train()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] > 0]
    assert len(steps) == 2 and all({"sampling/rounds", "tasks/records", "groups/zero_spread",
                                     "rollout/entropy"} <= set(r) for r in steps)
    assert all(1 <= r["sampling/rounds"] <= 2 for r in steps)
    state = json.loads((tmp_path / "checkpoints" / "step-2" / "state.json").read_text())
    assert len(state["tasks"]["records"]) == steps[-1]["tasks/records"]
