"""What the TextEnv protocol gives a world with an engine behind it (issue 42, item 0): options of the user's own
class, snapshots that fall back to replaying the moves, close() on every environment the trainer made (and
reuse across steps), and probes that start no game. Real trainer, tiny model, user-written environments."""

from __future__ import annotations

import ctypes
import random

import pytest
import torch

from selfevolve.config import load_config
from selfevolve.envs import FrozenLakeEnv, make_env
from selfevolve.envs.base import StepResult, TextEnv
from selfevolve.envs.pool import EnvPool
from selfevolve.envs.replay import Replay, restore_snapshot, take_snapshot
from selfevolve.errors import ConfigError
from selfevolve.rollout.search import SearchSpec, search_rollouts
from selfevolve.tasks.source import SeedTasks
from selfevolve.train.trainer import Trainer, build_policy, build_prompt
from selfevolve.train.warm_start import has_expert

FAST = ["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=4", "train.tasks_per_step=2",
        "algo.group_size=2", "eval.episodes=2", "train.progress=false", "train.eval_every=0"]


class Counter(TextEnv):
    """Count to ``level`` by answering numbers; keeps a ledger of every instance made, reset and closed."""

    name = "counter"
    instructions = "Say the next number."
    max_turns = 3
    made: list["Counter"] = []
    resets = 0

    def __init__(self, level: int = 1, max_turns: int = 3):
        self.level, self.max_turns = level, max_turns
        self.closed = 0
        self.n = 0
        Counter.made.append(self)

    def reset(self, seed):
        Counter.resets += 1
        self.n, self.start = 0, seed % 3
        return f"Count to {self.level}, from {self.start}."

    def content_key(self):
        return f"{self.level} from {self.start}"  # three contents: a held-out set finds its two in two resets

    def step(self, action):
        self.n += 1
        done = self.n >= self.level
        return StepResult(str(self.n), float(done), done, {"success": done, "valid_action": True})

    def expert_action(self):
        return str(self.n + 1)

    def close(self):
        self.closed += 1


@pytest.fixture
def ledger():
    Counter.made, Counter.resets = [], 0
    yield Counter
    Counter.made, Counter.resets = [], 0


def test_options_are_checked_against_the_class_used(tmp_path, ledger):
    """env.level is not an option of the default env (frozenlake) but of the user's class: it is accepted and
    reaches the class; an option the class does not have is refused with the class's name."""
    cfg = load_config(overrides=[*FAST, "env.level=2", "train.steps=1", f"train.out_dir={tmp_path / 'a'}"])
    Trainer(cfg, env=Counter).train()
    assert ledger.made and {env.level for env in ledger.made} == {2}
    bad = load_config(overrides=[*FAST, "env.size=2", f"train.out_dir={tmp_path / 'b'}"])
    with pytest.raises(ConfigError, match=r"env\.size: not an option of env 'counter'; allowed: name, level, max_turns"):
        Trainer(bad, env=Counter)
    assert not (tmp_path / "b").exists()


def test_the_trainer_reuses_and_closes_every_environment_and_probes_play_nothing(tmp_path, ledger):
    cfg = load_config(overrides=[*FAST, "train.steps=3", "eval.at_start=false", "train.warm_start_steps=1",
                                 "train.warm_start_tasks=2", f"train.out_dir={tmp_path}"])
    trainer = Trainer(cfg, env=Counter)
    assert ledger.resets == 0  # the prompt builder's probe, the option checks: nothing played
    assert has_expert(Counter, {}) and ledger.resets == 0
    trainer.train()
    # 3 probes (the prompt's, eval's options, the attribution oracle's) + 2 has_expert checks (the test's, the
    # trainer's) + 1 warm-start env for both its tasks + 4 pooled episode envs (2 tasks x 2) used by all 3 steps
    # + the final evaluation's probe of the held-out contents + its 2 envs; every one closed exactly once
    assert len(ledger.made) == 3 + 2 + 1 + 4 + 1 + 2
    assert [env.closed for env in ledger.made] == [1] * len(ledger.made)
    # warm start, 3 steps x 4 episodes, the held-out probe (seeds 1000000 and 1000001: contents 1 and 2), evaluation
    assert ledger.resets == 2 + 3 * 4 + 2 + 2


class EngineLake(FrozenLakeEnv):
    """FrozenLake holding a live engine handle: the default snapshot (a deep copy) cannot copy it."""

    snapshot = TextEnv.snapshot
    restore = TextEnv.restore

    def __init__(self, **options):
        super().__init__(**options)
        self.engine = ctypes.pointer(ctypes.c_int(7))


def test_a_snapshot_that_cannot_be_copied_is_replayed():
    env = make_env(EngineLake, max_turns=4)
    with pytest.raises(ValueError, match="ctypes objects containing pointers cannot be pickled"):
        env.snapshot()
    env.reset(3)
    moves = ["Down", "Right"]
    for m in moves:
        env.step(m)
    snap = take_snapshot(env, 3, moves)
    assert snap == Replay(3, ("Down", "Right"))
    key, text = env.state_key(), env.render()
    env.reset(5)
    restore_snapshot(env, snap)
    assert (env.state_key(), env.render()) == (key, text)


def test_beam_search_over_an_uncopyable_world_equals_the_copyable_one():
    """Greedy beam search on FrozenLake, once with its own snapshots and once through replays: the same kept
    trajectories, action for action and reward for reward."""
    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=6"])
    torch.manual_seed(0)
    policy = build_policy(cfg)
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = SeedTasks("frozenlake", seed=0).next(2)
    runs = []
    for cls in (FrozenLakeEnv, EngineLake):
        pool = EnvPool(cls, {"max_turns": 3})
        result = search_rollouts(policy, pool.maker(), tasks, builder, SearchSpec("beam", m=2, beams=2, keep="all"),
                                 max_turns=3, generator=torch.Generator().manual_seed(0), greedy=True,
                                 rng=random.Random(0))
        runs.append([[(s.action_text, s.reward, s.state_key) for s in t.steps] for t in result.trajectories])
        pool.close()
    assert runs[0] == runs[1] and any(runs[0])


def test_a_pool_hands_out_the_same_environments_and_fresh_ones_when_not_reusable(ledger):
    pool = EnvPool(Counter, {"level": 2})
    first = pool.take(3)
    assert pool.take(2) == first[:2] and len(ledger.made) == 3
    pool.close()
    assert [e.closed for e in first] == [1, 1, 1] and pool.envs == []

    class OneShot(Counter):
        reusable = False

    pool = EnvPool(OneShot, {})
    a = pool.take(2)
    b = pool.take(2)
    assert not set(map(id, a)) & set(map(id, b)) and [e.closed for e in a] == [1, 1]
