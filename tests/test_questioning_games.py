"""Self-questioning in FrozenLake on real parts: the env, its maps, the tiny policy, the trainer."""

import json

import pytest

from selfevolve import Trainer, load_config
from selfevolve.envs import FrozenLakeEnv, SokobanEnv, make_env
from selfevolve.envs.games.frozenlake import FROZENLAKE_PROFILE, MOVES, target_task
from selfevolve.envs.holdout import bucket
from selfevolve.envs.profile import EnvProfile
from selfevolve.envs.task_files import save_tasks
from selfevolve.errors import ConfigError, SelfEvolveError
from selfevolve.questioning import grid_tasks
from selfevolve.questioning.explore import ExplorationRecord
from selfevolve.questioning.games import (BREADTH_HINT, DEPTH_HINT, FROZENLAKE_GAME, GameExploration, execute,
                                          named_target, reached, template_tasks)
from selfevolve.questioning.grid_tasks import EXAMPLE_QUERY, WRITER_EXAMPLE
from selfevolve.questioning.pipeline import run_questioning
from selfevolve.questioning.synthesize import parse_tasks
from selfevolve.train.evaluate import eval_env_options

TINY = ["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=8"]
SEED0 = ["SFFF", "HHFF", "FHHF", "HFFG"]  # seed 0's own lake (gymnasium's generator, size 4, p 0.8)
# The mechanics below were derived by hand on seeds' own maps: they play split="train+test" (every seed its own
# map). Under the default split="train", seed 0's map belongs to the held-out bucket and redraws (envs/holdout.py).
OWN = {"split": "train+test"}
HAND = ["SFFF", "FHFH", "FFFH", "HFFG"]  # a hand-built lake


def candidate(query, moves):
    return {"query": query, "confidence": 1.0, "action_sequence": [{"name": m, "arguments": {}} for m in moves]}


def test_profile():
    p = FrozenLakeEnv.profile
    assert p is FROZENLAKE_PROFILE and p.intents == ("reach_cell", "reach_goal")
    assert [o.name for o in p.operations] == list(MOVES)
    assert {e.name for e in p.entities} == {"cell", "player"} and ("row", "column", "kind") in [e.attributes for e in p.entities]
    assert any("hole" in r for r in p.rules) and "reach cell (r, c)" in p.extra["task_preference"]
    assert EnvProfile.from_dict(json.loads(p.to_json())) == p


def test_a_target_task_is_solved_only_on_its_target(tmp_path):
    task = target_task("t0", 5, HAND, (0, 2), ["Right", "Right"], "Walk to row 1, column 3.")
    env = FrozenLakeEnv(**OWN)
    first = env.play(task)
    assert first.startswith("Request: Walk to row 1, column 3.\nP _ T _")
    assert env.expert_action() == "Right"
    assert not env.step("Right").done  # passing by is not enough
    obs, reward, done, info = env.step("Right")
    assert done and info["success"] and reward > 1 and obs.startswith("_ _ √ _") and info["task_id"] == "t0"

    env.play(task)  # ending elsewhere: not solved; a hole: over, not solved
    assert not env.step("Down").info["success"]
    obs, reward, done, info = env.step("Right")
    assert done and not info["success"] and "X" in obs

    far = target_task("t1", 5, HAND, (2, 2), ["Down", "Down", "Right", "Right"], "Walk to row 3, column 3.")
    env.play(far)  # reaching G when G is not the target: the game ends there, unsolved, no reward for it
    env.step("Down"), env.step("Down"), env.step("Right"), env.step("Down")
    assert env.position == (3, 1)
    obs, reward, done, info = env.step("Right")
    assert not done
    obs, reward, done, info = env.step("Right")
    assert env.position == (3, 3) and done and not info["success"] and env.progress() == 0.0

    goal = target_task("t2", 5, HAND, (3, 3), [], "Reach the goal G.")
    assert goal.intent == "reach_goal" and goal.level == 2 and task.intent == "reach_cell"

    env.play(task)  # snapshots carry the task
    env.step("Right")
    snap = env.snapshot()
    other = FrozenLakeEnv(**OWN)
    other.reset(3)
    other.restore(snap)
    assert other.render() == env.render() and other.step("Right").info["success"]
    other.restore(FrozenLakeEnv(**OWN).snapshot())
    assert other.target is None


