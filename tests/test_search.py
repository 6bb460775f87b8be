"""Trajectory-search rollouts (selfevolve/rollout/search/): snapshots, scorers, beam and lookahead choices,
exact key/value-cache reuse across candidates and turns, and training with every strategy (tiny model, fp32)."""

from __future__ import annotations

import random

import pytest
import torch

from selfevolve.config import load_config
from selfevolve.envs import ENVS, FrozenLakeEnv, make_env
from selfevolve.envs.base import StepResult, TextEnv
from selfevolve.errors import ConfigError
from selfevolve.objectives.samples import build_rows, collate
from selfevolve.rollout.search import Node, SearchSpec, node_scores, score, search_rollouts
from selfevolve.tasks.source import SeedTasks
from selfevolve.train.trainer import Trainer, build_policy, build_prompt
from selfevolve.types import Task


@pytest.fixture(scope="module")
def policy():
    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=6"])
    torch.manual_seed(0)
    return build_policy(cfg)


def _cfg(*extra):
    return load_config(overrides=["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=6", *extra])


class Length(TextEnv):
    """Each turn pays the reply's length in characters ÷ 10 (a scorer with a clear preference among
    random replies); three turns."""

    name = "length"
    instructions = "Say something."
    max_turns = 3

    def reset(self, seed):
        self.t = 0
        return "go"

    def step(self, action):
        self.t += 1
        done = self.t >= 3
        return StepResult(f"turn {self.t}", len(action) / 10, done, {"success": False, "valid_action": True})

    def state_key(self):
        return str(self.t)


# ---- 1. snapshots --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ENVS))
def test_restore_then_step_equals_stepping_the_original(name):
    """Every registered environment: snapshot mid-episode, go on, restore, replay the same actions: the same
    observations, rewards and state keys; and a fresh environment restored from the snapshot does the same."""
    env = make_env(name)
    env.reset(3)
    rnd = random.Random(0)
    moves = ["Left", "Right", "Up", "Down", "nonsense"]

    def action():
        expert = env.expert_action()
        return expert if expert is not None and rnd.random() < 0.7 else rnd.choice(moves)

    env.step(action())
    snap = env.snapshot()
    actions = [action() for _ in range(3)]
    first = [tuple(env.step(a))[:3] + (env.state_key(),) for a in actions]
    env.restore(snap)
    again = [tuple(env.step(a))[:3] + (env.state_key(),) for a in actions]
    fresh = make_env(name)
    fresh.reset(99)
    fresh.restore(snap)
    third = [tuple(fresh.step(a))[:3] + (fresh.state_key(),) for a in actions]
    assert first == again == third


def test_frozenlake_progress_is_zero_in_a_hole():
    env = FrozenLakeEnv(hints=False)
    env.load(["SFFF", "HFHF", "FFFH", "HFFG"])
    assert env.progress() == 0.0
    env.step("Down")  # (1,0) is a hole
    assert env.progress() == 0.0 and env.done


# ---- 2. scorers ----------------------------------------------------------------------------------------------
def _node(rewards, done=False, failed=False, success=False, progress=0.5, value=0.0):
    from selfevolve.types import Step

    steps = [Step([], [], [], reward=r) for r in rewards]
    return Node(0, None, 0, None, None, steps, done=done, failed=failed, success=success, progress=progress,
                value=value)


def test_scores_by_hand():
    """reward = Σr; progress = the heuristic, 1 on success, 0 on a failed end; value = Σr + V (V = 0 at the end);
    weighted = w·(each)."""
    n = _node([0.5, -0.1], progress=0.25, value=0.4)
    assert node_scores(n) == pytest.approx({"reward": 0.4, "progress": 0.25, "value": 0.8})
    assert node_scores(_node([1.0], done=True, success=True, value=0.7)) == pytest.approx(
        {"reward": 1.0, "progress": 1.0, "value": 1.0})
    assert node_scores(_node([-0.1], done=True, failed=True, progress=0.9))["progress"] == 0.0
    spec = SearchSpec(scorer="weighted", w_reward=2.0, w_progress=0.5, w_value=1.0)
    assert score(n, spec) == pytest.approx(2 * 0.4 + 0.5 * 0.25 + 0.8)


