import math

import pytest
import torch

from selfevolve.algos import (
    ADVANTAGES,
    compute_advantages,
    entropy_from_logits,
    group_index,
    grpo_advantages,
    kl_penalty,
    masked_mean,
    ppo_clip_loss,
    rloo_advantages,
)
from selfevolve.errors import ConfigError

close = lambda a, b: torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- advantages


def test_group_index_first_appearance():
    assert group_index(["b", "a", "b", "c", "a"]).tolist() == [0, 1, 0, 2, 1]
    assert group_index([7, 7, 3]).tolist() == [0, 0, 1]


def test_grpo_mean_std_hand_values():
    # group "p": [1, 0, 0, 1] → mean 0.5, deviations ±0.5,
    # unbiased var = 4·0.25 / 3 = 1/3, std = 0.57735 → A = ±0.5/(0.57735+1e-6) ≈ ±0.866024
    # group "q": [2] alone → 0
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0])
    a = grpo_advantages(r, ["p", "p", "p", "p", "q"])
    s = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    close(a, [s, -s, -s, s, 0.0])


def test_grpo_mean_only():
    # Dr.GRPO: A = R − mean; group [1, 0, 0, 1] → ±0.5; group [2, 4] → mean 3 → [−1, 1]
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 4.0])
    a = grpo_advantages(r, [0, 0, 0, 0, 1, 1], norm="mean")
    close(a, [0.5, -0.5, -0.5, 0.5, -1.0, 1.0])


def test_grpo_constant_group_is_zero():
    # all equal → R − mean = 0 and std = 0, eps keeps it finite: 0/(0+eps) = 0
    close(grpo_advantages(torch.tensor([3.0, 3.0, 3.0]), [0, 0, 0]), [0.0, 0.0, 0.0])


def test_grpo_unknown_norm():
    with pytest.raises(ValueError, match="mean_std, mean"):
        grpo_advantages(torch.tensor([1.0]), [0], norm="bogus")


def test_grpo_variance_is_exact_when_the_mean_dwarfs_the_spread():
    """Two-pass variance. Rewards [4.59296, 4.59289]: mean 4.592925, deviations ±3.5e-5 (of the float32
    values), unbiased std √2·3.5e-5 ≈ 4.95e-5, so A = ±3.5e-5 / (4.95e-5 + 1e-6) ≈ ±0.6931. For 8 rewards of
    mean 1000 and std 1e-5 the one-pass form ΣR² − n·mean² was off by 11.1 (now < 1e-6). The reference is
    exact (``statistics`` computes with fractions)."""
    import random
    import statistics

    def exact(values, eps=1e-6):
        mean, std = statistics.mean(values), statistics.stdev(values)
        return torch.tensor([(v - mean) / (std + eps) for v in values], dtype=torch.float64)

    r = torch.tensor([4.59296, 4.59289])
    adv = grpo_advantages(r, [0, 0])
    assert adv.tolist() == pytest.approx([0.6931, -0.6931], abs=1e-4)
    assert (adv.double() - exact(r.tolist())).abs().max() < 1e-7  # float32 output rounding only
    rng = random.Random(0)
    values = [1000 + 1e-5 * rng.gauss(0, 1) for _ in range(8)]
    adv = grpo_advantages(torch.tensor(values, dtype=torch.float64), [0] * 8)
    assert (adv - exact(values)).abs().max() < 1e-6  # rounding of values near 1000 (ulp 1e-13 / std 1e-5)
    rloo = rloo_advantages(torch.tensor(values, dtype=torch.float64), [0] * 8)
    others = [(sum(values) - v) / 7 for v in values]
    assert (rloo - torch.tensor([v - o for v, o in zip(values, others)], dtype=torch.float64)).abs().max() < 1e-9


def test_rloo_hand_values():
    # A_i = R_i − mean of the others: 1 − (2+3)/2, 2 − (1+3)/2, 3 − (1+2)/2
    a = rloo_advantages(torch.tensor([1.0, 2.0, 3.0]), ["g"] * 3)
    close(a, [1 - 2.5, 2 - 2.0, 3 - 1.5])


