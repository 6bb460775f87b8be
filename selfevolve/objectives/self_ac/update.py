"""The Self-AC update (``algo.name=self_ac``): actor and critic of a whole episode from one forward pass.

Per minibatch of episodes: one forward of their shadow-prompt sequences (``shadow.py``) gives the actor's
log-probs and V(s_0..s_n); then

    Loss_Critic = mean over n = 1..td_max of the TD(n) squared errors (targets detached, terminal value 0)
    A_k         = R_k − V(s_k).detach()             (R: the discounted return from s_k)
                  + α·Σ_{j≥k} r̃_j with step labels   (reward.attribution; algos/attribution.py)
    Loss_Actor  = PPO-clip on π_θ/π_old, per token (A_k broadcast to a_k's tokens) or per turn (whole actions)
    Loss        = α·Loss_Critic + (1 − α)·Loss_Actor

(``critic.py`` has the math). ``algo.self_ac.forward=per_turn`` computes the same losses the way the shadow
prompt avoids: the actor on the plain episode and one critic forward per state — the reference
for tests and benchmarks.
"""

from __future__ import annotations

import random

import torch

from selfevolve.algos.loss import kl_penalty, ppo_clip_loss
from selfevolve.objectives import old_logprobs
from selfevolve.objectives.samples import micro_batches, minibatch_schedule
from selfevolve.objectives.self_ac.critic import critic_loss, returns_and_advantages, turn_logprobs
from selfevolve.objectives.self_ac.shadow import ShadowEpisode, actor_row, collate_shadow, critic_rows, forward_shadow
from selfevolve.objectives.update import safe_step


def _single_critic_episode(ids: list[int], positions: list[int], n_cp: int) -> ShadowEpisode:
    """"prefix up to s_k + cp_k" on its own, V read at its last token (one critic forward of the per-turn path)."""
    ep = ShadowEpisode()
    ep._add(ids[:-n_cp], positions[:-n_cp], 0)
    ep.cp_start = [len(ep.ids)]
    ep._add(ids[-n_cp:], positions[-n_cp:], 0, block=1)
    ep.cp_end = [len(ids) - 1]
    return ep


def _actor_units(ep: ShadowEpisode, ratio: str) -> int:
    """What the actor loss averages over: action tokens (``ratio=token``) or turns with an action (``turn``)."""
    return len(ep.target) if ratio == "token" else len(set(ep.token_turn))


def episode_forward(policy, episodes: list[ShadowEpisode], how: str = "shadow", with_entropy: bool = False,
                    micro_batch_tokens: int = 4096):
    """``(batch, logprobs [M], entropy, values [B, K])`` of ``episodes``: one shadow-prompt forward, or
    (``how="per_turn"``) the actor on the plain episodes plus one forward per critic prompt."""
    dtype = next(policy.model.parameters()).dtype
    batch = collate_shadow(episodes, policy.pad_id, dtype, policy.device)
    if how == "shadow":
        logp, ent, values = forward_shadow(policy, batch, with_entropy=with_entropy)
        return batch, logp, ent, values
    if how != "per_turn":
        raise ValueError(f"unknown Self-AC forward {how!r}; allowed: shadow, per_turn")
    plain = collate_shadow([actor_row(e) for e in episodes], policy.pad_id, dtype, policy.device)
    logp, ent, _ = forward_shadow(policy, plain, with_entropy=with_entropy)
    # one critic sequence per state, "prefix up to s_k + cp_k": each re-encodes its prefix (batched in chunks of
    # similar length to waste little padding; all stay in the graph until the backward)
    crit = [_single_critic_episode(ids, pos, e.cp_end[0] - e.cp_start[0] + 1) for e in episodes
            for ids, pos in critic_rows(e)]
    slot = {id(c): (b, k) for c, (b, k) in zip(crit, [(b, k) for b, e in enumerate(episodes)
                                                      for k in range(len(e.cp_end))])}
    values = torch.zeros(batch["value_mask"].shape, device=policy.device)
    for chunk in micro_batches(crit, micro_batch_tokens):
        v = forward_shadow(policy, collate_shadow(chunk, policy.pad_id, dtype, policy.device))[2][:, 0]
        index = torch.tensor([slot[id(c)] for c in chunk], device=policy.device)
        values = values.index_put((index[:, 0], index[:, 1]), v.to(values.dtype))
    return batch, logp, ent, values