# ---- 3. beam and lookahead choose what the scorer prefers -----------------------------------------------------
def _children_by_turn(tree):
    by = {}
    for n in tree["nodes"]:
        if n["parent"] is not None:
            by.setdefault(n["turn"], []).append(n)
    return by


def test_beam_keeps_the_children_the_scorer_prefers(policy):
    """B = 1, M = 4 on Length: after every turn the kept node is the best-scored of the four children, so the
    kept trajectory's reward beats every sibling branch; with B = 2 the two best are kept."""
    builder = build_prompt(_cfg(), policy, Length())
    tasks = [Task("a", "length", 0), Task("b", "length", 1)]
    for beams in (1, 2):
        spec = SearchSpec("beam", m=4, beams=beams, keep="all")
        res = search_rollouts(policy, Length, tasks, builder, spec, max_turns=3,
                              generator=torch.Generator().manual_seed(0))
        assert len(res.trajectories) == 2 * beams
        for tree in res.trees:
            nodes = {n["id"]: n for n in tree["nodes"]}
            for turn, kids in _children_by_turn(tree).items():
                kept = sorted((n["score"] for n in kids if turn in n.get("beam_turns", [])), reverse=True)
                best = sorted((n["score"] for n in kids), reverse=True)[:beams]
                assert kept == best
                for n in kids:  # the score is the branch's summed reward (rewards are len/10)
                    path, cur = 0.0, n
                    while cur["parent"] is not None:
                        path, cur = path + cur["reward"], nodes[cur["parent"]]
                    assert n["score"] == pytest.approx(path, abs=1e-4)
        for t in res.trajectories:
            assert t.search["score"] == pytest.approx(t.reward, abs=1e-4)
            assert len(t.steps) == 3
            assert t.query == Length().reset(t.task.seed)  # the request, as the judge needs it


def test_lookahead_commits_to_the_best_continuation(policy):
    """Lookahead scores each candidate by the state reached D turns later: the candidate kept at turn 1 is the
    one whose continuation scored best, even when its own reward is lower."""
    builder = build_prompt(_cfg(), policy, Length())
    spec = SearchSpec("lookahead", m=4, beams=1, depth=2)
    res = search_rollouts(policy, Length, [Task("a", "length", 0)], builder, spec, max_turns=3,
                          generator=torch.Generator().manual_seed(1))
    kids = _children_by_turn(res.trees[0])[1]
    assert len(kids) == 4 and all(n["lookahead"]["turns"] == 2 for n in kids)
    for n in kids:  # reward scorer: the child's reward plus its continuation's
        assert n["score"] == pytest.approx(n["lookahead"]["reward"], abs=1e-4)
        assert n["lookahead"]["reward"] > n["reward"] - 1e-6
    kept = [n for n in kids if 1 in n.get("beam_turns", [])]
    assert len(kept) == 1 and kept[0]["score"] == max(n["score"] for n in kids)
    assert res.metrics()["search/compute_multiple"] > 1.5  # continuations cost generation too


def test_progress_scorer_avoids_the_hole(policy):
    """FrozenLake, map with a hole right below the start: with the progress scorer no kept first move is Down
    into the hole (score 0) while any candidate kept the player alive."""
    cfg = _cfg()
    builder = build_prompt(cfg, policy, FrozenLakeEnv())

    class Holey(FrozenLakeEnv):
        def reset(self, seed):
            return self.load(["SFFF", "HFHF", "FFFH", "HFFG"])

    spec = SearchSpec("beam", m=4, beams=1, scorer="progress")
    res = search_rollouts(policy, lambda: Holey(hints=False), [Task("h", "frozenlake", 0)], builder, spec,
                          max_turns=1, generator=torch.Generator().manual_seed(0))
    kids = _children_by_turn(res.trees[0])[1]
    kept = [n for n in kids if 1 in n.get("beam_turns", [])][0]
    assert kept["score"] == max(n["score"] for n in kids)
    if any(not (n["done"] and not n["success"]) for n in kids):
        assert not (kept["done"] and not kept["success"])


