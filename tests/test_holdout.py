"""Held out means never seen: the test split's content (map, room, request) is never a training task's."""

from __future__ import annotations

import json

import pytest

from selfevolve import Trainer, load_config
from selfevolve.envs import FrozenLakeEnv, ShopEnv, SokobanEnv, TablesEnv, make_env
from selfevolve.envs.holdout import HOLDOUT, bucket, digest, redraw_seed
from selfevolve.errors import ConfigError
from selfevolve.tasks.source import SeedTasks, eval_tasks
from selfevolve.train.evaluate import evaluate, seen_apart
from selfevolve.types import Task, Trajectory


def contents(env, seeds) -> list[str]:
    out = []
    for s in seeds:
        env.reset(s)
        out.append(env.content_key())
    return out


@pytest.mark.parametrize("env_cls, options", [
    (FrozenLakeEnv, {"size": 3}), (FrozenLakeEnv, {"size": 4}), (FrozenLakeEnv, {"size": 5}),
    (SokobanEnv, {}), (SokobanEnv, {"dim_room": [7, 7], "num_boxes": 2}),
])
def test_no_test_map_or_room_is_a_training_one(env_cls, options):
    """The training stream a run draws (warm start and RL: the first 1,000 positions of seed 0's stream, more
    than the default run's 240 tasks) never meets a held-out map or room, and the held-out set is
    distinct within itself."""
    seeds = [t.seed for t in SeedTasks(env_cls.name, seed=0).next(1000 if env_cls is FrozenLakeEnv else 300)]
    train = set(contents(env_cls(split="train", **options), seeds))
    held_out = eval_tasks(env_cls(split="test", **options), 64)
    keys = contents(env_cls(split="test", **options), [t.seed for t in held_out])
    assert not train & set(keys)
    assert len(set(keys)) == len(keys) == len(held_out) and [digest(k) for k in keys] == [t.content for t in held_out]
    assert all(bucket(k) == "test" for k in keys) and all(bucket(k) == "train" for k in train)


def test_a_3x3_lake_holds_out_what_it_has():
    """A 3×3 lake has few distinct maps: evaluation plays each held-out one once (15 of them), not 64 copies."""
    tasks = eval_tasks(FrozenLakeEnv(size=3, split="test"), 64)
    assert len(tasks) == 15 and len({t.content for t in tasks}) == 15


def test_the_old_overlap_is_gone():
    """Issue 37: with seeds alone, 31 of the 64 evaluation maps (seeds 10^6 + i) were maps the default run
    trained on. Under the content split the evaluation holds none of the first 1,000 training maps of seed 0's
    stream (the default run draws 240: 10 warm-start steps × 16 episodes, then 20 steps × 4 tasks)."""
    own = FrozenLakeEnv(split="train+test")
    old_eval = set(contents(own, range(1_000_000, 1_000_064)))
    old_train = set(contents(own, [t.seed for t in SeedTasks("frozenlake", seed=0).next(1000)]))
    assert len(old_eval & old_train) > 20  # the overlap the issue found (seeds alone)
    new_train = set(contents(FrozenLakeEnv(), [t.seed for t in SeedTasks("frozenlake", seed=0).next(1000)]))
    new_eval = set(contents(FrozenLakeEnv(split="test"), [t.seed for t in eval_tasks(FrozenLakeEnv(split="test"), 64)]))
    assert not new_eval & new_train and len(new_eval) == 64


def test_the_bucket_is_a_stable_hash_with_the_stated_share():
    assert bucket("SFFF/HHFF/FHHF/HFFG") == bucket("SFFF/FFFF/FFFF/FFFG") == "test"  # seed 0's map; the all-ice one
    share = sum(bucket(f"key-{i}") == "test" for i in range(20_000)) / 20_000
    assert abs(share - HOLDOUT) < 0.01
    assert redraw_seed(7, 0) == 7 and redraw_seed(7, 1) == redraw_seed(7, 1) != redraw_seed(7, 2)


def test_a_seed_keeps_its_map_when_it_is_of_the_split():
    """Redrawing only happens to seeds whose own map is of the other split: the others play what they always did."""
    own, train, test = FrozenLakeEnv(split="train+test"), FrozenLakeEnv(), FrozenLakeEnv(split="test")
    for s in range(200):
        own.reset(s)
        (train if bucket(own.content_key()) == "train" else test).reset(s)
        assert own.desc == (train.desc if bucket(own.content_key()) == "train" else test.desc)


def test_settings_with_one_map_cannot_hold_one_out():
    with pytest.raises(ConfigError, match="too few distinct maps or rooms.*split=train\\+test"):
        FrozenLakeEnv(p_frozen=1.0).reset(0)  # its one map is a held-out one
    FrozenLakeEnv(p_frozen=1.0, split="train+test").reset(0)  # the one map, no held-out set: allowed


@pytest.mark.parametrize("env_cls", [ShopEnv, TablesEnv])
def test_tool_worlds_test_requests_are_never_training_requests(env_cls):
    train = set(contents(env_cls(split="train"), range(len(env_cls(split="train").tasks))))
    n = len(env_cls(split="test").tasks)
    test = contents(env_cls(split="test"), range(n))
    assert n and not train & set(test)
    held_out = eval_tasks(env_cls(split="test"), 64)
    assert len(held_out) == min(64, n) and len({t.content for t in held_out}) == len(held_out)


def test_seen_and_unseen_are_reported_apart():
    """Hand-made: 4 evaluation episodes, 2 of whose contents were trained on; 1 of those and 1 other solved."""
    def traj(content, success):
        return Trajectory(task=Task(id=content, env="e", seed=0, content=content), success=success)

    trajs = [traj("a", True), traj("b", False), traj("c", True), traj("d", False)]
    assert seen_apart(trajs, {"a", "b"}) == {"eval/seen": 2, "eval/success/seen": 0.5, "eval/success/unseen": 0.5}
    assert seen_apart(trajs, {"x"}) == {"eval/seen": 0}


def test_a_run_records_what_it_trained_on_and_evaluation_scores_it_apart(tmp_path):
    """Evaluating on the training split (``eval.env``) meets contents the run trained on: they are counted
    seen, from the digests the trainer kept (and checkpointed); the test split meets none."""
    common = ["model.name=tiny", "env.size=3", "train.steps=1", "train.tasks_per_step=4", "algo.group_size=2",
              "train.warm_start_steps=1", "train.warm_start_tasks=16", "eval.at_start=false", "train.progress=false"]
    cfg = load_config(overrides=[*common, f"train.out_dir={tmp_path / 'a'}", "eval.episodes=64",
                                 'eval.env={"split": "train"}'])
    trainer = Trainer(cfg)
    result = trainer.train()
    state = json.loads((tmp_path / "a" / "checkpoints" / "step-1" / "state.json").read_text())
    assert set(state["seen"]) == trainer.seen and len(trainer.seen) >= 3
    assert result["eval/seen"] == len(trainer.seen & {t.content for t in
                                                        eval_tasks(make_env("frozenlake", size=3), 64)})
    assert result["eval/seen"] > 0 and "eval/success/seen" in result
    held_out = evaluate(trainer.policy, FrozenLakeEnv, {"size": 3, "split": "test"}, trainer.builder, episodes=15,
                        seen=trainer.seen)
    assert held_out["eval/seen"] == 0 and held_out["eval/tasks"] == 15
