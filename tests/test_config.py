"""Tests of the configuration tree: defaults -> YAML file -> dotted overrides, and its error messages.

Pure Python: no model is loaded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from selfevolve.config import Config, apply_override, describe, load_config, save_config
from selfevolve.errors import ConfigError, SelfEvolveError


def write(tmp_path, text: str, name: str = "cfg.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- defaults and layering -------------------------------------------------------------------------------------
def test_defaults():
    cfg = load_config()
    assert isinstance(cfg, Config)
    assert cfg.seed == 0
    assert cfg.model.name == "smollm2-135m" and cfg.model.dtype == "auto"
    assert cfg.model.lora.r == 16 and cfg.model.lora.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert cfg.env.name == "frozenlake" and cfg.env.options() == {}
    assert cfg.agent.history is None and cfg.agent.few_shot is True
    assert cfg.algo.name == "grpo" and cfg.algo.group_size == 8 and cfg.algo.lr == pytest.approx(2e-4)
    assert cfg.train.steps == 20 and cfg.train.out_dir == "runs/default"
    assert cfg.train.resume is False and cfg.train.overwrite is False
    assert cfg.eval.episodes == 64 and cfg.eval.seed_offset == 1_000_000
    # the recipe of issue 19: half the warm start's episodes, evaluations at the start and the end only
    assert cfg.train.warm_start_tasks == 16 and cfg.train.warm_start_minibatches == 4
    assert cfg.train.eval_every == 0 and cfg.eval.after_warm_start is False
    assert load_config(None, []) == cfg


def test_yaml_then_overrides(tmp_path):
    path = write(tmp_path, "seed: 3\ntrain:\n  steps: 7\n  save_every: 2\nalgo:\n  name: rloo\n")
    cfg = load_config(path)
    assert (cfg.seed, cfg.train.steps, cfg.train.save_every, cfg.algo.name) == (3, 7, 2, "rloo")
    assert cfg.train.eval_every == 0  # untouched default
    cfg = load_config(path, ["train.steps=9", "seed=5"])
    assert (cfg.seed, cfg.train.steps, cfg.train.save_every, cfg.algo.name) == (5, 9, 2, "rloo")
    # later overrides win over earlier ones
    assert load_config(path, ["train.steps=1", "train.steps=2"]).train.steps == 2


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"])
def test_empty_yaml_file_is_refused(tmp_path, text):
    """A file given on purpose that holds no setting is more likely a mistake than a wish for the defaults."""
    with pytest.raises(ConfigError, match="holds no settings .* leave the file out to use the defaults"):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize(
    "override, get, expected",
    [
        ("train.steps=12", lambda c: c.train.steps, 12),
        ("algo.lr=0.5", lambda c: c.algo.lr, 0.5),
        ("algo.lr=1e-5", lambda c: c.algo.lr, 1e-5),
        ("algo.lr=2.5e-4", lambda c: c.algo.lr, 2.5e-4),
        ("train.resume=true", lambda c: c.train.resume, True),
        ("agent.few_shot=false", lambda c: c.agent.few_shot, False),
        ("agent.think=True", lambda c: c.agent.think, True),
        ("agent.history=2", lambda c: c.agent.history, 2),
        ("algo.dual_clip=null", lambda c: c.algo.dual_clip, None),
        ("model.lora.target_modules=[q_proj,v_proj]", lambda c: c.model.lora.target_modules, ["q_proj", "v_proj"]),
        ("model.lora.target_modules=[o_proj]", lambda c: c.model.lora.target_modules, ["o_proj"]),
        ("train.out_dir=runs/x y", lambda c: c.train.out_dir, "runs/x y"),
        ("model.name=tiny", lambda c: c.model.name, "tiny"),
        ("seed=-1", lambda c: c.seed, -1),
        (" train.steps = 4", lambda c: c.train.steps, 4),
    ],
)
def test_override_parsing(override, get, expected):
    assert get(load_config(overrides=[override])) == expected


def test_override_value_keeps_equals_signs():
    data: dict = {}
    apply_override(data, "train.out_dir=a=b")
    assert data == {"train": {"out_dir": "a=b"}}


def test_env_options_reach_the_environment():
    cfg = load_config(overrides=["env.size=6", "env.slippery=true", "env.max_turns=12"])
    assert cfg.env.name == "frozenlake"
    assert cfg.env.options() == {"size": 6, "slippery": True, "max_turns": 12}
    cfg = load_config(overrides=["env.name=sokoban", "env.dim_room=[7,7]", "env.num_boxes=2"])
    assert cfg.env.options() == {"dim_room": [7, 7], "num_boxes": 2}


def test_env_options_from_yaml(tmp_path):
    cfg = load_config(write(tmp_path, "env:\n  name: frozenlake\n  size: 5\n"), ["env.p_frozen=0.9"])
    assert cfg.env.options() == {"size": 5, "p_frozen": 0.9}


def test_env_option_float_in_exponent_notation():
    assert load_config(overrides=["env.invalid_penalty=1e-2"]).env.options() == {"invalid_penalty": 0.01}


def test_numeric_looking_string_values():
    assert load_config(overrides=["train.out_dir=2024"]).train.out_dir == "2024"


# ---- errors ----------------------------------------------------------------------------------------------------
def config_error(*overrides: str, path=None) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(path, list(overrides))
    msg = str(e.value)
    assert "\n" not in msg.strip(), msg
    return msg


def test_error_classes():
    assert issubclass(ConfigError, SelfEvolveError)


def test_unknown_top_level_key():
    msg = config_error("foo=1")
    assert "'foo'" in msg
    for key in ("seed", "model", "env", "agent", "algo", "train", "eval"):
        assert key in msg


def test_unknown_nested_key():
    msg = config_error("train.stepz=3")
    assert "train.stepz" in msg
    assert "steps" in msg and "save_every" in msg and "out_dir" in msg


def test_unknown_deeply_nested_key():
    msg = config_error("model.lora.rank=3")
    assert "model.lora.rank" in msg and "alpha" in msg


def test_wrong_value_type():
    msg = config_error("train.steps=abc")
    assert "train.steps" in msg and "integer" in msg and "abc" in msg


def test_value_out_of_range():
    msg = config_error("algo.group_size=0")
    assert "algo.group_size" in msg and "1" in msg


def test_invalid_literal():
    msg = config_error("algo.name=foo")
    assert "algo.name" in msg and "grpo" in msg and "rloo" in msg and "foo" in msg
    msg = config_error("model.dtype=int8")
    assert "model.dtype" in msg and "bf16" in msg and "fp32" in msg


def env_error(*overrides: str, env=None) -> str:
    """The one-line error of the environment options of a config: checked against the class that is used
    (``resolve_env``, the trainer's first step), since ``Trainer(cfg, env=MyEnv)`` may bring its own."""
    from selfevolve.build import resolve_env

    cfg = load_config(overrides=list(overrides))  # load_config cannot know the class yet: it accepts them
    with pytest.raises(ConfigError) as e:
        resolve_env(cfg, env)
    msg = str(e.value)
    assert "\n" not in msg.strip(), msg
    return msg


def test_unknown_env_option():
    msg = env_error("env.sizee=3")
    assert "env.sizee" in msg and "frozenlake" in msg
    assert "size" in msg.split("allowed")[1] and "slippery" in msg


def test_unknown_env_option_for_sokoban():
    msg = env_error("env.name=sokoban", "env.size=3")
    assert "env.size" in msg and "sokoban" in msg and "dim_room" in msg


def test_unknown_env_name_passes_config_but_is_rejected_by_the_trainer():
    """``env.name`` may name a TextEnv class passed in Python, so load_config accepts it; the trainer and
    ``make_env`` reject an unknown *name* with the allowed names and the suites' forms."""
    msg = env_error("env.name=chess")
    assert msg == ("unknown env 'chess'; allowed: frozenlake, shop, sokoban, tables, or a suite's game: "
                   "textarena:<EnvId>, twx:<game>, rg:<dataset>")


def test_override_without_equals():
    msg = config_error("train.steps")
    assert "train.steps" in msg and "key=value" in msg


def test_override_into_a_value():
    msg = config_error("seed=1", "seed.x=1")
    assert "seed" in msg and "not a section" in msg
    msg = config_error("seed.x=1")
    assert "seed" in msg and "integer" in msg


def test_section_given_a_scalar():
    msg = config_error("train=3")
    assert "train" in msg


def test_missing_yaml_file(tmp_path):
    msg = config_error(path=tmp_path / "nope.yaml")
    assert "config file not found" in msg and "nope.yaml" in msg


def test_yaml_path_is_a_directory(tmp_path):
    assert "config file not found" in config_error(path=tmp_path)


def test_malformed_yaml(tmp_path):
    msg = config_error(path=write(tmp_path, "train: [1,\n  steps: 3\n"))
    assert "malformed YAML" in msg and "cfg.yaml" in msg and "line" in msg


def test_yaml_that_is_a_list(tmp_path):
    msg = config_error(path=write(tmp_path, "- a\n- b\n"))
    assert "mapping" in msg and "cfg.yaml" in msg


def test_yaml_that_is_a_scalar(tmp_path):
    assert "mapping" in config_error(path=write(tmp_path, "hello\n"))


def test_unknown_key_in_yaml(tmp_path):
    msg = config_error(path=write(tmp_path, "train:\n  stepz: 3\n"))
    assert "train.stepz" in msg and "steps" in msg


def test_validate_assignment():
    cfg = load_config()
    with pytest.raises(Exception):
        cfg.train.steps = "abc"


# ---- save / describe -------------------------------------------------------------------------------------------
def test_save_config_round_trip(tmp_path):
    cfg = load_config(overrides=[
        "seed=7", "model.name=tiny", "env.size=6", "agent.history=3", "algo.name=rloo", "algo.lr=0.001",
        "model.lora.target_modules=[q_proj]", "train.steps=3", "eval.pass_k=2",
    ])
    path = tmp_path / "saved.yaml"
    save_config(cfg, path)
    assert isinstance(yaml.safe_load(path.read_text()), dict)
    again = load_config(path)
    assert again == cfg
    assert again.env.options() == {"size": 6}
    assert again.model_dump() == cfg.model_dump()


def test_saved_config_lists_every_section(tmp_path):
    save_config(load_config(), tmp_path / "c.yaml")
    data = yaml.safe_load((tmp_path / "c.yaml").read_text())
    assert list(data) == ["seed", "model", "env", "agent", "algo", "reward", "attribution", "filter", "sampling",
                          "rollout", "search", "experience", "questioning", "evolve", "llm_api", "train", "eval",
                          "distributed"]


def test_describe_lists_every_leaf_key():
    text = describe()
    for key in ("seed", "model.name", "model.lora.r", "env.name", "env.<option>", "agent.history",
                "algo.name", "algo.lr", "train.steps", "train.out_dir", "train.resume", "train.overwrite",
                "eval.episodes", "eval.pass_k"):
        assert f"  {key} " in text, key
    assert "Training steps" in text  # descriptions are shown


# ---- docs/configuration.md stays in step with the code ----------------------------------------------------------
DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_docs_list_every_key():
    text = DOC.read_text()
    keys = [line.split()[0] for line in describe().splitlines()]
    missing = [k for k in keys if f"`{k}`" not in text]
    assert not missing, f"docs/configuration.md lacks {missing}"
    from selfevolve.envs import ENVS, env_options

    for name, cls in ENVS.items():
        for option in env_options(cls):
            assert f"`env.{option}`" in text, (name, option)


def test_docs_yaml_examples_load(tmp_path):
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks
    for i, block in enumerate(blocks):
        load_config(write(tmp_path, block, f"ex{i}.yaml"))


def test_resume_differences_name_the_field_and_take_a_missing_one_at_its_default():
    from selfevolve.train.run_folder import resume_differences

    now = Config().model_dump(mode="json")
    saved = json.loads(json.dumps(now))
    del saved["algo"]["lr"]  # a field added to the library after the run was saved: it ran with the default
    del saved["search"]  # likewise a whole section
    assert resume_differences(saved, now, ("algo", "search", "seed")) == []
    changed = Config(algo={"lr": 0.5}, seed=3).model_dump(mode="json")
    assert resume_differences(saved, changed, ("algo", "search", "seed")) == ["algo.lr", "seed"]
    saved["experience"] = None  # an empty section in a hand-written config.yaml: its defaults
    assert resume_differences(saved, now, ("experience",)) == []


def test_a_refused_resume_gives_the_overrides_that_resume_it_as_it_ran():
    from selfevolve.train.run_folder import as_it_ran

    saved = Config(algo={"lr": 0.5}, seed=3, train={"progress": False}).model_dump(mode="json")
    del saved["algo"]["epochs"]  # not named by the run: its default
    assert as_it_ran(saved, ["algo.lr", "seed", "algo.epochs", "train.progress", "model.init_from"]) == \
        "algo.lr=0.5 seed=3 algo.epochs=1 train.progress=false model.init_from=null"
    assert as_it_ran(saved, ["env"]) == ""  # a whole section has no one override
    assert as_it_ran(saved, ["env.no_such_option"]) == ""  # e.g. another environment's option: the run had none
    saved["algo"]["critic_prompt"] = "Say it!"  # a string a shell would split is quoted; one YAML reads as
    saved["model"]["name"] = "1.0"  # another type is written as JSON, so that the override gives it back
    back = as_it_ran(saved, ["algo.critic_prompt", "model.name"])
    assert back == "'algo.critic_prompt=Say it!' 'model.name=\"1.0\"'"
    from selfevolve.config import _parse_value

    assert _parse_value('"1.0"') == "1.0"
