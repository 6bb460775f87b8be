"""The shadow prompt: a whole episode, actor and critic, in ONE sequence (Self-AC, seed 001).

The sequence is the episode as the model saw it, with a *critic prompt* cp_k inserted after each state s_k —
right before the action a_k taken in it — and one more after the last observation (n + 1 for n actions)::

    [system, few-shot, o_0, assistant opening] cp_0 a_0 [o_1, opening] cp_1 a_1 ... a_{n-1} [o_n, opening] cp_n

The critic prompts are *shadows*: invisible to every real token.

- positions: real tokens keep the positions they have in the episode without critic prompts; cp_k's tokens
  continue from the last token of s_k, and a_k starts again at the position cp_k started at (the seed's
  ``pos = [..., 9, 10, 11, ..., 28, 10, ...]``);
- attention (a 4-D mask): a real token sees the real tokens before it; a critic-prompt token sees the real tokens
  before it (the prefix up to its state) and the earlier tokens of its own critic prompt — nothing else.

So every actor log-prob equals the one computed on the episode without critic prompts, and V(s_k) — the value
head at cp_k's last token — equals a separate forward of "prefix up to s_k + cp_k" (tests/test_self_ac.py checks
both to fp32 tolerance). When an episode's prompts do not extend each other (a history window, a context
template that rewrites the past), each chain of extending prompts is a *segment*: segments are packed into the
same sequence, each with its own positions from 0, and never see each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from selfevolve.agent.prompt import appended_turn_ids
from selfevolve.errors import ConfigError
from selfevolve.models.decode_attention import NAME as DECODE_ATTENTION
from selfevolve.types import Trajectory

CRITIC_PROMPT = "Critic Mode! Evaluate the current state with a single expressive word:"


def critic_prompt_ids(tokenizer, eot_id: int, text: str = CRITIC_PROMPT) -> list[int]:
    """cp in the model's own chat format: close the open assistant turn, a system message ``text``, open the
    assistant's turn again (ChatML: ``<|im_end|>\\n<|im_start|>system\\n{text}<|im_end|>\\n<|im_start|>assistant\\n``)."""
    delta = appended_turn_ids(tokenizer, {"role": "system", "content": text})
    if delta is None:
        raise ConfigError("algo.name=self_ac: this model's chat template does not render a system message after "
                          "an assistant turn by appending, so the critic prompt cannot be built")
    return [eot_id, *delta]


# attention implementations that take a custom 4-D mask (decode_attention's hands every multi-query call to SDPA
# and applies the mask to a single query)
MASK_ATTENTION = ("eager", "sdpa", DECODE_ATTENTION)


def check_shadow_attention(policy) -> None:
    """The shadow prompt needs an attention kernel that applies a custom 4-D mask; refuse the others (FlashAttention
    takes no arbitrary mask, flex attention needs a BlockMask) instead of silently letting critic prompts leak."""
    model = policy.model.get_base_model() if hasattr(policy.model, "get_base_model") else policy.model
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl not in MASK_ATTENTION:
        raise ConfigError(f"algo.name=self_ac needs an attention implementation that takes a custom 4-D mask "
                          f"({', '.join(MASK_ATTENTION)}); this model uses {impl!r}")