def self_ac_losses(batch: dict, logp: torch.Tensor, values: torch.Tensor, sac, algo) -> tuple[dict, dict]:
    """The three losses of one micro-batch, and their statistics. ``sac``: ``algo.self_ac``."""
    rewards, turn_mask, value_mask = batch["rewards"], batch["turn_mask"], batch["value_mask"]
    closs, cst = critic_loss(values, rewards, turn_mask, value_mask, algo.gamma, sac.td_max)
    with torch.no_grad():  # what a critic that knows nothing (V ≡ 0) would score on the same batch
        zero, _ = critic_loss(torch.zeros_like(values), rewards, turn_mask, value_mask, algo.gamma, sac.td_max)
    R, A = returns_and_advantages(values, rewards, turn_mask, algo.gamma)
    if "label_credit" in batch:  # step attribution: A'_k = A_k + α·Σ_{j≥k} r̃_j (algos/attribution.py)
        A = A + batch["label_credit"].to(A.dtype) * turn_mask.to(A.dtype)
    old, slot = batch["old_logprobs"], batch["token_slot"]
    flat_A = A.flatten().float()
    clip = algo.clip_high
    if "clip_high" in batch:  # per token where episodes carry their own (experience-guided: selective boosting)
        clip = torch.nan_to_num(batch["clip_high"], nan=algo.clip_high)
    if sac.ratio == "token":
        aloss, ast = ppo_clip_loss(logp[None], old[None], flat_A[slot][None], torch.ones_like(logp)[None],
                                   clip_low=algo.clip_low, clip_high=clip if isinstance(clip, float) else clip[None],
                                   dual_clip=algo.dual_clip)
    else:
        n = flat_A.numel()
        has_tokens = torch.zeros(n, dtype=torch.bool, device=logp.device)
        has_tokens[slot] = True
        if not isinstance(clip, float):  # a turn's tokens share their episode's clip
            clip = torch.full((n,), algo.clip_high, dtype=clip.dtype, device=clip.device).index_put((slot,), clip)
        aloss, ast = ppo_clip_loss(turn_logprobs(logp, slot, n)[None], turn_logprobs(old, slot, n)[None],
                                   flat_A[None], has_tokens[None], clip_low=algo.clip_low,
                                   clip_high=clip if isinstance(clip, float) else clip[None],
                                   dual_clip=algo.dual_clip)
    m = turn_mask.float()
    stats = {**cst, **{k: float(v) for k, v in ast.items()},
             "loss/critic": float(closs.detach()), "loss/critic_zero": float(zero), "loss/actor": float(aloss.detach()),
             "value/mean": float((values.detach() * value_mask).sum() / value_mask.sum().clamp(min=1)),
             "return/mean": float((R * m).sum() / m.sum().clamp(min=1)),
             "adv/mean": float((A * m).sum() / m.sum().clamp(min=1)),
             "adv/abs_mean": float((A.abs() * m).sum() / m.sum().clamp(min=1))}
    return {"critic": closs, "actor": aloss}, stats