def test_rloo_singleton_zero():
    close(rloo_advantages(torch.tensor([5.0, 1.0, 3.0]), ["a", "b", "b"]), [0.0, -2.0, 2.0])


def test_interleaved_group_ids():
    # groups x: rewards at positions 0, 2, 4 = [1, 3, 5]; y: positions 1, 3 = [10, 20]
    r = torch.tensor([1.0, 10.0, 3.0, 20.0, 5.0])
    ids = ["x", "y", "x", "y", "x"]
    # mean norm: x mean 3 → [−2, 0, 2]; y mean 15 → [−5, 5]
    close(grpo_advantages(r, ids, norm="mean"), [-2.0, -5.0, 0.0, 5.0, 2.0])
    # mean_std: x std = sqrt((4+0+4)/2) = 2 → [−1, 0, 1]; y std = sqrt((25+25)/1) = 7.0711 → ∓0.7071
    y = 5 / (math.sqrt(50) + 1e-6)
    x = 2 / (2 + 1e-6)
    close(grpo_advantages(r, ids), [-x, -y, 0.0, y, x])
    # rloo: x: 1−4, 3−3, 5−2 = [−3, 0, 3]; y: 10−20, 20−10 = [−10, 10]
    close(rloo_advantages(r, ids), [-3.0, -10.0, 0.0, 10.0, 3.0])


def test_compute_advantages_dispatch():
    r = torch.tensor([1.0, 2.0, 3.0])
    close(compute_advantages("rloo", r, [0, 0, 0], norm="mean"), [-1.5, 0.0, 1.5])
    close(compute_advantages("grpo", r, [0, 0, 0], norm="mean"), [-1.0, 0.0, 1.0])
    assert set(ADVANTAGES) == {"grpo", "rloo"}
    with pytest.raises(ConfigError, match="unknown algo 'ppo'; allowed: grpo, rloo"):
        compute_advantages("ppo", r, [0, 0, 0])


# ---------------------------------------------------------------- ppo loss


def _one(ratio, adv, **kw):
    """Single-token loss for a given ratio ρ and advantage A."""
    lp = torch.tensor([[math.log(ratio)]])
    return ppo_clip_loss(lp, torch.zeros(1, 1), torch.tensor([[adv]]), torch.ones(1, 1), **kw)


def test_ppo_inside_clip_range():
    # ρ = 1.1 ∈ [0.8, 1.28] → L = −A·ρ = −2·1.1 = −2.2, nothing clipped
    loss, st = _one(1.1, 2.0)
    close(loss, -2.2)
    assert st["clip_frac"] == 0 and st["dual_clip_frac"] == 0
    assert st["ratio_mean"] == pytest.approx(1.1)
    assert st["approx_kl"] == pytest.approx(-math.log(1.1))


def test_ppo_clip_high_positive_adv():
    # ρ = 1.5 > 1.28, A = 1: max(−1.5, −1.28) = −1.28 (clipped branch)
    loss, st = _one(1.5, 1.0)
    close(loss, -1.28)
    assert st["clip_frac"] == 1.0


def test_ppo_clip_low_negative_adv():
    # ρ = 0.5 < 0.8, A = −1: max(0.5, 0.8) = 0.8 (clipped branch); dual bound 3 not binding
    loss, st = _one(0.5, -1.0)
    close(loss, 0.8)
    assert st["clip_frac"] == 1.0 and st["dual_clip_frac"] == 0.0


def test_ppo_dual_clip_binds():
    # ρ = 100, A = −2: max(200, 2·1.28) = 200 → min(200, −3·(−2)) = 6 = 3|A|
    loss, st = _one(100.0, -2.0)
    close(loss, 6.0)
    assert st["dual_clip_frac"] == 1.0
    # disabled: the unclipped 200 remains
    loss, st = _one(100.0, -2.0, dual_clip=None)
    close(loss, 200.0)
    assert st["dual_clip_frac"] == 0.0