def test_split_and_tasks_file_choose_the_episodes(tmp_path):
    path = tmp_path / "tasks.jsonl"
    save_tasks([target_task("frozenlake-synth-0000", 0, SEED0, (0, 2), ["Right", "Right"], "Go to row 1, column 3.")],
               str(path))
    game = FrozenLakeEnv(split="test").reset(1)
    synth = make_env("frozenlake", split="synth", tasks_file=str(path))
    assert synth.reset(1).startswith("Request: Go to row 1, column 3.") and "T" in synth.reset(7)
    assert "synth" not in FrozenLakeEnv().instructions and "marked T" in synth.instructions
    mixed = make_env("frozenlake", split="train+synth", tasks_file=str(path))
    assert mixed.reset(1).startswith("Request:") and mixed.reset(2) == FrozenLakeEnv().reset(2)
    test = make_env("frozenlake", split="test", tasks_file=str(path))
    assert test.reset(1) == game and test.task is None
    with pytest.raises(ConfigError, match="tasks_file"):
        make_env("frozenlake", split="synth")
    with pytest.raises(ConfigError, match="train\\+synth"):
        make_env("frozenlake", split="dev")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text().replace('"Right"', '"North"'))
    with pytest.raises(ConfigError, match="not a FrozenLake target task"):
        make_env("frozenlake", split="synth", tasks_file=str(bad))
    # evaluation: the ordinary game on held-out seeds, whatever training played
    options = eval_env_options(FrozenLakeEnv, {"split": "synth", "tasks_file": str(path)}, None)
    held_out = make_env("frozenlake", **options)
    assert options["split"] == "test" and held_out.reset(1_000_000) == FrozenLakeEnv(split="test").reset(1_000_000)
    assert bucket(held_out.content_key()) == "test"


def test_exploration_breadth_then_depth_and_a_fall_ends_it():
    world = FrozenLakeEnv(**OWN)
    env = GameExploration(world, breadth_steps=2, max_turns=8)
    first = env.reset(0)
    assert world.desc == SEED0 and first.endswith(BREADTH_HINT.format(moves="Left, Down, Right, Up"))
    assert env.step("Right").observation.endswith(BREADTH_HINT.format(moves="Left, Down, Right, Up"))  # a new cell
    assert env.step("Left").observation.endswith(DEPTH_HINT)  # 2 turns: depth from now on
    for a in ("fly", "Right", "Right", "Down"):
        assert not env.step(a).done
    obs, _, done, _ = env.step("Down")  # into the hole at row 3, column 3
    assert done and "X" in obs
    assert [t["valid"] for t in env.log] == [True, True, False, True, True, True, True]
    assert env.log[-1]["cell"] == "H" and "fell in" in env.log[-1]["result"]
    record = ExplorationRecord(0, env.log)
    assert record.text().startswith("1. Right\n   Result: row 1, column 2: ice")
    # breadth at one cell: the moves not tried from it
    env = GameExploration(FrozenLakeEnv(**OWN), breadth_steps=4, max_turns=8)
    env.reset(0)
    assert env.step("Up").observation.endswith(BREADTH_HINT.format(moves="Left, Down, Right"))


