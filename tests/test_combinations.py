"""The seeds' methods together: pairings the configuration once refused, each checked against numbers derived
by hand and trained for a step or two on the tiny model (docs/configuration.md, "Combining methods").

- step attribution (AgentEvolver's self-attributing) on every estimator: A'_t = A_t + α·Σ_{k≥t} r̃_k, with A_t
  GiGPO's, PPO's GAE or Self-AC's R_k − V(s_k);
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from selfevolve import Trainer
from selfevolve.algos.attribution import attribution_advantages, fuse_turn_advantages, label_returns
from selfevolve.algos.gae import gae_advantages
from selfevolve.config import load_config
from selfevolve.objectives.credit import credit_batch, step_advantages
from selfevolve.objectives.self_ac.critic import returns_minus_values
from selfevolve.rewards.oracle import BAD, GOOD
from selfevolve.types import Step, Task, Trajectory

R3 = math.sqrt(3)
TINY = ["model.name=tiny", "model.dtype=fp32", "train.tasks_per_step=2", "algo.group_size=4", "eval.episodes=2",
        "train.progress=false", "train.warm_start_steps=0", "train.eval_every=0", "eval.at_start=false",
        "agent.max_new_tokens=3"]
LAKE = ["env.name=frozenlake", "env.size=3", "env.max_turns=3"]


def close(x, expected, tol=1e-9):
    torch.testing.assert_close(torch.as_tensor(x, dtype=torch.float64),
                               torch.tensor(expected, dtype=torch.float64), atol=tol, rtol=0)


def _padded(rows):
    T = max(len(r) for r in rows)
    x = torch.zeros(len(rows), T, dtype=torch.float64)
    m = torch.zeros(len(rows), T, dtype=torch.bool)
    for i, r in enumerate(rows):
        x[i, :len(r)] = torch.tensor(r, dtype=torch.float64)
        m[i, :len(r)] = True
    return x, m


def _read(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


# ---- attribution x a per-turn advantage ---------------------------------------------------------------------------
# labels [GOOD, BAD] and [BAD]*4 in one group: r~ = [√3, −1/√3] and [−1/√3]*4 (tests/test_attribution.py)
LABELS = [[1, -1], [-1, -1, -1, -1]]


def test_fused_turn_advantage_by_hand():
    labels, mask = _padded(LABELS)
    base, _ = _padded([[0.5, -0.25], [1.0, 2.0, 3.0, 4.0]])
    fused = fuse_turn_advantages(labels, mask, base, ["g", "g"], alpha=0.2, eps=0.0)
    close(fused, [[0.5 + 0.2 * (R3 - 1 / R3), -0.25 - 0.2 / R3, 0, 0],
                  [1 - 0.8 / R3, 2 - 0.6 / R3, 3 - 0.4 / R3, 4 - 0.2 / R3]])
    close(label_returns(labels, mask, ["g", "g"], 0.2, eps=0.0),
          [[0.2 * (R3 - 1 / R3), -0.2 / R3, 0, 0], [-0.8 / R3, -0.6 / R3, -0.4 / R3, -0.2 / R3]])
    # an episode-level base (GRPO's R~ on every turn) gives the seed's eqs. (2)-(3) to the last bit
    outcome = torch.tensor([1 / math.sqrt(2), -1 / math.sqrt(2)], dtype=torch.float64)
    broadcast = outcome[:, None] * mask
    assert torch.equal(fuse_turn_advantages(labels, mask, broadcast, ["g", "g"], alpha=0.2),
                       attribution_advantages(labels, mask, outcome, ["g", "g"], alpha=0.2))


def _traj(group, labels, rewards, keys, success=False):
    steps = [Step(prompt_ids=[], action_ids=[], logprobs=[], reward=r, state_key=k,
                  info={"attribution": {"label": lab, "rationale": "", "source": "oracle", "defaulted": False}})
             for lab, r, k in zip(labels, rewards, keys)]
    return Trajectory(task=Task(id=group, env="x", seed=0), steps=steps, group_id=group, success=success)


def _labelled_batch(algo):
    trajs = [_traj("g", [GOOD, BAD], [0.0, 1.0], ["s0", "s1"], True),
             _traj("g", [BAD] * 4, [0.0] * 4, ["s0", "s2", "s2", "s3"])]
    cfg = load_config(overrides=[f"algo.name={algo}", "reward.attribution=oracle", "attribution.alpha=0.2",
                                 "algo.norm=mean", "algo.ppo.whiten=false", "algo.gamma=0.5"])
    batch, _ = credit_batch(trajs, cfg, vocab_size=10)
    return trajs, cfg, batch


def test_gigpo_with_step_labels_by_hand():
    _, cfg, batch = _labelled_batch("gigpo")
    adv, returns = step_advantages("gigpo", batch, cfg.algo, cfg.attribution)
    assert returns is None
    # GiGPO, mean norm, γ = 0.5: A^E = ±1/2 (rewards 1 and 0); step returns [0.5, 1] and [0]*4; the one anchor
    # group with two samples is s0 (returns 0.5 and 0, A^S = ±0.25); ω = 1
    gigpo = [[0.5 + 0.25, 0.5, 0, 0], [-0.5 - 0.25, -0.5, -0.5, -0.5]]
    close(adv, [[gigpo[0][0] + 0.2 * (R3 - 1 / R3), gigpo[0][1] - 0.2 / R3, 0, 0],
                [g - 0.2 * (4 - t) / R3 for t, g in enumerate(gigpo[1])]], tol=1e-6)


def test_ppo_with_step_labels_keeps_the_critic_on_the_returns():
    _, cfg, batch = _labelled_batch("ppo")
    batch.values, _ = _padded([[0.2, 0.4], [0.1, 0.1, 0.1, 0.1]])
    adv, returns = step_advantages("ppo", batch, cfg.algo, cfg.attribution)
    gae, target = gae_advantages(batch.step_rewards, batch.values, batch.mask, gamma=0.5, lam=cfg.algo.ppo.lam)
    close(returns, target.tolist())  # the labels credit the actor; V still learns the environment's return
    bonus = [[0.2 * (R3 - 1 / R3), -0.2 / R3, 0, 0], [-0.8 / R3, -0.6 / R3, -0.4 / R3, -0.2 / R3]]
    close(adv, (gae + torch.tensor(bonus, dtype=torch.float64)).tolist(), tol=1e-5)
    # δ by hand for the first episode: δ_1 = 1 − 0.4, δ_0 = 0 + 0.5·0.4 − 0.2; A = δ_0 + 0.5·λ·δ_1, λ = 0.95
    assert float(gae[0, 0]) == pytest.approx(0.0 + 0.5 * 0.95 * 0.6)


def test_self_ac_advantage_adds_the_label_credit():
    assert returns_minus_values([0.0, 1.0], [0.2, 0.4, 0.0], 0.5, [0.1, -0.3]) == [
        round(0.5 - 0.2 + 0.1, 5), round(1.0 - 0.4 - 0.3, 5)]
    assert returns_minus_values([0.0, 1.0], [0.2, 0.4, 0.0], 0.5) == [0.3, 0.6]


@pytest.mark.parametrize("algo", ["gigpo", "ppo", "self_ac"])
def test_training_with_oracle_attribution(tmp_path, algo):
    """One tiny run per estimator: every step labelled, and for Self-AC the logged advantage is R_k − V(s_k) plus
    the labels' α·Σ r̃ recomputed from the logged labels."""
    out = tmp_path / algo
    cfg = load_config(overrides=[*TINY, *LAKE, f"algo.name={algo}", "train.steps=1", "reward.attribution=oracle",
                                 "attribution.alpha=0.3", f"train.out_dir={out}"])
    Trainer(cfg).train()
    metrics = _read(out / "metrics.jsonl")
    assert "attribution/good_share" in metrics[-1] and math.isfinite(metrics[-1]["grad_norm"])
    trajs = _read(out / "trajectories.jsonl")
    assert len(trajs) == 8 and all(s["info"]["attribution"]["source"] == "oracle" for t in trajs for s in t["steps"])
    if algo != "self_ac":
        return
    labels, mask = _padded([[1.0 if s["info"]["attribution"]["label"] == GOOD else -1.0 for s in t["steps"]]
                            for t in trajs])
    credit = label_returns(labels, mask, [t["group_id"] for t in trajs], 0.3)
    for t, c in zip(trajs, credit.tolist()):
        rewards = [s["reward"] for s in t["steps"]]
        expected = returns_minus_values(rewards, t["flags"]["values"], cfg.algo.gamma, c[:len(rewards)])
        assert t["flags"]["advantages"] == pytest.approx(expected, abs=2e-5)