@dataclass
class ShadowEpisode:
    """One episode as a shadow-prompt sequence, with its episode vectors (seed: a_start/a_end, cp_start/cp_end)."""

    ids: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    segment: list[int] = field(default_factory=list)  # per token: which chain of extending prompts
    block: list[int] = field(default_factory=list)  # per token: 0 for real tokens, k + 1 inside cp_k
    pred: list[int] = field(default_factory=list)  # per action token: index of the token that predicts it
    target: list[int] = field(default_factory=list)  # per action token: its own index
    token_turn: list[int] = field(default_factory=list)  # per action token: its turn k
    old_logprobs: list[float] = field(default_factory=list)  # per action token
    a_start: list[int] = field(default_factory=list)  # per turn: first action token (inclusive)
    a_end: list[int] = field(default_factory=list)  # per turn: last action token (inclusive; a_start - 1: empty)
    cp_start: list[int] = field(default_factory=list)  # per critic prompt (n, or n + 1 with the final state)
    cp_end: list[int] = field(default_factory=list)  # per critic prompt: its last token, where V is read
    rewards: list[float] = field(default_factory=list)  # per turn: r_k from s_k to s_{k+1}
    label_credit: list[float] = field(default_factory=list)  # per turn: α·Σ_{j≥k} r̃_j of step labels, or empty
    traj_index: int = 0
    values: list[float] = field(default_factory=list)  # V(s_0..s_n) from the update's first forward
    guided: bool = False  # sampled with an insight block that its prompts no longer hold (self-navigating)
    clip_high: float | None = None  # its actor's upper clip ε (self-navigating's boost); None: algo.clip_high

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def turns(self) -> int:
        return len(self.rewards)

    def _add(self, ids, positions, segment: int, block: int = 0) -> None:
        self.ids += list(ids)
        self.positions += list(positions)
        self.segment += [segment] * len(ids)
        self.block += [block] * len(ids)


def build_shadow_episode(traj: Trajectory, cp_ids: list[int], final_ids: list[int] | None = None,
                         rewards: list[float] | None = None, traj_index: int = 0) -> ShadowEpisode:
    """The shadow sequence of ``traj``.

    ``final_ids``: the prompt of the last state s_n (the last step's prompt + its reply + the final observation),
    which gets cp_n; None leaves it out (its value is 0 by definition: it only trains the head towards that).
    ``rewards``: per turn (default: the environment's step rewards; the trainer passes shaped ones).
    """
    ep = ShadowEpisode(rewards=list(rewards if rewards is not None else [s.reward for s in traj.steps]),
                       traj_index=traj_index, guided=traj.guided)
    real: list[int] | None = None  # the current segment's real ids (the episode as the model saw it)
    seg = -1
    last_real = -1  # sequence index of the last real token

    def add_state(prompt: list[int]) -> None:
        nonlocal real, seg, last_real
        if real is not None and len(prompt) >= len(real) and prompt[: len(real)] == real:
            extra = prompt[len(real):]
        else:
            seg, real, extra = seg + 1, [], list(prompt)
        ep._add(extra, range(len(real), len(real) + len(extra)), seg)
        real = real + list(extra)
        last_real = len(ep.ids) - 1

    def add_critic(k: int) -> None:
        ep.cp_start.append(len(ep.ids))
        ep._add(cp_ids, range(len(real), len(real) + len(cp_ids)), seg, block=k + 1)
        ep.cp_end.append(len(ep.ids) - 1)

    for k, step in enumerate(traj.steps):
        add_state(train_prompt(step))
        add_critic(k)
        ep.a_start.append(len(ep.ids))
        for j, tok in enumerate(step.action_ids):
            ep.pred.append(last_real)
            ep.target.append(len(ep.ids))
            ep.token_turn.append(k)
            ep._add([tok], [len(real)], seg)
            real.append(tok)
            last_real = len(ep.ids) - 1
        ep.old_logprobs += list(step.logprobs)
        ep.a_end.append(len(ep.ids) - 1)
    if final_ids is not None and traj.steps:
        add_state(final_ids)
        add_critic(len(traj.steps))
    return ep


def train_prompt(step) -> list[int]:
    """The prompt a step is trained on: without the insight block of an experience-guided step (self-navigating's
    stripping), else the one it was sampled with."""
    return step.train_prompt_ids if step.train_prompt_ids is not None else step.prompt_ids


def final_state_ids(traj: Trajectory, builder) -> list[int] | None:
    """The prompt of the state after the last action: its prompt + reply + the final observation in the chat
    template (None when the template cannot append a turn, or the episode is empty)."""
    if not traj.steps:
        return None
    last = traj.steps[-1]
    return builder.extend(train_prompt(last), last.action_ids, last.observation)