def self_ac_update(policy, optimizer, episodes: list[ShadowEpisode], algo, rng: random.Random) -> dict[str, float]:
    """``algo.epochs`` × ``algo.minibatches`` optimizer steps of α·critic + (1 − α)·actor over ``episodes``.

    Micro-batches (``algo.micro_batch_tokens`` padded tokens) accumulate to exactly the minibatch's loss: the
    critic term is weighted by value slots, the actor term by tokens (``ratio=token``) or turns (``turn``).
    Each episode's values from its first forward are left in ``episode.values`` (``[V(s_0), ..., V(s_n)]``): the
    trainer records them on the trajectory.
    """
    sac = algo.self_ac
    episodes = [e for e in episodes if e.turns]  # nothing to train in an episode without a step
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    params = policy.trainable_parameters()
    policy.model.eval()  # no dropout: the update must see the function that sampled
    # π_old: the sampler's log-probs or the trainer's (objectives/old_logprobs.py)
    pi_old = old_logprobs.PiOld(policy, algo, episodes,
                                lambda es: episode_logprobs(policy, es, algo.micro_batch_tokens))
    seen: set[int] = set()
    step_index = 0
    for mb in minibatch_schedule(episodes, algo, rng):
        n_values = sum(len(e.cp_end) for e in mb)
        n_actor = sum(_actor_units(e, sac.ratio) for e in mb)
        optimizer.zero_grad(set_to_none=True)
        st_mb: dict[str, float] = {}
        for chunk in micro_batches(mb, algo.micro_batch_tokens):
            batch, logp, ent, values = episode_forward(policy, chunk, sac.forward, with_entropy=True,
                                                       micro_batch_tokens=algo.micro_batch_tokens)
            batch["old_logprobs"] = pi_old.of(step_index, batch["old_logprobs"], logp, batch["guided"])
            losses, st = self_ac_losses(batch, logp, values, sac, algo)
            wc = sum(len(e.cp_end) for e in chunk) / max(n_values, 1)
            wa = sum(_actor_units(e, sac.ratio) for e in chunk) / max(n_actor, 1)
            loss = sac.alpha * wc * losses["critic"] + (1 - sac.alpha) * wa * losses["actor"]
            st["entropy"] = float(ent.mean()) if ent is not None and ent.numel() else 0.0
            if algo.kl_coef > 0:
                with torch.no_grad(), policy.reference():
                    ref, _, _ = forward_shadow(policy, batch, with_values=False)
                kl = kl_penalty(logp, ref, kind=algo.kl_kind).mean()
                loss = loss + algo.kl_coef * logp.numel() / max(sum(len(e.target) for e in mb), 1) * kl
                st["kl"] = float(kl.detach())
            loss.backward()
            for k, v in st.items():
                st_mb[k] = st_mb.get(k, 0.0) + (wc if k.startswith(("loss/td", "loss/critic", "value/")) else wa) * v
            for b, e in enumerate(chunk):
                if id(e) not in seen:
                    seen.add(id(e))
                    e.values = values[b, : len(e.cp_end)].detach().float().cpu().tolist()
        st_mb["grad_norm"] = safe_step(optimizer, params, algo.max_grad_norm, st_mb, step_index)
        step_index += 1
        if st_mb["loss/critic_zero"] > 1e-8:
            # 1 = the critic explains nothing a constant 0 would not; it falls as V learns the returns
            st_mb["value/loss_ratio"] = st_mb["loss/critic"] / st_mb["loss/critic_zero"]
        for k, v in st_mb.items():
            sums[k] = sums.get(k, 0.0) + v
            counts[k] = counts.get(k, 0) + 1
    return {**{k: v / counts[k] for k, v in sums.items()}, **pi_old.metrics()}


@torch.no_grad()
def episode_logprobs(policy, episodes: list[ShadowEpisode], micro_batch_tokens: int = 4096) -> list[list[float]]:
    """The actor's log-probs of each episode's action tokens under the current weights, without gradients (one
    shadow forward per micro-batch, no values read): what self-navigating restates guided episodes' old
    log-probs with."""
    policy.model.eval()
    dtype = next(policy.model.parameters()).dtype
    out: dict[int, list[float]] = {}
    for chunk in micro_batches(episodes, micro_batch_tokens):
        logp, _, _ = forward_shadow(policy, collate_shadow(chunk, policy.pad_id, dtype, policy.device),
                                    with_values=False)
        flat, k = logp.float().cpu().tolist(), 0
        for e in chunk:  # the batch's action tokens are in episode order
            out[id(e)] = flat[k:k + len(e.target)]
            k += len(e.target)
    return [out[id(e)] for e in episodes]


@torch.no_grad()
def episode_values(policy, episodes: list[ShadowEpisode], micro_batch_tokens: int = 4096) -> list[list[float]]:
    """V(s_0), ..., V(s_n) of each episode under the current weights, without gradients (one shadow forward per
    micro-batch): the value function Self-AC gives for free, e.g. for a search scorer or the viewer."""
    policy.model.eval()
    out: dict[int, list[float]] = {}
    for chunk in micro_batches(episodes, micro_batch_tokens):
        _, _, _, values = episode_forward(policy, chunk)
        for b, e in enumerate(chunk):
            out[id(e)] = values[b, : len(e.cp_end)].float().cpu().tolist()
    return [out[id(e)] for e in episodes]
