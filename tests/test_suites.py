"""The suites' adapters (issue 42, items 1 and 4): TextArena, TextWorldExpress and reasoning-gym as TextEnv
environments, offline, on small settings. Reset and step of each, the project's reward/success/invalid meaning
beside the suite's own reward, content-disjoint splits, the experts solving their instances, refusals with the
reason, and one training step on the tiny model per suite."""

from __future__ import annotations

import math
import os
import pickle
import random
import subprocess
import sys

import pytest

from selfevolve.config import load_config
from selfevolve.envs import env_class, make_env
from selfevolve.envs.replay import Replay
from selfevolve.envs.suites import Unavailable
from selfevolve.errors import ConfigError
from selfevolve.tasks.source import eval_tasks
from selfevolve.train.trainer import Trainer
from conftest import cli_env

COIN = {"numLocations": 3, "includeDoors": 0, "numDistractorItems": 0}  # small rooms: episodes of a few moves
FAST = ["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=4", "train.tasks_per_step=1",
        "algo.group_size=2", "eval.episodes=2", "train.progress=false", "train.eval_every=0"]


def play_expert(env, seed: int) -> list:
    """The expert's episode from ``seed``: the list of step results (the expert stops when it has no move)."""
    env.reset(seed)
    results = []
    for _ in range(env.max_turns):
        action = env.expert_action()
        if action is None:
            break
        results.append(env.step(action))
        if results[-1].done:
            break
    return results


def contents(env, seeds) -> set[str]:
    out = set()
    for s in seeds:
        env.reset(s)
        out.add(env.content_key())
    return out


# ---------------------------------------------------------------------------------------------------- TextArena
def test_textarena_hanoi_expert_invalid_moves_and_single_instance():
    cls = env_class("textarena:TowerOfHanoi-v0")
    assert cls is env_class("textarena:TowerOfHanoi-v0") and pickle.loads(pickle.dumps(cls)) is cls
    env = make_env(cls, split="all")
    results = play_expert(env, 0)
    assert len(results) == 7  # 2^3 - 1 moves: the optimal solution of 3 disks
    assert [r.reward for r in results] == [0.0] * 6 + [1.0]
    assert results[-1].done and results[-1].info == {"success": True, "valid_action": True, "suite_reward": 1.0}
    # TextArena's rule: the first invalid move is forgiven with a message, the second in a row ends the game
    env.reset(1)
    first = env.step("[C A]")  # tower C is empty
    assert (first.reward, first.done, first.info["valid_action"]) == (-0.1, False, False)
    assert "invalid move" in first.observation
    second = env.step("move it")
    assert second.done and second.info == {"success": False, "valid_action": False, "suite_reward": 0.0}
    assert second.reward == -0.1  # success 0, minus the penalty
    # one start position for every seed, whose content key lies on the training side: no held-out test split
    assert make_env(cls, split="train").reset(5) == make_env(cls, split="all").reset(0)
    with pytest.raises(ConfigError, match="every seed starts the same game, so it has no held-out test split"):
        make_env(cls, split="test").reset(0)


def test_textarena_frozenlake_splits_are_content_disjoint_and_the_expert_solves_test_maps():
    cls = env_class("textarena:FrozenLake-v0")
    train, test = contents(make_env(cls, split="train"), range(40)), contents(make_env(cls, split="test"), range(40))
    assert len(train) > 20 and len(test) > 5 and not train & test
    env = make_env(cls, split="test")
    for seed in range(5):
        results = play_expert(env, seed)
        assert results[-1].info["success"] and results[-1].reward == 1.0


def test_textarena_guess_the_number_expert_searches_by_the_hints_and_its_examples_follow_the_config():
    """Binary search on 1..100 wins within ceil(log2(101)) = 7 guesses on every held-out number; the hints
    narrow the range by hand: 50 "lower", 25 "higher" leave 26..49, whose middle is 37."""
    from selfevolve.envs.suites.textarena_experts import guess_range

    assert guess_range(1, 100, [(50, "lower"), (25, "higher")]) == (26, 49)
    contradictory = [(50, "lower"), (49, "lower"), (48, "higher")]
    assert guess_range(1, 100, contradictory) == (49, 48)  # an empty range: the expert has no move
    cls = env_class("textarena:GuessTheNumber-v0")
    wide = {"max_number": 100}
    train, test = (contents(make_env(cls, split=s, config=wide), range(300)) for s in ("train", "test"))
    assert len(test) >= 10 and len(train) > 60 and not train & test
    env = make_env(cls, split="test", config=wide)
    for task in eval_tasks(make_env(cls, split="test", config=wide), len(test)):  # every held-out number
        results = play_expert(env, task.seed)
        assert results[-1].info["success"] and len(results) <= 7
    # the few-shot examples are played under the environment's own settings: a first guess of 50 on 1..100
    assert [a for _, a in make_env(cls, config=wide).examples] == ["[50]", "[25]"]
    assert [a for _, a in cls.examples][0] == "[10]"  # 1..20, the registered range
    assert "between 1 and 100" in make_env(cls, config=wide).examples[0][0]


