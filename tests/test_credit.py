"""Step-level credit: GiGPO, SELAUR, turn-level GAE, instance filtering — hand-computed examples and invariants."""

import math
import random
from typing import get_args

import pytest
import torch

from selfevolve.algos.filtering import filter_groups, group_spread
from selfevolve.algos.gae import gae_advantages, whiten
from selfevolve.algos.gigpo import anchor_ids, discounted_returns, gigpo_advantages
from selfevolve.algos.loss import value_loss
from selfevolve.algos.selaur import shape_failures, token_uncertainty, trajectory_uncertainty
from selfevolve.config import load_config
from selfevolve.config_sections import AlgoConfig
from selfevolve.envs import ENVS, make_env
from selfevolve.errors import ConfigError
from selfevolve.objectives import OBJECTIVES
from selfevolve.objectives.credit import ESTIMATORS, credit_batch, step_advantages
from selfevolve.types import Step, Task, Trajectory

close = lambda a, b: torch.testing.assert_close(a.double(), torch.as_tensor(b, dtype=torch.float64), atol=1e-5, rtol=1e-5)
ONES = lambda n, t: torch.ones(n, t, dtype=torch.bool)  # noqa: E731


# ---------------------------------------------------------------- GiGPO

def test_discounted_returns_ignore_padding():
    # R_t = r_t + γ R_{t+1}, γ = 0.5: [1, 0, 2] -> [1 + 0.5·(0 + 0.5·2), 0.5·2, 2] = [1.5, 1, 2]
    r = torch.tensor([[1.0, 0.0, 2.0], [3.0, 9.0, 9.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0]])
    close(discounted_returns(r, m, 0.5), [[1.5, 1.0, 2.0], [3.0, 0.0, 0.0]])


def test_gigpo_two_trajectories_meet_in_a_state_at_different_steps():
    # One group. Trajectory 0 visits A, B, C and is rewarded 1 at its last step; trajectory 1 visits A, C, D
    # and gets nothing: it reaches C one step earlier. γ = 0.5, ω = 1, norm = mean.
    #   returns: traj 0 [0.25, 0.5, 1], traj 1 [0, 0, 0]
    #   episode: R = [1, 0] -> A^E = [+0.5, −0.5]
    #   anchors: A {0.25, 0} -> ±0.125;  C {1 (t=2 of traj 0), 0 (t=1 of traj 1)} -> ±0.5;  B, D singletons -> 0
    keys = [["A", "B", "C"], ["A", "C", "D"]]
    ids = torch.tensor(anchor_ids(keys, ["g", "g"]))
    assert ids[0, 0] == ids[1, 0] and ids[0, 2] == ids[1, 1] and len(set(ids.flatten().tolist())) == 4
    r = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    adv = gigpo_advantages(r.sum(1), ["g", "g"], r, ONES(2, 3), ids, gamma=0.5, omega=1.0, norm="mean")
    close(adv, [[0.625, 0.5, 1.0], [-0.625, -1.0, -0.5]])
    # ω scales only the step part: ω = 0 leaves the episode advantage on every step
    adv0 = gigpo_advantages(r.sum(1), ["g", "g"], r, ONES(2, 3), ids, gamma=0.5, omega=0.0, norm="mean")
    close(adv0, [[0.5] * 3, [-0.5] * 3])


def test_gigpo_mean_std_and_singletons():
    # anchor {1, 0}: mean 0.5, unbiased std 0.7071 -> ±0.7071; episode level the same numbers -> total ±1.41421
    r = torch.tensor([[1.0], [0.0], [5.0]])
    ids = torch.tensor(anchor_ids([["s"], ["s"], ["s"]], ["g", "g", "h"]))  # h is another group: its own anchor
    adv = gigpo_advantages(r.sum(1), ["g", "g", "h"], r, ONES(3, 1), ids, gamma=0.9, norm="mean_std")
    s = 0.5 / (math.sqrt(0.5) + 1e-6)
    close(adv, [[2 * s], [-2 * s], [0.0]])  # the singleton group/anchor of "h" gets 0 at both levels