def test_template_writer_on_a_hand_made_exploration():
    env = GameExploration(FrozenLakeEnv(**OWN), breadth_steps=2, max_turns=8)
    env.reset(0)
    for a in ("Right", "Left", "Right", "Up", "Right", "Down", "Down"):  # loops, a bump, then the hole
        env.step(a)
    record = ExplorationRecord(0, env.log)
    assert reached(record) == [((0, 1), ["Right"]), ((0, 2), ["Right", "Right"]), ((1, 2), ["Right", "Right", "Down"])]
    tasks = template_tasks(record, SEED0)
    assert tasks[2] == candidate("Walk from your start to row 2, column 3 without falling into a hole.",
                                 ["Right", "Right", "Down"])
    kept, counts = grid_tasks.check(FROZENLAKE_GAME, FrozenLakeEnv(**OWN), FrozenLakeEnv, [(0, t) for t in tasks],
                              duplicate=0.8, seed_offset=1000, name="frozenlake")
    assert len(kept) == 3 and sum(counts.values()) == 0
    assert kept[2].goal == {"seed": 0, "map": SEED0, "target": [1, 2]} and kept[2].solution == ["Right", "Right", "Down"]


def test_execution_filter_replays_the_reference_on_a_fresh_lake():
    world = FrozenLakeEnv(**OWN)
    ok = execute(world, 0, ["Right", "Right", "Down"], (1, 2))
    assert ok.ok and ok.goal["target"] == [1, 2]
    assert "hole" in execute(world, 0, ["Right", "Right", "Down", "Down"], (2, 2)).reason
    assert "hole" in execute(world, 0, ["Down"], (1, 0)).reason
    assert "not on the named cell" in execute(world, 0, ["Right"], (0, 2)).reason
    assert "names no target" in execute(world, 0, ["Right"], None).reason
    assert "not one of" in execute(world, 0, ["North"], (0, 1)).reason
    assert "max_turns" in execute(world, 0, ["Right", "Left"] * 5, (0, 0)).reason
    assert named_target("Go to row 2, column 3 please", SEED0) == (1, 2) == named_target("Reach (2, 3).", SEED0)
    assert named_target("Reach the goal.", SEED0) == (3, 3) and named_target("Explore.", SEED0) is None
    assert named_target("row 9, column 1", SEED0) is None

    cands = [(0, candidate("Walk to row 2, column 3.", ["Right", "Right", "Down"])),
             (0, candidate("Please walk to row 2, column 3.", ["Right", "Down", "Right"])),  # same map, same cell
             (1, candidate("Walk to row 2, column 3.", [])),  # empty
             (1_000_000, candidate("Walk to row 1, column 2.", ["Right"])),  # an eval seed
             (0, candidate("Walk to row 3, column 3.", ["Right", "Right", "Down", "Down"])),  # a hole
             (0, candidate(EXAMPLE_QUERY, ["East", "South"]))]  # the worked example copied
    kept, counts = grid_tasks.check(FROZENLAKE_GAME, FrozenLakeEnv(**OWN), FrozenLakeEnv, cands, duplicate=0.8,
                              seed_offset=1_000_000, name="frozenlake")
    assert [k.goal["target"] for k in kept] == [[1, 2]]
    assert counts == {"unparseable": 0, "duplicate": 2, "empty_reference": 1, "held_out": 1, "execution": 1,
                      "unverifiable": 0}


def test_writer_prompt_and_parsing():
    messages = grid_tasks.writer_messages(FROZENLAKE_GAME, FROZENLAKE_PROFILE, "P _\n_ G",
                                    "1. Right\n   Result: row 1, column 2: ice", [], 2, 5, "start: row 1, column 1")
    assert "at most 5 moves" in messages[-1]["content"]
    assert "FrozenLake" not in json.dumps(WRITER_EXAMPLE) and "Right" not in json.dumps(WRITER_EXAMPLE)
    assert "Left, Down, Right, Up" in messages[-1]["content"] and "P _\n_ G" in messages[-1]["content"]
    found = parse_tasks('[{"query": "Go to row 1, column 2", "confidence": 0.7, "action_sequence": ["Right"]}]',
                        bare_steps=True)
    assert found == [{"query": "Go to row 1, column 2", "confidence": 0.7,
                      "action_sequence": [{"name": "Right", "arguments": {}}]}]