def test_textarena_suite_reward_is_kept_beside_the_project_reward():
    """A fall into the hole below the start: TextArena's shaped reward is the share of the way to the goal,
    distance 1 of 6 on a 4x4 grid (1/6); the project's reward is 0 (no success), or 1/6 with reward=suite."""
    plain = make_env(env_class("textarena:FrozenLake-v0"), split="train")
    suite = make_env(env_class("textarena:FrozenLake-v0"), split="train", reward="suite")
    seed = next(s for s in range(500) if plain.reset(s) and plain._game.state.game_state["grid"][1][0] == "H")
    a, b = plain.step("[down]"), (suite.reset(seed), suite.step("[down]"))[1]
    assert a.done and not a.info["success"] and a.reward == 0.0
    assert math.isclose(a.info["suite_reward"], 1 / 6) and math.isclose(b.reward, 1 / 6)


def test_textarena_games_keep_their_own_random_state():
    """2048 draws new tiles from Python's global random at every move: each episode has its own random state,
    so two games played side by side give what each gives alone, and the caller's random is untouched."""
    cls = env_class("textarena:2048-v0-ultra-easy")
    moves = ["[up]", "[left]", "[down]", "[right]"] * 2

    def alone(seed):
        env = make_env(cls, split="all")
        env.reset(seed)
        return [env.step(m).observation for m in moves]

    random.seed(123)
    outer = random.getstate()
    a, b = make_env(cls, split="all"), make_env(cls, split="all")
    a.reset(1)
    b.reset(2)
    side_by_side = [(a.step(m).observation, b.step(m).observation) for m in moves]
    assert random.getstate() == outer
    assert [x for x, _ in side_by_side] == alone(1) and [y for _, y in side_by_side] == alone(2)
    # a snapshot carries the random state: the same moves after a restore draw the same tiles
    a.reset(1)
    a.step("[up]")
    snap = a.snapshot()
    after = [a.step(m).observation for m in moves]
    a.restore(snap)
    assert [a.step(m).observation for m in moves] == after


def test_textarena_content_keys_hold_no_addresses():
    """RushHour keeps its cars as objects with __slots__: two games of one seed have one content key (an
    object's repr would hold its address, and the split of a seed would change from run to run)."""
    cls = env_class("textarena:RushHour-v0")
    a, b = make_env(cls, split="all"), make_env(cls, split="all")
    a.reset(3)
    b.reset(3)
    assert a.content_key() == b.content_key() and " at 0x" not in a.content_key()
    assert '"__class__": "_Vehicle"' in a.content_key()


def test_textarena_refuses_games_that_cannot_run_here_by_name():
    with pytest.raises(Unavailable, match=r"'textarena:TicTacToe-v0' is not a single-player game"):
        env_class("textarena:TicTacToe-v0")
    with pytest.raises(ConfigError, match=r"unknown TextArena env id 'FrozenLake-v9' \(did you mean FrozenLake-v0"):
        env_class("textarena:FrozenLake-v9")


# ---------------------------------------------------------------------------------------------------- TWX
def test_twx_coin_gold_path_invalid_actions_and_one_shared_jvm():
    from selfevolve.envs.suites.twx import _JVM

    cls = env_class("twx:coin")
    assert pickle.loads(pickle.dumps(cls)) is cls
    env, other = make_env(cls, split="test", config=COIN), make_env(cls, split="test", config=COIN)
    assert _JVM.shared is None  # constructing starts nothing
    for seed in range(3):
        results = play_expert(env, seed)
        assert results[-1].done and results[-1].info == {"success": True, "valid_action": True, "suite_reward": 1.0}
        assert [r.reward for r in results] == [0.0] * (len(results) - 1) + [1.0]
    other.reset(0)
    assert _JVM.shared.users == 2 and env._jvm is other._jvm  # two games, one Java process
    first = env.reset(7)
    assert first.startswith("Your task is to search the environment and find the coin.") and "Valid actions:" in first
    key = env.state_key()
    bad = env.step("fly to the moon")
    assert (bad.reward, bad.done, bad.info["valid_action"]) == (-0.1, False, False)
    assert bad.observation.startswith("Invalid action 'fly to the moon'") and env.state_key() == key
    # snapshots replay the moves (a Java game cannot be copied)
    env.step("look around")
    snap = env.snapshot()
    assert snap == Replay(7, ("look around",))
    mid = env.state_key()
    env.step(env.valid_actions()[0])
    env.restore(snap)
    assert env.state_key() == mid
    env.close()
    other.close()
    assert _JVM.shared is None and not _JVM.live  # the last close stops the JVM


