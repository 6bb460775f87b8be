"""Per-episode sampling seeds (rollout/seeding.py): an episode samples the same tokens whatever batch it is in,
which is what lets Ray workers reproduce the local path (tests/test_ray.py)."""

from __future__ import annotations

import torch

from selfevolve.build import build_policy, build_prompt
from selfevolve.config import load_config
from selfevolve.envs import ENVS, make_env
from selfevolve.models.generation import _sample
from selfevolve.rollout.collect import play_episodes, step_episodes
from selfevolve.rollout.seeding import episode_seed
from selfevolve.tasks.source import SeedTasks


def test_the_exponential_race_samples_the_distribution():
    p = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    gens = [torch.Generator().manual_seed(i) for i in range(4)]
    counts = torch.zeros(5)
    for _ in range(2500):
        counts += torch.bincount(_sample(p.log().expand(4, 5), gens), minlength=5)
    freq = counts / counts.sum()
    assert counts[4] == 0  # a token of probability 0 is never drawn
    assert torch.allclose(freq, p, atol=0.015), freq


def test_rows_that_stopped_draw_nothing():
    logp = torch.log_softmax(torch.randn(2, 50), -1)
    a = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    b = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    _sample(logp, a, alive=torch.tensor([True, False]))
    _sample(logp, b, alive=torch.tensor([True, True]))
    assert torch.equal(a[1].get_state(), torch.Generator().manual_seed(2).get_state())
    assert not torch.equal(b[1].get_state(), a[1].get_state())


def test_seeds_are_stable_and_distinct():
    assert episode_seed(0, 3, 5, "t") == episode_seed(0, 3, 5, "t")
    assert len({episode_seed(s, st, i, "t") for s in range(3) for st in range(3) for i in range(3)}) == 27


def test_an_episode_samples_the_same_in_any_batch():
    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32"])
    policy = build_policy(cfg)
    env_cls = ENVS["frozenlake"]
    builder = build_prompt(cfg, policy, make_env(env_cls))
    episodes = step_episodes(SeedTasks("frozenlake").next(3), 2, step=4)
    play = lambda eps: play_episodes(policy, builder, env_cls, {"max_turns": 2}, eps, run_seed=0, step=4,  # noqa: E731
                                     version=4)
    whole = play(episodes)
    parts = play(episodes[:2]) + play(episodes[2:])
    assert [[s.action_ids for s in t.steps] for t in whole] == [[s.action_ids for s in t.steps] for t in parts]
    assert {t.policy_version for t in whole} == {4}
    other_step = play_episodes(policy, builder, env_cls, {"max_turns": 2}, episodes[:2], run_seed=0, step=5,
                               version=5)
    assert [s.action_ids for s in other_step[0].steps] != [s.action_ids for s in whole[0].steps]