def shadow_mask(segment: torch.Tensor, block: torch.Tensor, valid: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The 4-D additive attention mask [B, 1, L, L] of interleaved shadow sequences (0 = may attend, dtype's
    min = hidden): what the picture in docs/self_ac.md shows, and what a single forward of the interleaved
    sequence would use.

    Query i may attend key j when j ≤ i, both are in the same segment, and j is a real token or a token of i's
    own critic prompt. Padding queries attend only to themselves (a fully masked row would give NaN in SDPA).
    """
    L = segment.shape[1]
    idx = torch.arange(L, device=segment.device)
    causal = idx[None, :] <= idx[:, None]  # [L(query), L(key)]
    same_segment = segment[:, :, None] == segment[:, None, :]
    visible = (block[:, None, :] == 0) | (block[:, None, :] == block[:, :, None])
    allowed = causal[None] & same_segment & visible & valid[:, None, :].bool() & valid[:, :, None].bool()
    allowed = allowed | torch.eye(L, dtype=torch.bool, device=segment.device)[None]
    return _additive(allowed, dtype)


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, Q, K] booleans -> the [B, 1, Q, K] additive mask attention kernels take (eager adds it to the scores)."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


def _state_end(ep: ShadowEpisode, k: int) -> int:
    """Index of the last real token before critic prompt k: the end of the state s_k it evaluates."""
    j = ep.cp_start[k] - 1
    while ep.block[j] != 0:
        j -= 1
    return j


def _pad(rows: list[list[int]], fill: int) -> torch.Tensor:
    width = max((len(r) for r in rows), default=0)
    return torch.tensor([list(r) + [fill] * (width - len(r)) for r in rows], dtype=torch.long).reshape(len(rows), width)


def collate_shadow(episodes: list[ShadowEpisode], pad_id: int, dtype: torch.dtype, device=None) -> dict:
    """A batch of shadow episodes as the two stages of one forward (see :func:`forward_shadow`).

    The interleaved sequence is split, without changing any token's position or visibility: stage 1 holds the
    real tokens in order (plain causal attention, the fast kernel), stage 2 the critic-prompt tokens, which
    attend to stage 1's cached keys up to their state and to their own prompt (``cp_mask`` [B, 1, C, Lr + C]).
    Coming after every real token, no critic prompt can be seen by one. Each token is still encoded once.

    Flat per-action-token vectors index stage 1 (``pred``/``target``: ``b·Lr + j``) and the [B, K] turn slots
    (``token_slot``: ``b·K + k``); ``value_idx`` [B, K] indexes stage 2 (the last token of each critic prompt).
    """
    B = len(episodes)
    K = max(max(e.turns, len(e.cp_end)) for e in episodes) or 1
    real = [[j for j, blk in enumerate(e.block) if blk == 0] for e in episodes]
    crit = [[j for j, blk in enumerate(e.block) if blk > 0] for e in episodes]
    new = [{j: i for i, j in enumerate(r)} for r in real]
    new_cp = [{j: i for i, j in enumerate(c)} for c in crit]
    real_ids = _pad([[e.ids[j] for j in r] for e, r in zip(episodes, real)], pad_id)
    real_pos = _pad([[e.positions[j] for j in r] for e, r in zip(episodes, real)], 0)
    real_seg = _pad([[e.segment[j] for j in r] for e, r in zip(episodes, real)], -1)
    Lr = real_ids.shape[1]
    # each critic-prompt token: its state (the last real token before its prompt, in stage-1 index), its block
    ends = [[new[b][_state_end(e, k)] for k in range(len(e.cp_start))] for b, e in enumerate(episodes)]
    state = [[ends[b][e.block[j] - 1] for j in c] for b, (e, c) in enumerate(zip(episodes, crit))]
    cp_ids = _pad([[e.ids[j] for j in c] for e, c in zip(episodes, crit)], pad_id)
    cp_pos = _pad([[e.positions[j] for j in c] for e, c in zip(episodes, crit)], 0)
    cp_seg = _pad([[e.segment[j] for j in c] for e, c in zip(episodes, crit)], -2)
    cp_blk = _pad([[e.block[j] for j in c] for e, c in zip(episodes, crit)], -1)
    cp_state = _pad(state, -1)
    C = cp_ids.shape[1]

    rewards = torch.zeros((B, K), dtype=torch.float32)
    label_credit = torch.zeros((B, K), dtype=torch.float32)
    turn_mask = torch.zeros((B, K), dtype=torch.bool)
    value_mask = torch.zeros((B, K), dtype=torch.bool)
    value_idx = torch.zeros((B, K), dtype=torch.long)
    pred, target, slot, old, clip = [], [], [], [], []
    for b, e in enumerate(episodes):
        rewards[b, : e.turns] = torch.tensor(e.rewards, dtype=torch.float32)
        if e.label_credit:
            label_credit[b, : e.turns] = torch.tensor(e.label_credit, dtype=torch.float32)
        turn_mask[b, : e.turns] = True
        value_mask[b, : len(e.cp_end)] = True
        value_idx[b, : len(e.cp_end)] = torch.tensor([b * C + new_cp[b][j] for j in e.cp_end], dtype=torch.long)
        pred += [b * Lr + new[b][j] for j in e.pred]
        target += [b * Lr + new[b][j] for j in e.target]
        slot += [b * K + k for k in e.token_turn]
        old += e.old_logprobs
        clip += [math.nan if e.clip_high is None else e.clip_high] * len(e.target)

    real_valid = real_seg >= 0
    # stage 1: plain causal unless an episode packs several segments, which must not see each other
    real_mask = None
    if (real_seg > 0).any():
        r = torch.arange(Lr)
        allowed = (r[None, :] <= r[:, None])[None] & (real_seg[:, :, None] == real_seg[:, None, :])
        real_mask = _additive(allowed | torch.eye(Lr, dtype=torch.bool)[None], dtype)
    # stage 2: a critic-prompt token sees the real tokens of its segment up to its state, and its own prompt
    r, c = torch.arange(Lr), torch.arange(C)
    sees_real = ((r[None, None, :] <= cp_state[:, :, None]) & (real_seg[:, None, :] == cp_seg[:, :, None])
                 & real_valid[:, None, :])
    sees_own = (c[None, None, :] <= c[None, :, None]) & (cp_blk[:, None, :] == cp_blk[:, :, None])
    sees_own = sees_own | torch.eye(C, dtype=torch.bool)[None]  # padding queries: themselves (no NaN)
    out = {
        "real_ids": real_ids, "real_pos": real_pos, "cp_ids": cp_ids, "cp_pos": cp_pos,
        "cp_mask": _additive(torch.cat([sees_real, sees_own], dim=2), dtype),
        "rewards": rewards, "turn_mask": turn_mask, "value_mask": value_mask, "value_idx": value_idx,
        "pred": torch.tensor(pred, dtype=torch.long), "target": torch.tensor(target, dtype=torch.long),
        "token_slot": torch.tensor(slot, dtype=torch.long), "old_logprobs": torch.tensor(old, dtype=torch.float32),
        "guided": torch.tensor([e.guided for e in episodes for _ in e.target], dtype=torch.bool),  # per action token
    }
    if real_mask is not None:
        out["real_mask"] = real_mask
    if any(e.clip_high is not None for e in episodes):  # per action token; NaN: the run's algo.clip_high
        out["clip_high"] = torch.tensor(clip, dtype=torch.float32)
    if any(e.label_credit for e in episodes):  # step attribution (reward.attribution): added to the actor's A_k
        out["label_credit"] = label_credit
    out = {k: v.to(device) for k, v in out.items()} if device is not None else out
    out["prefix_len"] = _shared_prefix(real_ids, real_seg, [new[b][e.pred[0]] for b, e in enumerate(episodes) if e.pred])
    return out


def forward_shadow(policy, batch: dict, with_entropy: bool = False, with_values: bool = True):
    """One forward of a batch of shadow-prompt episodes (:func:`collate_shadow`) under ``policy``:
    ``(logprobs [M], entropy [M] or None, values [B, K])``.

    Every token is encoded once, in two stages of the same pass: the episode's real tokens (causal attention;
    a 4-D mask only when an episode packs several segments), then all critic prompts at once, attending to
    the real tokens' cached keys through the 4-D ``cp_mask`` (their state's prefix and themselves). So the
    actor log-probs (one per action token, read from the hidden state of the token before it) are those of
    the episode without critic prompts, and ``values[b, k]`` — the value head at the last token of critic
    prompt k — is V(s_k) (0 where ``value_mask`` is False, or everywhere without a head or with
    ``with_values=False``, which skips stage 2). Gradients reach the real tokens' computation through the
    cached keys and values.
    """
    ids, vmask = batch["real_ids"], batch["value_mask"]
    read_values = with_values and policy.value_head is not None and batch["cp_ids"].shape[1] > 0
    side = (batch["cp_ids"], batch["cp_pos"], batch["cp_mask"]) if read_values else None
    hidden, cp_hidden = policy.encode_with_side_tokens(ids, batch["real_pos"], batch.get("real_mask"),
                                                       batch.get("prefix_len", 0), side)
    B, L, H = hidden.shape
    if read_values:
        flat_cp = cp_hidden.reshape(-1, H)
        values = policy.value_head(flat_cp[batch["value_idx"].flatten()]).reshape(vmask.shape) * vmask
    else:
        values = torch.zeros(vmask.shape, device=ids.device)
    flat = hidden.reshape(B * L, H)
    _, head = policy.body_and_head()
    logp, entropy = policy.token_logprobs(head, flat[batch["pred"]], ids.flatten()[batch["target"]], with_entropy)
    return logp, entropy, values


def _shared_prefix(real_ids: torch.Tensor, real_seg: torch.Tensor, first_pred: list[int]) -> int:
    """Length of the real tokens every episode starts with (system prompt, few-shot turns), stopping before the
    first action's predictor: encoded once for the whole batch. 0 when not worth it."""
    if real_ids.shape[0] < 2 or not first_pred:
        return 0
    same = (real_ids == real_ids[:1]).all(0) & (real_seg == 0).all(0)
    P = int(same.long().cumprod(0).sum())
    P = min(P, min(first_pred))
    return P if P >= 16 else 0