# ---- 4. shared prefixes: reuse is exact ----------------------------------------------------------------------
@pytest.mark.parametrize("name,greedy", [("beam", True), ("lookahead", True), ("beam", False)])
def test_cache_reuse_gives_the_same_tokens_and_logprobs(policy, name, greedy):
    """Beam/lookahead with every candidate continuing from its parent's cache produce the same tokens and
    log-probs as re-encoding every prompt in full, and encode far fewer prompt tokens."""
    cfg = _cfg()
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tasks = SeedTasks("frozenlake", seed=0).next(2)
    runs = []
    for reuse in (True, False):
        spec = SearchSpec(name, m=3, beams=2, depth=1, keep="all", reuse_cache=reuse, share_prefix=reuse)
        runs.append(search_rollouts(policy, lambda: make_env(FrozenLakeEnv, max_turns=3), tasks, builder, spec,
                                    max_turns=3, generator=torch.Generator().manual_seed(0), greedy=greedy,
                                    rng=random.Random(0)))
    a, b = runs
    assert [t.task.id for t in a.trajectories] == [t.task.id for t in b.trajectories]
    flipped = False
    for ta, tb in zip(a.trajectories, b.trajectories):
        for sa, sb in zip(ta.steps, tb.steps):
            assert sa.prompt_ids == sb.prompt_ids
            n = next((i for i, (x, y) in enumerate(zip(sa.action_ids, sb.action_ids)) if x != y), None)
            if n is not None and not greedy:
                # One generator samples by inverting the CDF (models/generation.py, _sample): float noise of the
                # two encodings can move a draw that lies on a boundary to the neighbouring token (~1 token in
                # 100 on the tiny model's flat distribution, depending on the CPU's kernels). Up to that token
                # the two runs agree; after it, the replies (and the shared stream) go their own ways.
                assert abs(sa.action_ids[n] - sb.action_ids[n]) == 1
                assert max([abs(x - y) for x, y in zip(sa.logprobs[:n], sb.logprobs[:n])], default=0) < 1e-4
                flipped = True
                break
            assert sa.action_ids == sb.action_ids
            assert max(abs(x - y) for x, y in zip(sa.logprobs, sb.logprobs)) < 1e-4
        if flipped:
            break
        assert len(ta.steps) == len(tb.steps)
    if not flipped:
        assert a.stats.new_tokens == b.stats.new_tokens
    assert a.stats.prompt_tokens * 3 < b.stats.prompt_tokens


def test_values_read_over_the_cache_match_a_full_forward(policy):
    """read_values over a parent's cache = the value head on a separate forward of prompt + critic prompt, and
    generation continues from the cropped cache exactly as from scratch."""
    policy.attach_value_head()
    try:
        torch.nn.init.normal_(policy.value_head.net.weight, std=0.5)
        suffix = [11, 12, 13, 14]
        prompts = [list(range(20, 60)), list(range(20, 45)) + [7, 8]]
        g = policy.generate(prompts, greedy=True)
        state = g.state.gather([0, 0, 1])
        nxt = [prompts[0] + g.ids[0] + [3], prompts[0] + g.ids[0] + [3, 4, 5], prompts[1] + g.ids[1] + [9]]
        values, st, _ = policy.state_values(nxt, suffix, state)
        body, _ = policy.body_and_head()
        with torch.no_grad():
            ids = [torch.tensor([p + suffix], device=policy.device) for p in nxt]
            ref = [float(policy.value_head(body(input_ids=x).last_hidden_state[0, -1])) for x in ids]
        assert max(abs(x - y) for x, y in zip(values, ref)) < 1e-4
        cont = policy.generate(nxt, greedy=True, state=st)
        plain = policy.generate(nxt, greedy=True, share_prefix=False)
        assert cont.ids == plain.ids
        assert max(abs(x - y) for u, v in zip(cont.logprobs, plain.logprobs) for x, y in zip(u, v)) < 1e-4
        assert cont.prompt_tokens == 3  # only each prompt's last token: the rest was in the cache
    finally:
        policy.value_head = None


