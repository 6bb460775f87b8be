"""The tool worlds through the real training path: registered by name, configured and validated like the
games, trained and evaluated by the same Trainer and CLI."""

import json

import pytest

from selfevolve import Trainer, load_config
from selfevolve.config import describe
from selfevolve.envs import ENVS, make_env
from selfevolve.errors import ConfigError
from selfevolve.worlds import ShopEnv, TablesEnv

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
    with pytest.raises(ConfigError, match=r"env\.db_seed.*'tables'.*data_seed"):
        load_config(overrides=["env.name=tables", "env.db_seed=1"])
    with pytest.raises(ConfigError, match="split"):
        make_env("shop", split="dev")


def test_help_lists_the_world_options():
    text = describe()
    assert "env.<option> for shop: split='train', level=None" in text
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
