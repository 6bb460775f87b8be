"""The tool worlds through the real training path: registered by name, configured and validated like the
games, trained and evaluated by the same Trainer and CLI."""

import json

import pytest

from selfevolve import Trainer, load_config
from selfevolve.build import resolve_env
from selfevolve.config import describe
from selfevolve.envs import ENVS, make_env
from selfevolve.envs.tools import ShopEnv, TablesEnv
from selfevolve.errors import ConfigError

FAST = [
    "model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=6", "train.tasks_per_step=1",
    "algo.group_size=2", "eval.episodes=2", "train.progress=false", "train.eval_every=0",
    "train.warm_start_steps=1", "env.max_turns=2",
]


def test_worlds_are_registered_by_name():
    assert ENVS["shop"] is ShopEnv and ENVS["tables"] is TablesEnv
    env = make_env("tables", split="test", level=2)
    assert env.split == "test" and {t.level for t in env.tasks} == {2}


def test_world_options_are_validated_like_env_options():
    cfg = load_config(overrides=["env.name=shop", "env.split=test", "env.level=3", "env.db_seed=0"])
    assert cfg.env.options() == {"split": "test", "level": 3, "db_seed": 0}
    # checked against the class the run uses (build.resolve_env: before the model loads), not by load_config,
    # which cannot know whether Trainer(cfg, env=MyEnv) will bring a class of its own
    with pytest.raises(ConfigError, match=r"env\.db_seed.*'tables'.*data_seed"):
        resolve_env(load_config(overrides=["env.name=tables", "env.db_seed=1"]), None)
    with pytest.raises(ConfigError, match="split"):
        make_env("shop", split="dev")


def test_help_lists_the_world_options():
    text = describe()
    assert "env.<option> for shop: split=train, level=null" in text
    assert "env.<option> for tables:" in text and "data_seed=0" in text


@pytest.mark.parametrize("world", ["shop", "tables"])
def test_one_training_step_end_to_end(tmp_path, world):
    cfg = load_config(overrides=[*FAST, f"env.name={world}", "train.steps=1", f"train.out_dir={tmp_path}"])
    final = Trainer(cfg).train()
    assert 0.0 <= final["eval/success"] <= 1.0
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 2  # tasks_per_step x group_size
    step = json.loads(lines[0])["steps"][0]
    assert step["info"]["intent"] and step["info"]["task_id"].startswith(world)
    record = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()][-1]
    intents = {json.loads(line)["steps"][-1]["info"]["intent"] for line in lines}
    assert {k for k in record if k.startswith("success/intent/")} == {f"success/intent/{i}" for i in intents}
    assert any(k.startswith("eval/success/intent/") for k in record)


# ---- evaluation on the held-out split ------------------------------------------------------------------------
def test_eval_env_options_default_to_the_test_split_for_worlds_only():
    from selfevolve.envs import FrozenLakeEnv
    from selfevolve.train.evaluate import eval_env_options

    assert eval_env_options(ShopEnv, {"level": 2}, None) == {"level": 2, "split": "test"}
    assert eval_env_options(ShopEnv, {"split": "train"}, {}) == {"split": "train"}  # {}: exactly training's
    assert eval_env_options(TablesEnv, {"level": 1}, {"split": "all", "level": 2}) == {"split": "all", "level": 2}
    # FrozenLake has a split too (synthesized tasks); its test split is the ordinary game: seeds are its held-out tasks
    assert eval_env_options(FrozenLakeEnv, {"size": 3}, None) == {"size": 3, "split": "test"}


def test_eval_env_is_validated_like_env_options():
    cfg = load_config(overrides=["env.name=shop", "eval.env.split=all", "eval.env.level=1"])
    assert cfg.eval.env == {"split": "all", "level": 1}
    from selfevolve.build import resolve_env

    with pytest.raises(ConfigError, match=r"eval\.env\.sizee: not an option of env 'shop'; allowed: split, level"):
        resolve_env(load_config(overrides=["env.name=shop", "eval.env.sizee=1"]), None)
    assert load_config(overrides=["eval.env.size=5"]).eval.env == {"size": 5}  # frozenlake's own option


def test_trainer_evaluates_on_the_test_split_with_per_intent_success(tmp_path):
    from selfevolve.train.evaluate import eval_env_options, greedy_rollouts

    cfg = load_config(overrides=[*FAST, "env.name=tables", "train.steps=0", f"train.out_dir={tmp_path}",
                                 "eval.episodes=3"])
    trainer = Trainer(cfg)
    final = trainer.train()
    options = eval_env_options(TablesEnv, cfg.env.options(), cfg.eval.env)
    tasks, trajs = greedy_rollouts(trainer.policy, TablesEnv, options, trainer.builder, episodes=3,
                                   seed_offset=cfg.eval.seed_offset)
    test_env = TablesEnv(split="test")
    expected = [test_env.task_for(10**6 + i) for i in range(3)]  # seed -> task of the split
    assert [t.steps[0].info["task_id"] for t in trajs] == [t.id for t in expected]
    assert all(t.split == "test" for t in expected)
    keys = {k for k in final if k.startswith("eval/success/intent/")}
    assert keys == {f"eval/success/intent/{t.intent}" for t in expected}


# ---- per-intent metrics --------------------------------------------------------------------------------------
def test_rollout_metrics_per_intent():
    from selfevolve.train.metrics import rollout_metrics
    from selfevolve.types import Step, Task, Trajectory

    def traj(intent, success):
        info = {"intent": intent} if intent else {}
        return Trajectory(Task("t", "e", 0), [Step([1], [2], [0.0], info=info)], success=success)

    m = rollout_metrics([traj("refund", True), traj("refund", False), traj("count_rows", True), traj(None, True)])
    assert m["success/intent/refund"] == 0.5 and m["success/intent/count_rows"] == 1.0
    assert [k for k in m if "intent" in k] == ["success/intent/count_rows", "success/intent/refund"]
    assert m["success/rate"] == 0.75


def test_self_managed_context_through_the_trainer(tmp_path):
    """A random model's context calls are malformed: every one falls back to the sliding window, none
    crashes, and each is logged with its step."""
    cfg = load_config(overrides=[*FAST, "env.name=tables", "train.steps=1", f"train.out_dir={tmp_path}",
                                 "agent.context=self_managed", "agent.context_budget=64",
                                 "agent.context_window=1", "agent.context_call_tokens=4"])
    Trainer(cfg).train()
    steps = [s for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()
             for s in json.loads(line)["steps"]]
    calls = [c for s in steps[1:] for c in s["calls"]]
    assert calls and all(c["purpose"] == "context" and "prompt_ids" not in c for c in calls)
    assert all(c["fallback"] for c in calls if c["decision"] is None)