@pytest.mark.parametrize("writer", ["llm", "template"])
def test_explore_frozenlake_end_to_end(tmp_path, writer, monkeypatch):
    out = tmp_path / "q"
    cfg = load_config(overrides=[*TINY, "env.name=frozenlake", "questioning.explorations=2", "questioning.steps=3",
                                 "questioning.max_new_tokens=16", f"questioning.writer={writer}",
                                 f"questioning.out={out}"])
    report = run_questioning(cfg)
    assert report["env"] == "frozenlake" and report["explorations"] == 2 and report["writer"] == writer
    lines = [json.loads(x) for x in (out / "explorations.jsonl").read_text().splitlines()]
    assert [x["seed"] for x in lines] == [0, 1] and all(1 <= len(x["turns"]) <= 3 for x in lines)
    assert json.loads((out / "report.json").read_text()) == report
    assert set(report["removed"]) == {"unparseable", "duplicate", "empty_reference", "held_out", "execution",
                                      "unverifiable"}
    assert len((out / "tasks.jsonl").read_text().splitlines()) == report["kept"]
    monkeypatch.setattr(SokobanEnv, "profile", None)  # a world without a profile (every built-in one has one)
    with pytest.raises(SelfEvolveError, match="profile"):
        run_questioning(load_config(overrides=[*TINY, "env.name=sokoban", f"questioning.out={out}"]))


def test_training_on_synthesized_frozenlake_tasks(tmp_path):
    path = tmp_path / "tasks.jsonl"
    walk = candidate("Walk to row 2, column 3.", ["Right", "Right", "Down"])
    kept, _ = grid_tasks.check(FROZENLAKE_GAME, FrozenLakeEnv(**OWN), FrozenLakeEnv, [(0, walk)], duplicate=0.8,
                         seed_offset=1_000_000, name="frozenlake")
    save_tasks(kept, str(path))
    out = tmp_path / "run"
    final = Trainer(load_config(overrides=[
        *TINY, "env.name=frozenlake", f"env.tasks_file={path}", "env.split=synth", "train.steps=1",
        "train.tasks_per_step=1", "algo.group_size=2", "eval.episodes=2", "train.progress=false",
        "train.warm_start_steps=0", "env.max_turns=2", f"train.out_dir={out}"])).train()
    first = json.loads((out / "trajectories.jsonl").read_text().splitlines()[0])
    assert first["steps"][0]["info"]["task_id"] == "frozenlake-synth-0000"
    assert 0.0 <= final["eval/success"] <= 1.0


def test_explore_starts_from_a_trained_adapter(tmp_path):
    """``model.init_from`` reaches exploration (it was read only by the trainer): an untrained 135M explorer made
    3 valid moves in 124 on FrozenLake, a behaviour-cloned one is the explorer worth having."""
    import torch

    from selfevolve.build import build_policy
    from selfevolve.train.checkpoint import load_init_adapter
    from selfevolve.train.checkpoint import find_checkpoint, load_checkpoint

    run = tmp_path / "run"
    Trainer(load_config(overrides=[
        *TINY, "env.name=frozenlake", "train.steps=0", "train.warm_start_steps=1", "train.tasks_per_step=1",
        "algo.group_size=2", "eval.episodes=1", "eval.at_start=false", "train.progress=false", "env.max_turns=2",
        f"train.out_dir={run}"])).train()
    cfg = load_config(overrides=[*TINY, "env.name=frozenlake", f"model.init_from={run}"])
    policy = build_policy(cfg)
    assert load_init_adapter(cfg, policy)
    saved = load_checkpoint(find_checkpoint(run), with_optimizer=False)["adapter"]
    mine = policy.adapter_state()
    assert saved.keys() == mine.keys() and all(torch.equal(saved[k], mine[k]) for k in saved)
    with pytest.raises(SelfEvolveError, match="no such run"):
        run_questioning(load_config(overrides=[*TINY, "env.name=frozenlake", f"model.init_from={tmp_path / 'none'}",
                                               f"questioning.out={tmp_path / 'q'}"]))