def test_gigpo_trajectory_weighting_counts_a_looping_trajectory_once():
    # Trajectory 0 stays in state S for two steps (returns 0 and 0: reward 0), trajectory 1 passes S once with
    # return 3 (γ = 1, one step, reward 3). Per step sample: mean (0+0+3)/3 = 1. Per trajectory: (0 + 3)/2 = 1.5.
    r = torch.tensor([[0.0, 0.0], [3.0, 0.0]])
    m = torch.tensor([[1, 1], [1, 0]])
    ids = torch.tensor([[0, 0], [0, 9]])
    kw = dict(gamma=1.0, omega=1.0, norm="mean")
    ep = torch.zeros(2)  # isolate the step part
    step = gigpo_advantages(ep, ["g", "g"], r, m, ids, weighting="step", **kw)
    traj = gigpo_advantages(ep, ["g", "g"], r, m, ids, weighting="trajectory", **kw)
    close(step, [[-1.0, -1.0], [2.0, 0.0]])
    close(traj, [[-1.5, -1.5], [1.5, 0.0]])


def test_gigpo_padding_never_enters_statistics():
    # the same two one-step trajectories, once with a padded longer row: the real steps' advantages are equal
    r1 = torch.tensor([[1.0], [0.0]])
    a1 = gigpo_advantages(r1.sum(1), [0, 0], r1, ONES(2, 1), torch.zeros(2, 1, dtype=torch.long))
    r2 = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    m2 = torch.tensor([[1, 0, 0], [1, 0, 0]])
    a2 = gigpo_advantages(r2.sum(1), [0, 0], r2, m2, torch.zeros(2, 3, dtype=torch.long))
    close(a2[:, :1], a1)
    close(a2[:, 1:], torch.zeros(2, 2))


def test_similarity_anchors_merge_near_identical_observations():
    keys = [["grid 1234 turn 1", "other text"], ["grid 1234 turn 2", "other text"]]
    exact = anchor_ids(keys, [0, 0], mode="observation")
    similar = anchor_ids(keys, [0, 0], mode="similarity", threshold=0.9)
    assert exact[0][0] != exact[1][0] and similar[0][0] == similar[1][0]
    assert exact[0][1] == exact[1][1] == exact[0][1]
    with pytest.raises(ValueError, match="allowed: state, observation, similarity"):
        anchor_ids(keys, [0, 0], mode="nope")


# ---------------------------------------------------------------- SELAUR

def test_selaur_token_metrics_hand_values():
    V = 1000
    # uniform distribution: entropy log V -> u_ent = 1 exactly
    u = token_uncertainty(torch.tensor([math.log(V)]), torch.tensor([1 / V]), torch.tensor([1 / V]), V,
                          w_entropy=1, w_least_confidence=0, w_margin=0)
    close(u, [1.0])
    # one-hot: entropy 0, least confidence 0, margin σ((1 − (1 − 0))/s) = σ(0) = 0.5 (its minimum)
    one_hot = dict(entropy=torch.tensor([0.0]), top1=torch.tensor([1.0]), top2=torch.tensor([0.0]), vocab_size=V)
    close(token_uncertainty(**one_hot, w_entropy=1, w_least_confidence=0, w_margin=0), [0.0])
    close(token_uncertainty(**one_hot, w_entropy=0, w_least_confidence=1, w_margin=0), [0.0])
    close(token_uncertainty(**one_hot, w_entropy=0, w_least_confidence=0, w_margin=1), [0.5])
    # all three, equal weights: (0 + 0 + 0.5)/3
    close(token_uncertainty(**one_hot), [0.5 / 3])
    # margin with a scale: p1 = 0.6, p2 = 0.3 -> σ((1 − 0.3)/2) = σ(0.35)
    close(token_uncertainty(torch.tensor([0.0]), torch.tensor([0.6]), torch.tensor([0.3]), V, w_entropy=0,
                            w_least_confidence=0, w_margin=1, margin_scale=2.0), [1 / (1 + math.exp(-0.35))])
    # least confidence of the sampled token instead of the top one
    close(token_uncertainty(torch.tensor([0.0]), torch.tensor([0.6]), torch.tensor([0.3]), V, w_entropy=0,
                            w_least_confidence=1, w_margin=0, sampled_p=torch.tensor([0.3])), [0.7])


def test_selaur_trajectory_aggregate_weights_late_steps():
    # λ = 0.5, u = [0.2, 0.4, 0.8]: weights λ², λ, 1 = 0.25, 0.5, 1 -> U = (0.05 + 0.2 + 0.8)/1.75 = 0.6
    close(trajectory_uncertainty(torch.tensor([[0.2, 0.4, 0.8]]), ONES(1, 3), lam=0.5), [0.6])