def test_twx_sorting_games_of_one_seed_played_side_by_side_each_solve():
    """A group: two sorting games of one seed, reset one after the other and played in turns. In one JVM the
    second generation takes the first game's objects ("take 8g of brass" turned invalid); each sorting game has
    a JVM of its own."""
    from selfevolve.envs.suites.twx import _JVM

    cls = env_class("twx:sorting")
    a, b = make_env(cls, split="test"), make_env(cls, split="test")
    try:
        a.reset(0)
        b.reset(0)
        assert a._jvm is not b._jvm and a.render() == b.render()
        for move in list(a._gold):
            ra, rb = a.step(move), b.step(move)
            assert ra.info["valid_action"] and rb.info["valid_action"]
        assert ra.info["success"] and rb.info["success"]
    finally:
        a.close()
        b.close()
    assert not _JVM.live


def test_twx_splits_are_content_disjoint_within_the_suites_folds():
    cls = env_class("twx:coin")
    train_env, test_env = make_env(cls, split="train", config=COIN), make_env(cls, split="test", config=COIN)
    try:
        train, test = contents(train_env, range(30)), contents(test_env, range(30))
        assert len(train) > 10 and len(test) > 5 and not train & test
        assert set(train_env.fold_seeds("train")) == set(range(1000))  # the suite's own train fold
    finally:
        train_env.close()
        test_env.close()
    bad = make_env(cls, config={"numLocations": 99})
    with pytest.raises(ConfigError, match=r"twx:coin: TextWorldExpress refused env.config .*less than or equal to 11"):
        bad.reset(0)


# ---------------------------------------------------------------------------------------------------- reasoning-gym
def test_rg_maze_answers_retries_and_splits():
    cls = env_class("rg:maze")
    assert pickle.loads(pickle.dumps(cls)) is cls
    train, test = contents(make_env(cls, split="train"), range(40)), contents(make_env(cls, split="test"), range(40))
    assert len(train) == 40 and len(test) == 40 and not train & test  # every question differs, no shared one
    from selfevolve.train.evaluate import eval_env_options

    assert eval_env_options(cls, {"retries": 1}, None) == {"retries": 1, "split": "test"}  # evaluation: held out
    env = make_env(cls, split="test", retries=1)
    assert env.max_turns == 2 and "may answer again" in env.instructions
    question = env.reset(3)
    gold = env.expert_action()
    assert question == env.content_key() and gold.isdigit()
    wrong = env.step(str(int(gold) + 1))
    assert (wrong.reward, wrong.done, wrong.info) == (0.0, False, {"success": False, "valid_action": True,
                                                                   "suite_reward": 0.0})
    assert wrong.observation == "Wrong: your answer scored 0 of 1. Try again (1 try left)."
    right = env.step(gold)
    assert (right.reward, right.done, right.info["success"], right.observation) == (1.0, True, True, "Correct.")
    env.reset(4)
    empty = env.step("   ")
    assert (empty.reward, empty.done, empty.info["valid_action"]) == (-0.1, False, False)
    with pytest.raises(ConfigError, match=r"rg:maze: bad env.config"):
        make_env(cls, config={"max_grid_sizee": 6})


def test_a_seed_whose_generation_fails_is_redrawn_not_a_crash():
    """reasoning-gym 0.1.25's maze raises for training seed 261 ("Could not find suitable path cell"): that draw
    is skipped like content on the other side, so a training run that reaches the seed goes on."""
    from selfevolve.envs.holdout import redraw_seed
    from selfevolve.envs.suites.reasoning_gym import SIZE

    env = make_env(env_class("rg:maze"), split="train", retries=2)
    with pytest.raises(RuntimeError, match="Could not find suitable path cell"):  # the item itself fails
        env._items()[redraw_seed(261, 1) % SIZE]
    question = env.reset(261)
    assert "minimum number of steps" in question and env.step(env.expert_action()).info["success"]