# ---- 5. training data and training --------------------------------------------------------------------------
def test_kept_steps_carry_their_sampling_logprobs(policy):
    """The old log-probs on kept trajectories are those of the policy that sampled them (recomputed by the
    training forward), so any PPO-style ratio starts at 1."""
    builder = build_prompt(_cfg(), policy, make_env(FrozenLakeEnv))
    tasks = SeedTasks("frozenlake", seed=0).next(2)
    res = search_rollouts(policy, lambda: make_env(FrozenLakeEnv, max_turns=3), tasks, builder,
                          SearchSpec("lookahead", m=2, beams=2, depth=1, keep="all"), max_turns=3,
                          generator=torch.Generator().manual_seed(0))
    rows = build_rows(res.trajectories, [0.0] * len(res.trajectories))
    b = collate(rows, policy.pad_id, policy.device)
    with torch.no_grad():
        logp, _ = policy.action_logprobs(b["input_ids"], b["attention_mask"], b["loss_mask"])
    assert (logp - b["old_logprobs"]).abs().max() < 1e-4


@pytest.mark.parametrize("strategy,extra", [
    ("best_of_n", ["search.n=2"]),
    ("beam", ["search.m=2", "search.keep=all", "algo.name=gigpo"]),
    ("lookahead", ["search.m=2", "search.depth=1", "algo.name=self_ac", "search.scorer=weighted", "search.w_value=1"]),
    ("beam", ["search.m=2", "algo.name=ppo", "search.scorer=value"]),
])
def test_training_with_each_strategy(tmp_path, strategy, extra):
    cfg = _cfg("train.steps=2", "train.tasks_per_step=2", "algo.group_size=2", "train.warm_start_steps=0",
               "eval.episodes=2", "env.max_turns=3", f"train.out_dir={tmp_path}", "train.progress=false",
               f"rollout.search={strategy}", *extra)
    trainer = Trainer(cfg)
    out = trainer.train()
    assert trainer.step == 2
    assert out["search/compute_multiple"] > 1.0
    assert 0.0 <= out["search/kept_success"] <= 1.0
    trees = (tmp_path / "search_trees.jsonl").read_text().splitlines()
    per_step = 2 * 2 // (2 if "search.keep=all" in extra else 1)
    assert len(trees) == 2 * per_step
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 2 * 2  # tasks × group_size kept trajectories per step


def test_gigpo_anchor_groups_from_branches(policy):
    """Kept beams of one search branch from the same root state: their first steps share one anchor key."""
    builder = build_prompt(_cfg(), policy, make_env(FrozenLakeEnv))
    res = search_rollouts(policy, lambda: make_env(FrozenLakeEnv, max_turns=2), SeedTasks("frozenlake", 0).next(1),
                          builder, SearchSpec("beam", m=3, beams=2, keep="all"), max_turns=2,
                          generator=torch.Generator().manual_seed(0))
    a, b = res.trajectories
    assert a.group_id == b.group_id and a.steps[0].state_key == b.steps[0].state_key


def test_search_config_errors():
    with pytest.raises(ConfigError, match="needs a value head"):
        load_config(overrides=["rollout.search=beam", "search.scorer=value"])
    with pytest.raises(ConfigError, match="applies to rollout.search=beam or lookahead"):
        load_config(overrides=["rollout.search=best_of_n", "search.scorer=value", "algo.name=self_ac"])
    with pytest.raises(ConfigError, match="multiple"):
        load_config(overrides=["rollout.search=beam", "search.keep=all", "search.beams=3", "algo.group_size=8"])
    with pytest.raises(ConfigError, match="rollout.search"):
        load_config(overrides=["rollout.search=mcts"])
    with pytest.raises(ConfigError, match="unknown config key 'search.width'"):
        load_config(overrides=["search.width=3"])


def test_sample_costs_one():
    """Plain sampling through the same entry point: compute multiple exactly 1."""
    cfg = _cfg()
    pol = build_policy(cfg)
    builder = build_prompt(cfg, pol, make_env(FrozenLakeEnv))
    res = search_rollouts(pol, lambda: make_env(FrozenLakeEnv, max_turns=2), SeedTasks("frozenlake", 0).next(3),
                          builder, SearchSpec("sample"), max_turns=2, generator=torch.Generator().manual_seed(0))
    assert res.metrics()["search/compute_multiple"] == 1.0 and len(res.trajectories) == 3