def test_selaur_shaping_hand_values():
    # a success keeps its rewards; the failure's steps get w·û_t with û_t its share of U (U = 0.6 as above),
    # so they sum to w·U = 0.57; with b = gap = 1 no offset is added (the seed's 0/1 scale)
    r = torch.tensor([[0.0, 0.0, 1.0], [0.0, -0.1, 0.0]])
    u = torch.tensor([[0.5, 0.5, 0.5], [0.2, 0.4, 0.8]])
    steps, ep = shape_failures(r, u, ONES(2, 3), torch.tensor([True, False]), lam=0.5, fail_weight=0.95)
    close(steps, [[0.0, 0.0, 1.0], [0.95 * 0.05 / 1.75, 0.95 * 0.2 / 1.75, 0.95 * 0.8 / 1.75]])
    close(ep, [1.0, 0.57])
    # a success of reward 10 lifts the band: failure = 10 − 1·(1 − 0.57) = 9.57, the offset on the last step
    steps, ep = shape_failures(r * 10, u, ONES(2, 3), torch.tensor([True, False]), lam=0.5)
    close(ep, [10.0, 9.57])
    assert steps[1, 2] == pytest.approx(9.0 + 0.95 * 0.8 / 1.75)


def test_selaur_failures_stay_below_successes_on_random_batches():
    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        n, t = 2 + trial % 7, 1 + trial % 5
        scale = 10 ** float(torch.randint(-2, 3, (1,), generator=g))
        r = (torch.randn(n, t, generator=g) * scale)
        m = torch.rand(n, t, generator=g) > 0.3
        m[:, 0] = True
        u = torch.rand(n, t, generator=g)
        u[0, 0] = 1.0  # the extreme: maximal uncertainty
        ok = torch.rand(n, generator=g) > 0.5
        _, ep = shape_failures(r, u, m, ok, lam=0.9, fail_weight=0.95, gap=float(torch.rand(1, generator=g)) + 0.01)
        if ok.any() and (~ok).any():
            assert ep[~ok].max() < ep[ok].min(), trial


def _env_trajectories(name, n=24, seed=0):
    """Real episodes of a built-in world: half follow its BFS expert (successes), half act at random; token
    statistics are random (any values must keep the invariant)."""
    rng = random.Random(seed)
    trajs = []
    for i in range(n):
        env = make_env(name)
        env.reset(i // 2)
        traj = Trajectory(task=Task(id=str(i), env=name, seed=i // 2), group_id=str(i // 4))
        for _ in range(env.max_turns):
            action = env.expert_action() if i % 2 == 0 else rng.choice(["Left", "Right", "Up", "Down", "jump"])
            key = env.state_key()
            obs, reward, done, info = env.step(action or "Up")
            k = rng.randint(1, 4)
            traj.steps.append(Step(prompt_ids=[1], action_ids=[5] * k, logprobs=[-0.1] * k,
                                   entropy=[rng.uniform(0, 10) for _ in range(k)],
                                   top1=[rng.uniform(0.5, 1) for _ in range(k)], top2=[rng.uniform(0, 0.5) for _ in range(k)],
                                   reward=reward, done=done, state_key=key, observation=obs))
            traj.success = bool(info.get("success"))
            if done:
                break
        trajs.append(traj)
    return trajs


@pytest.mark.parametrize("name", sorted(ENVS))
def test_selaur_failures_below_successes_on_every_builtin_world(name):
    trajs = _env_trajectories(name)
    ok = [t for t in trajs if t.success]
    assert ok and len(ok) < len(trajs)
    cfg = load_config(overrides=["reward.shaping=selaur", f"env.name={name}"])
    batch, metrics = credit_batch(trajs, cfg, vocab_size=49152)
    ep = batch.episode_rewards
    assert ep[~batch.success].max() < ep[batch.success].min()
    # successes keep the environment's own reward; every step reward of the batch sums to its episode reward
    close(ep[batch.success], [t.reward for t in trajs if t.success])
    close(batch.step_rewards.sum(1), ep)
    assert 0 < metrics["selaur/U_failed"] < 1


# ---------------------------------------------------------------- PPO: GAE and the value loss

def test_gae_hand_values_and_direct_loop():
    # rewards [0, 1], V = [0.5, 0.2], γ = 0.9, λ = 0.5:
    #   δ1 = 1 − 0.2 = 0.8, δ0 = 0 + 0.9·0.2 − 0.5 = −0.32, A0 = −0.32 + 0.45·0.8 = 0.04; targets A + V
    adv, ret = gae_advantages(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.2]]), ONES(1, 2), gamma=0.9, lam=0.5)
    close(adv, [[0.04, 0.8]])
    close(ret, [[0.54, 1.0]])

    g = torch.Generator().manual_seed(1)
    r, v = torch.randn(5, 6, generator=g, dtype=torch.float64), torch.randn(5, 6, generator=g, dtype=torch.float64)
    lengths = [6, 1, 3, 5, 2]
    m = torch.tensor([[t < L for t in range(6)] for L in lengths])
    adv, ret = gae_advantages(r, v, m, gamma=0.95, lam=0.9)
    for i, L in enumerate(lengths):  # the textbook double loop: A_t = Σ_l (γλ)^l δ_{t+l}
        for t in range(L):
            want = 0.0
            for k in range(t, L):
                nxt = v[i, k + 1] if k + 1 < L else 0.0
                want += (0.95 * 0.9) ** (k - t) * (r[i, k] + 0.95 * nxt - v[i, k])
            assert adv[i, t].item() == pytest.approx(float(want), abs=1e-9)
            assert ret[i, t].item() == pytest.approx(float(want + v[i, t]), abs=1e-9)
        assert not adv[i, L:].any()