def test_ppo_mask_and_token_mean():
    # row 0 has 3 valid tokens, row 1 has 1 valid token (rest padding with garbage values).
    # ρ = 1 everywhere valid, per-token L = −A: row0 A = [1, 2, 3], row1 A = [4]
    # token-mean over 4 tokens: −(1+2+3+4)/4 = −2.5 (a seq-mean would give −(2+4)/2 = −3)
    lp = torch.tensor([[0.0, 0.0, 0.0], [0.0, 9.0, 9.0]])
    adv = torch.tensor([[1.0, 2.0, 3.0], [4.0, -100.0, -100.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    loss, st = ppo_clip_loss(lp, torch.zeros(2, 3), adv, mask)
    close(loss, -2.5)
    assert st["ratio_mean"] == pytest.approx(1.0) and st["clip_frac"] == 0.0


def test_ppo_sequence_advantage_broadcast():
    # advantages [B] broadcast over T: A = [1, −1], ρ = 1 → L = [−1, −1 | 1, 1] → mean 0 over 4 tokens,
    # masking row 1's second token: (−1 −1 + 1)/3 = −1/3
    lp = torch.zeros(2, 2)
    loss, _ = ppo_clip_loss(lp, lp, torch.tensor([1.0, -1.0]), torch.tensor([[1, 1], [1, 0]]))
    close(loss, -1 / 3)


def test_ppo_per_token_clip_high():
    # ρ = 1.5, A = 1 on two tokens; clip_high = [0.28, 1.0] → bounds 1.28 and 2.0
    # L = [−1.28, −1.5] → mean −1.39; only token 0 clipped → clip_frac 0.5
    lp = torch.full((1, 2), math.log(1.5))
    loss, st = ppo_clip_loss(lp, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), clip_high=torch.tensor([[0.28, 1.0]]))
    close(loss, -1.39)
    assert st["clip_frac"] == pytest.approx(0.5)
    # per-row [B] clip_high broadcasts the same way
    loss, _ = ppo_clip_loss(lp, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), clip_high=torch.tensor([1.0]))
    close(loss, -1.5)


def test_ppo_gradient_at_ratio_one():
    # at ρ = 1 the unclipped branch is active: ∂L_t/∂logπ_t = −A_t·ρ = −A_t, divided by #masked tokens (3)
    lp = torch.zeros(2, 2, requires_grad=True)
    adv = torch.tensor([[1.0, -2.0], [0.5, 7.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, _ = ppo_clip_loss(lp, torch.zeros(2, 2), adv, mask)
    loss.backward()
    close(lp.grad, [[-1.0 / 3, 2.0 / 3], [-0.5 / 3, 0.0]])


# ---------------------------------------------------------------- kl, entropy, masked_mean


def test_kl_estimators():
    lp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-2.0, -2.0])
    # d = logπ − logπref = [1, 0]
    close(kl_penalty(lp, ref, "kl"), [1.0, 0.0])
    close(kl_penalty(lp, ref, "abs"), [1.0, 0.0])
    close(kl_penalty(lp, ref, "mse"), [0.5, 0.0])  # ½d²
    # k3 with r = ref − logπ = −1: e^−1 + 1 − 1 = 0.367879; equal log-probs → e^0 − 0 − 1 = 0
    close(kl_penalty(lp, ref, "low_var_kl"), [math.exp(-1), 0.0])
    # clamp: r = 30 → e^30 − 31 ≫ 10 → 10
    close(kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0])), [10.0])
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(lp, ref, "k9")


def test_entropy_uniform_and_stable():
    # uniform over V = 8 → H = log 8, independent of the shared shift (1000 would overflow a naive exp)
    close(entropy_from_logits(torch.full((2, 3, 8), 1000.0)), torch.full((2, 3), math.log(8)))
    # one-hot-ish logits → entropy ≈ 0
    assert entropy_from_logits(torch.tensor([0.0, -1e4, -1e4])).item() == pytest.approx(0.0, abs=1e-6)


def test_masked_mean():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    m = torch.tensor([[1, 0], [1, 1]])
    close(masked_mean(x, m), 8 / 3)
    close(masked_mean(x, m, dim=1), [1.0, 3.5])
