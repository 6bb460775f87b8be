"""The sampler interface (``models/sampler.py``): rollouts, search and collection run on any implementation.

The Hugging Face policy is one; a scripted sampler without a model (``tests/scripted_sampler.py``) is another,
and drives the real rollout, search and collection code here on the real FrozenLake: what the engine does with
the sampler's replies, states and streams is checked against numbers derived by hand.
"""

import math
import random

import pytest

from selfevolve.agent.prompt import PromptBuilder
from selfevolve.config import load_config
from selfevolve.envs import FrozenLakeEnv, make_env
from selfevolve.envs.games.frozenlake import MOVES
from selfevolve.models.sampler import Sampler, SamplerState
from selfevolve.rollout.collect import play_episodes, step_episodes
from selfevolve.rollout.runner import RolloutStats, rollout
from selfevolve.rollout.search import SearchSpec, search_rollouts
from selfevolve.tasks.source import make_task
from selfevolve.train.trainer import build_policy, build_prompt

from scripted_sampler import ScriptedSampler


@pytest.fixture(scope="module")
def policy():
    return build_policy(load_config(overrides=["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=4"]))


def scripted(policy, reply, value=None) -> tuple[ScriptedSampler, PromptBuilder]:
    builder = build_prompt(load_config(), policy, FrozenLakeEnv(size=3))
    return ScriptedSampler(policy.tokenizer, builder.eot_id(), reply, value), builder


def expert_moves(seed: int) -> list[str]:
    env = make_env(FrozenLakeEnv, size=3)
    env.reset(seed)
    moves = []
    while (move := env.expert_action()) is not None:
        moves.append(move)
        env.step(move)
    return moves


def test_the_policy_and_the_scripted_sampler_are_samplers(policy):
    sampler, _ = scripted(policy, lambda text, rng: "Left")
    assert isinstance(policy, Sampler) and isinstance(sampler, Sampler)
    gen = policy.generate([[1, 2, 3]], greedy=True)
    assert isinstance(gen.state, SamplerState)  # the key/value caches, behind the protocol
    assert policy.encode("Left") == policy.tokenizer.encode("Left", add_special_tokens=False)


@pytest.mark.parametrize("reuse_cache", [True, False])
def test_a_rollout_plays_the_samplers_replies_token_in_token_out(policy, reuse_cache):
    seed = 3
    moves = expert_moves(seed)
    assert len(moves) >= 2
    script = iter(moves)
    sampler, builder = scripted(policy, lambda text, rng: next(script))
    stats = RolloutStats()
    [traj] = rollout(sampler, [make_env(FrozenLakeEnv, size=3)], [make_task("frozenlake", seed)], builder,
                     max_turns=10, stats=stats, reuse_cache=reuse_cache)
    eot = builder.eot_id()
    assert traj.success and [s.action_text for s in traj.steps] == moves
    # 1 at the goal, plus the shaping progress_reward·(φ(goal) − φ(start)) = 1·(1 − 0): no bump on a shortest path
    assert traj.reward == pytest.approx(2.0)
    for k, step in enumerate(traj.steps):
        assert sampler.calls[k] == [step.prompt_ids]  # the prompt the sampler got is the one recorded
        assert step.action_ids == policy.tokenizer.encode(moves[k], add_special_tokens=False) + [eot]
        assert step.logprobs == [math.log(0.5)] * len(step.action_ids) and step.top2 == [0.25] * len(step.action_ids)
    for a, b in zip(traj.steps, traj.steps[1:]):  # full history: each prompt extends the last one and its reply
        assert b.prompt_ids[: len(a.prompt_ids) + len(a.action_ids)] == a.prompt_ids + a.action_ids
    # with the state handed back, a turn encodes only what its row does not hold yet
    prompts = [s.prompt_ids for s in traj.steps]
    fresh = sum(len(p) for p in prompts)
    handed = len(prompts[0]) + sum(len(b) - len(a) for a, b in zip(prompts, prompts[1:]))
    assert stats.prompt_tokens == (handed if reuse_cache else fresh)
    assert stats.new_tokens == sum(len(s.action_ids) for s in traj.steps) and stats.generate_calls == len(moves)


def test_an_episode_samples_from_its_own_stream_whatever_its_batch(policy):
    sampler, builder = scripted(policy, lambda text, rng: rng.choice(MOVES))
    episodes = step_episodes([make_task("frozenlake", 5), make_task("frozenlake", 8)], group_size=2, step=4)
    together = play_episodes(sampler, builder, FrozenLakeEnv, {"size": 3}, episodes, run_seed=0, step=4, version=4)
    alone = play_episodes(sampler, builder, FrozenLakeEnv, {"size": 3}, episodes[3:], run_seed=0, step=4, version=4)
    assert [s.action_text for s in alone[0].steps] == [s.action_text for s in together[3].steps]
    # and the stream is the episode's: other seeds of the run give other moves (two groups, four episodes)
    assert len({tuple(s.action_text for s in t.steps) for t in together}) > 1


def test_beam_search_keeps_the_best_child_and_copies_the_parents_state(policy):
    seed = 3
    sampler, builder = scripted(policy, lambda text, rng: rng.choice(MOVES))
    spec = SearchSpec("beam", m=4, beams=1, scorer="progress")
    result = search_rollouts(sampler, lambda: make_env(FrozenLakeEnv, size=3), [make_task("frozenlake", seed)],
                             builder, spec, max_turns=1, generator=sampler.stream(7), rng=random.Random(0))
    [kept] = result.trajectories
    children = [n for n in result.trees[0]["nodes"] if n["parent"] is not None]
    assert len(children) == 4

    def progress(move: str) -> float:  # the score by hand: the world's progress after the move
        env = make_env(FrozenLakeEnv, size=3)
        env.reset(seed)
        env.step(move)
        return env.progress()

    assert [c["score"] for c in children] == [round(progress(c["action"]), 5) for c in children]
    assert kept.search["score"] == max(c["score"] for c in children)
    # the four candidates share their parent's prompt: read once (prefill), its state copied to each
    assert sampler.calls[-1] == [kept.steps[0].prompt_ids] * 4 and sampler.states[-1] == [("gather", [0, 0, 0, 0])]


def test_search_reads_values_after_the_suffix(policy):
    seen = []

    def value(text: str) -> float:
        seen.append(text)
        return 0.5

    sampler, builder = scripted(policy, lambda text, rng: rng.choice(MOVES), value)
    suffix = policy.tokenizer.encode(" Critic?", add_special_tokens=False)
    spec = SearchSpec("beam", m=2, beams=2, scorer="value")
    result = search_rollouts(sampler, lambda: make_env(FrozenLakeEnv, size=3), [make_task("frozenlake", 3)],
                             builder, spec, max_turns=2, generator=sampler.stream(1), critic_suffix=suffix)
    assert seen and all(t.endswith(" Critic?") for t in seen)
    live = [n for n in result.trees[0]["nodes"] if n["parent"] is not None and not n["done"]]
    assert all(n["value"] == 0.5 for n in live)  # a live node's value is the sampler's