def test_whiten_uses_real_entries_only():
    x = torch.tensor([[1.0, 3.0, 99.0]])
    m = torch.tensor([[1, 1, 0]])
    close(whiten(x, m), [[-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0]])


def test_value_loss_clipping():
    # V moved from 0 to 1, target 2, ε = 0.2: unclipped (1−2)² = 1, clipped V = 0.2 -> (0.2−2)² = 3.24 -> ½·3.24
    loss, st = value_loss(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([2.0]), clip=0.2)
    assert loss.item() == pytest.approx(1.62) and st["vf_clip_frac"] == 1.0
    loss, _ = value_loss(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([2.0]), clip=None)
    assert loss.item() == pytest.approx(0.5)


# ---------------------------------------------------------------- instance filtering

def test_filter_keeps_the_groups_with_the_largest_spread():
    # groups: a [0, 1] std .5 · b [1, 1] std 0 · c [0, 4] std 2 · d [0, 2] std 1
    r = torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0, 4.0, 0.0, 2.0])
    g = ["a", "a", "b", "b", "c", "c", "d", "d"]
    close(group_spread(r, g), [0.5, 0.0, 2.0, 1.0])
    keep, m = filter_groups(r, g, keep=0.5)  # ceil(0.5·4) = 2 groups: c and d
    assert keep.tolist() == [False, False, False, False, True, True, True, True]
    assert m["filter/zero_std_frac"] == 0.25 and m["filter/kept_groups"] == 2
    keep, _ = filter_groups(r, g, keep=0.6)  # ceil(2.4) = 3: c, d, a
    assert keep.tolist() == [True, True, False, False, True, True, True, True]
    keep, m = filter_groups(r, g, keep=1.0, drop_zero_std=True)  # zero-variance groups on their own
    assert keep.tolist() == [True, True, False, False, True, True, True, True] and m["filter/kept_groups"] == 3
    keep, _ = filter_groups(r, g, keep=1.0)
    assert keep.all()
    close(group_spread(r, g, by="range"), [1.0, 0.0, 4.0, 2.0])
    with pytest.raises(ValueError):
        filter_groups(r, g, keep=0.0)


# ---------------------------------------------------------------- selection by name

def test_estimators_selected_by_name_and_bad_names_rejected():
    trajs = _env_trajectories("frozenlake", n=8)
    for name in ("grpo", "rloo", "gigpo"):
        cfg = load_config(overrides=[f"algo.name={name}"])
        batch, _ = credit_batch(trajs, cfg, vocab_size=100)
        adv, ret = step_advantages(name, batch, cfg.algo)
        assert adv.shape == batch.mask.shape and ret is None and not adv[~batch.mask].any()
    with pytest.raises(ConfigError, match="allowed: gigpo, grpo, ppo, rloo"):
        step_advantages("nope", batch, cfg.algo)
    with pytest.raises(ConfigError, match="algo.name"):
        load_config(overrides=["algo.name=a2c"])
    with pytest.raises(ConfigError, match="reward.selaur"):
        load_config(overrides=["reward.selaur.w_entropy=0", "reward.selaur.w_margin=0",
                               "reward.selaur.w_least_confidence=0"])
    with pytest.raises(ConfigError, match="filter.keep"):
        load_config(overrides=["filter.keep=1.5"])


def test_every_algorithm_the_config_allows_has_an_objective():
    """algo.name's allowed values and the objectives agree: a new estimator is its entry in credit.ESTIMATORS and
    its name in AlgoConfig.name (docs/architecture.md)."""
    allowed = set(get_args(AlgoConfig.model_fields["name"].annotation))
    assert allowed == set(OBJECTIVES) == set(ESTIMATORS) | {"self_ac"}