def critic_rows(ep: ShadowEpisode) -> list[tuple[list[int], list[int]]]:
    """The reference computation the shadow prompt replaces: for each critic prompt k, the plain sequence
    "prefix up to s_k + cp_k" as (ids, positions) — one forward each (``algo.self_ac.forward=per_turn``); its
    last ``len(cp)`` tokens are the critic prompt."""
    out = []
    for s, e in zip(ep.cp_start, ep.cp_end):
        keep = [j for j in range(e + 1)
                if ep.segment[j] == ep.segment[s] and (ep.block[j] == 0 or ep.block[j] == ep.block[s])]
        out.append(([ep.ids[j] for j in keep], [ep.positions[j] for j in keep]))
    return out


def actor_row(ep: ShadowEpisode) -> ShadowEpisode:
    """The same episode without its critic prompts (the actor's own view; for checks and the per-turn path)."""
    keep = [j for j in range(len(ep)) if ep.block[j] == 0]
    new_index = {j: i for i, j in enumerate(keep)}
    out = ShadowEpisode(rewards=list(ep.rewards), traj_index=ep.traj_index, old_logprobs=list(ep.old_logprobs),
                        token_turn=list(ep.token_turn))
    out._add([ep.ids[j] for j in keep], [ep.positions[j] for j in keep], 0)
    out.segment = [ep.segment[j] for j in keep]
    out.pred = [new_index[j] for j in ep.pred]
    out.target = [new_index[j] for j in ep.target]
    return out