def test_draw_content_skips_failed_generations_and_stops_on_a_broken_game():
    from selfevolve.envs.holdout import bucket, redraw_seed
    from selfevolve.envs.suites.common import FAILED_DRAWS, draw_content
    from selfevolve.errors import SelfEvolveError

    fails = {redraw_seed(7, 0), redraw_seed(7, 1)}  # the seed's first two generations raise

    def make(s):
        if s in fails:
            raise RuntimeError(f"generator failed on {s}")
        return f"content-{s}"

    for split in ("train", "test"):
        got = draw_content("g", split, 7, make, lambda c: c)
        k = next(k for k in range(2, 1000) if bucket(f"content-{redraw_seed(7, k)}") == split)
        assert got == f"content-{redraw_seed(7, k)}"  # the first later draw on the split's side
    assert draw_content("g", "all", 7, make, lambda c: c) == f"content-{redraw_seed(7, 2)}"

    calls = []

    def broken(s):
        calls.append(s)
        raise RuntimeError("engine gone")

    with pytest.raises(SelfEvolveError, match=rf"g: generation failed {FAILED_DRAWS} times for seed 7 \(the suite "
                                              r"or its adapter; last: RuntimeError: engine gone\)"):
        draw_content("g", "train", 7, broken, lambda c: c)
    assert len(calls) == FAILED_DRAWS

    def refused(s):
        raise ConfigError("g: TextWorldExpress refused env.config")

    with pytest.raises(ConfigError, match="refused"):  # the project's own errors are not retried
        draw_content("g", "train", 7, refused, lambda c: c)

    flaky = {redraw_seed(7, k) for k in (1, 2, 3)}

    def one_game(s):  # a single instance with failed generations among its draws: still found to be one
        if s in flaky:
            raise RuntimeError("flaky")
        return "the only game"

    with pytest.raises(ConfigError, match="every seed starts the same game"):
        draw_content("g", "train" if bucket("the only game") == "test" else "test", 7, one_game, lambda c: c)


def test_rg_reference_answers_that_the_scorer_refuses_are_no_expert():
    """graph_color accepts every proper colouring and keeps a placeholder as its reference answer: no expert,
    no few-shot example, and the game still plays (a wrong colouring scores 0)."""
    cls = env_class("rg:graph_color")
    env = make_env(cls, split="test")
    env.reset(2)
    assert not env.has_expert() and env.expert_action() is None and cls.examples == []
    result = env.step("not a colouring")
    assert result.done and result.info == {"success": False, "valid_action": True, "suite_reward": 0.0}


# ---------------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("name, hide, needle", [
    ("rg:maze", "sys.modules['reasoning_gym'] = None", "needs the package reasoning-gym"),
    ("textarena:FrozenLake-v0", "sys.modules['textarena'] = None", "needs the package textarena"),
    ("twx:coin", "os.environ['PATH'] = '/nonexistent'", "needs Java, which is not on this machine"),
])
def test_a_suite_that_cannot_run_is_refused_by_name_with_the_reason(name, hide, needle, tmp_path):
    """The CLI on a machine without the package (hidden from import) or without Java (not on PATH): exit 2,
    one line naming the environment and what to install, nothing written."""
    code = (f"import os, sys; {hide}; from selfevolve.cli import main; "
            f"sys.argv = ['selfevolve', 'train', 'model.name=tiny', 'env.name={name}', "
            f"'train.out_dir={tmp_path / 'run'}']; main()")
    proc = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(__file__)))
    err = " ".join(proc.stderr.split())
    assert proc.returncode == 2, proc.stderr
    assert err.startswith("error: ") and name in err and needle in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------------------------------- training
@pytest.mark.parametrize("name, options", [
    ("textarena:FrozenLake-v0", ["env.max_turns=3"]),
    ("twx:coin", ["env.max_turns=2"] + [f"env.config.{k}={v}" for k, v in COIN.items()]),
    ("rg:maze", ["env.retries=1", "env.config.max_grid_size=6"]),
    ("textarena:GuessTheNumber-v0", ["env.max_turns=3", "env.config.max_number=100"]),
])
def test_one_training_step_per_suite_with_the_experts_warm_start(name, options, tmp_path):
    from selfevolve.envs.suites.twx import _JVM

    cfg = load_config(overrides=[*FAST, f"env.name={name}", *options, "train.steps=1", "train.warm_start_steps=1",
                                 "train.warm_start_tasks=2", f"train.out_dir={tmp_path}"])
    final = Trainer(cfg).train()
    assert math.isfinite(final["loss/policy"]) and 0.0 <= final["eval/success"] <= 1.0
    metrics = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert '"warm/loss_bc_first"' in metrics[0]
    assert (tmp_path / "checkpoints").is_dir()
    assert not _JVM.live  # every environment the trainer made was closed, and with them the JVM
