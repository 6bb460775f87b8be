"""Batched generation that returns what RL needs: tokens, their log-probs and per-token uncertainty statistics.

One call generates for many prompts at once (left padding, one shared key/value cache). For every sampled
token it records, from the full next-token distribution, the log-prob of the sampled token under the sampling
distribution (logits / temperature, the "old" policy of PPO), and the entropy, top-1 and top-2 probabilities of
the model's own distribution (temperature 1) — the raw statistics of SELAUR's uncertainty rewards. They come
free with the logits, so no second forward pass is ever needed for them.

A hand-written decoding loop rather than ``model.generate``: we need per-token statistics over the full
vocabulary, a private RNG (resumable runs), per-row stop, a prompt prefix shared by all rows that is encoded
once (``prefix_ids``: with few-shot examples most of every prompt is the same text), and caches kept from one
turn of a conversation to the next (``state``). On this CPU the rollout is ~90% prompt encoding, so not
re-encoding what the model has already seen is where the speed comes from.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfevolve.models.compat import cache_kwargs
from selfevolve.models.kv_cache import GrowingCache
from selfevolve.models.sampler import Generation
from selfevolve.models.window_masks import layer_masks


def _token_stats(logits: torch.Tensor, temperature: float, masked: bool = False):
    """Sampling log-probs (at ``temperature``) and uncertainty statistics (at temperature 1) of ``logits`` [B, V].
    ``masked``: some logits are −∞ (constrained decoding), whose 0 · −∞ terms of the entropy count as 0."""
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    plogp = p * logp
    entropy = -(plogp.nan_to_num(0.0) if masked else plogp).sum(-1)
    top2 = p.topk(2, dim=-1).values
    sample_logp = logp if temperature == 1.0 else torch.log_softmax(logits / max(temperature, 1e-6), dim=-1)
    return sample_logp, entropy, top2[:, 0], top2[:, 1]


def _sample(logp: torch.Tensor, generator, alive: torch.Tensor | None = None) -> torch.Tensor:
    """One draw per row of the distribution ``exp(logp)`` [B, V].

    One generator for the batch: by inverting the CDF (exact; ~10x faster than torch.multinomial over a 49k
    vocabulary).

    A list with one generator per row (per-episode seeding, ``rollout/seeding.py``): by the exponential race,
    ``argmax_i p_i / E_i`` with ``E_i ~ Exp(1)`` drawn from the row's own stream — the same distribution, but
    the winner depends on the probabilities only through a margin of order 1. Float noise in the logits (a batch
    of another size runs other BLAS kernels: ~1e-5 here) then changes a sample with a probability of ~1e-5,
    where the inverse CDF, whose 49k boundaries lie ~2e-5 apart for a flat distribution, changed about one
    token in a hundred (measured on the tiny model). Only ``alive`` rows draw, so a row's stream advances
    with the tokens it samples, whatever else is in the batch. Costs ~V random numbers per row and token.
    """
    if isinstance(generator, (list, tuple)):
        if len(generator) != logp.shape[0]:
            raise ValueError(f"{len(generator)} generators for {logp.shape[0]} rows")
        live = alive.tolist() if alive is not None else [True] * len(generator)
        u = torch.full_like(logp, 0.5)  # rows that stopped draw nothing (their token is replaced)
        for i, g in enumerate(generator):
            if live[i]:
                u[i] = _uniform(logp.shape[-1], g, logp)
        # p / E with E = -log(u): u = 0 gives E = inf and a score of 0; a token of probability 0 never wins
        return (logp.exp() / -torch.log(u)).argmax(-1)
    cdf = logp.exp().cumsum(-1)
    u = _uniform((logp.shape[0], 1), generator, cdf) * cdf[:, -1:]
    # right=True: u = 0 must not select a leading token whose probability underflowed to 0 (log-prob -inf).
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=logp.shape[-1] - 1)


@dataclass
class KVState:
    """Key/value caches of a batch of conversations, kept from one turn to the next.

    ``seqs[i]`` are the real token ids row i has in the cache (padding is masked out by ``mask``), and
    ``next_pos[i]`` the position its next token takes. When a row's next prompt extends ``seqs[i]`` — the
    full-history chat does — only the new tokens (the end of the reply and the new observation) are encoded.
    """

    cache: GrowingCache
    mask: torch.Tensor  # [B, S] 1 = real token
    seqs: list[list[int]]
    next_pos: torch.Tensor  # [B]

    def select(self, rows: list[int]) -> "KVState":
        """Keep only ``rows`` (episodes that finished leave the batch)."""
        idx = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        self.cache.batch_select_indices(idx)
        return KVState(self.cache, self.mask[idx], [self.seqs[i] for i in rows], self.next_pos[idx])

    def gather(self, rows: list[int]) -> "KVState":
        """A new state holding ``rows`` of this one, in that order, repeats allowed (a search node's M children
        all start from its cache). Unlike :meth:`select` this copies: ``self`` stays usable, so a candidate
        can be explored (lookahead) and later continued from the same cache."""
        idx = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        return KVState(self.cache.rows(idx), self.mask[idx], [list(self.seqs[i]) for i in rows], self.next_pos[idx])

    def extends(self, prompts: list[list[int]]) -> bool:
        return len(prompts) == len(self.seqs) and all(
            len(p) > len(s) and p[: len(s)] == s for p, s in zip(prompts, self.seqs)
        )


def _uniform(shape, generator: torch.Generator | None, like: torch.Tensor) -> torch.Tensor:
    """U(0, 1) draws from ``generator``'s own stream, on ``like``'s device and dtype. A generator on another device
    than the model's (a CPU ``torch.Generator()`` driving a GPU model) draws where it lives and the draws are
    moved: for one dtype, the same numbers whatever the model's device. The trainer's generators live on the
    model's device."""
    device = generator.device if generator is not None else like.device
    return torch.rand(shape, generator=generator, device=device, dtype=like.dtype).to(like.device)


def _pad_left(chunks: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    L = max(len(c) for c in chunks)
    ids = [[pad_id] * (L - len(c)) + list(c) for c in chunks]
    mask = [[0] * (L - len(c)) + [1] * len(c) for c in chunks]
    return torch.tensor(ids, device=device), torch.tensor(mask, device=device)


def _inputs(module, prompts, state, prefix_ids, suffix, pad_id, **forward_kwargs):
    """The cache to encode ``prompt + suffix`` into, and the left-padded new tokens with their mask and positions:
    ``(cache, ids, mask, positions, base_pos, lengths, tokens encoded so far)``.

    Over ``state`` (the caller has checked that every prompt extends what its row holds: only the new tokens are
    encoded); with ``state`` None, a fresh cache, with ``prefix_ids`` (a prefix of every prompt) encoded once by
    ``module`` and repeated for all rows (when there is more than one).
    Padding sits between what is cached and each row's new tokens; it is masked out and skipped by the position
    ids, so every row sees exactly its own prompt. ``lengths``: each row's new prompt tokens (suffix excluded).
    """
    device = next(module.parameters()).device
    B, encoded = len(prompts), 0
    if state is not None:
        cache, old_mask, base_pos = state.cache, state.mask, state.next_pos
        chunks = [list(p[len(q):]) for p, q in zip(prompts, state.seqs)]
    else:
        cache = GrowingCache()
        P = len(prefix_ids) if prefix_ids and B > 1 else 0  # one row: sharing saves nothing, costs a forward
        if P:
            if any(p[:P] != list(prefix_ids) or len(p) <= P for p in prompts):
                raise ValueError("every prompt must start with prefix_ids and extend beyond it")
            module(input_ids=torch.tensor([list(prefix_ids)], device=device), **cache_kwargs(module, cache),
                   use_cache=True, **forward_kwargs)
            cache.batch_repeat_interleave(B)
            encoded += P
        old_mask = torch.ones((B, P), dtype=torch.long, device=device)
        base_pos = torch.full((B,), P, dtype=torch.long, device=device)
        chunks = [list(p[P:]) for p in prompts]
    ids, new_mask = _pad_left([c + list(suffix) for c in chunks], pad_id, device)
    encoded += int(new_mask.sum())
    positions = base_pos[:, None] + (new_mask.cumsum(-1) - 1).clamp(min=0)
    mask = torch.cat([old_mask, new_mask], dim=1)
    lengths = torch.tensor([len(c) for c in chunks], device=device)
    return cache, ids, mask, positions, base_pos, lengths, encoded


@torch.no_grad()
def generate(
    model,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    stop_ids: set[int] | list[int],
    pad_id: int,
    temperature: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | list[torch.Generator] | None = None,
    prefix_ids: list[int] | None = None,
    state: KVState | None = None,
    dedupe: bool = True,
    constraint=None,
) -> Generation:
    """Generate a continuation for each prompt.

    Three savings avoid re-encoding what the model has already seen, with results identical to encoding every
    prompt in full (same positions, same attention — tested):

    - ``prefix_ids``: ids every prompt starts with (system prompt, few-shot turns). Encoded once, shared by all
      rows.
    - ``state``: the :class:`KVState` returned by the previous turn's call (``Generation.state``), restricted to
      the same rows. Used when every prompt extends what its row already has in the cache; otherwise ignored.
    - ``dedupe``: a prompt that several rows share is encoded once and its cache copied to those rows: a group's
      first turn (every rollout of a task starts from the same observation), and with a ``state`` the later turns
      of rollouts that have made the same moves so far (the same whole prompt means the same cached history).

    ``generator``: one for the batch, or one per prompt (each row then samples from its own stream).
    ``constraint``: a :class:`~selfevolve.models.constrained.Constrained` with one grammar per prompt: every
    token a row's grammar forbids is masked out before the row samples (its log-probs and statistics are then
    those of the masked distribution).
    """
    out = Generation()
    if not prompts:
        return out
    device = next(model.parameters()).device
    stop = torch.tensor(sorted(set(stop_ids)), device=device)
    B = len(prompts)
    fresh = state is None or not state.extends(prompts)
    encode, row_of, every_row = prompts, list(range(B)), None
    if dedupe:
        slot: dict[tuple[int, ...], int] = {}
        row_of = [slot.setdefault(tuple(p), len(slot)) for p in prompts]
        if len(slot) < B:
            encode = [list(k) for k in slot]
            if not fresh:
                # Rows with the same whole prompt have the same history, hence the same cache (rollouts of a task
                # that made the same moves so far): the prefill runs on a copy of one row of each, and only its
                # new positions are copied to every row's cache below (not the whole cache, twice).
                every_row, state = state, state.gather([row_of.index(k) for k in range(len(slot))])
    # logits_to_keep=1: only the last position's logits are needed (the full-vocabulary head is ~20% of a
    # prefill otherwise).
    cache, ids, mask, positions, base_pos, lengths, encoded = _inputs(
        model, encode, None if fresh else state, prefix_ids, [], pad_id, logits_to_keep=1)
    out.prompt_tokens += encoded

    # The last position by index, not ``logits_to_keep=1``: the slice [:, -1:] of a longer input is a strided
    # view, for which torch's matmul runs the head as one matrix-vector product per row (a 49k x 576 weight read
    # B times: 157 ms against 26 ms for 32 rows on a 2-core CPU); indexing copies the B hidden states into one
    # matrix product.
    last = torch.tensor([ids.shape[1] - 1], device=device)
    logits = model(
        input_ids=ids, attention_mask=layer_masks(model.config, mask, ids.shape[1]), position_ids=positions,
        **cache_kwargs(model, cache), use_cache=True, logits_to_keep=last,
    ).logits[:, -1, :]
    if encode is not prompts:  # copy each distinct prompt's cache and logits to the rows that share it
        idx = torch.tensor(row_of, device=device)
        if every_row is None:
            cache.batch_select_indices(idx)
        else:
            every_row.cache.extend_rows(cache, idx)
            cache = every_row.cache
        logits, mask, base_pos, lengths = logits[idx], mask[idx], base_pos[idx], lengths[idx]
    with_cache = cache_kwargs(model, cache)  # the same cache object, grown in place, through every step below
    next_pos = base_pos + lengths
    done = torch.zeros(B, dtype=torch.bool, device=device)
    cols: dict[str, list[torch.Tensor]] = {k: [] for k in ("ids", "logprobs", "entropy", "top1", "top2", "alive")}
    fed = 0  # decode iterations whose tokens were fed back into the cache
    for step in range(max_new_tokens):
        if constraint is not None:
            logits = constraint.mask_logits(logits, ~done)
        sample_logp, ent, t1, t2 = _token_stats(logits, temperature, masked=constraint is not None)
        if greedy:
            tok = sample_logp.argmax(-1)
        else:
            tok = _sample(sample_logp, generator, ~done)
        alive = ~done
        tok = torch.where(alive, tok, torch.full_like(tok, pad_id))
        cols["ids"].append(tok)
        cols["logprobs"].append(sample_logp.gather(-1, tok[:, None]).squeeze(-1))
        cols["entropy"].append(ent)
        cols["top1"].append(t1)
        cols["top2"].append(t2)
        cols["alive"].append(alive)
        if constraint is not None:
            constraint.advance(tok.tolist(), alive.tolist())
        done = done | torch.isin(tok, stop)
        if bool(done.all()) or step == max_new_tokens - 1:
            break  # the last sampled tokens are not fed: the next turn's prompt encodes them
        # Feed the sampled tokens; rows that had already stopped get a masked filler.
        mask = torch.cat([mask, alive.long()[:, None]], dim=1)
        logits = model(
            input_ids=tok[:, None],
            attention_mask=layer_masks(model.config, mask, 1),
            position_ids=next_pos[:, None],
            **with_cache,
            use_cache=True,
        ).logits[:, -1, :]
        next_pos = next_pos + alive.long()
        fed += 1

    stacked = {k: torch.stack(v, dim=1).cpu() for k, v in cols.items()}
    alive_cols = stacked.pop("alive")
    seqs = [list(p) for p in prompts]
    for i in range(B):
        n = int(alive_cols[i].sum())
        seqs[i] += stacked["ids"][i, : min(n, fed)].tolist()  # a row's tokens are contiguous until it stops
        out.ids.append(stacked["ids"][i, :n].tolist())
        out.logprobs.append(stacked["logprobs"][i, :n].tolist())
        out.entropy.append(stacked["entropy"][i, :n].tolist())
        out.top1.append(stacked["top1"][i, :n].tolist())
        out.top2.append(stacked["top2"][i, :n].tolist())
        out.new_tokens += n
    out.state = KVState(cache, mask, seqs, next_pos)
    return out


@torch.no_grad()
def extend_cache(
    body,
    prompts: list[list[int]],
    suffix: list[int] = (),
    state: KVState | None = None,
    prefix_ids: list[int] | None = None,
    need_hidden: bool = False,
) -> tuple[torch.Tensor | None, KVState, int]:
    """Encode ``prompt + suffix`` for each prompt into a key/value cache, then crop the suffix and each prompt's
    last token off again: ``(hidden of each row's last token, state, tokens encoded)``.

    The returned state holds ``prompt[:-1]`` for every row — exactly what :func:`generate` needs to continue
    (it encodes the last prompt token and goes on), so a search node's prompt can be encoded once and its
    cache copied to its M candidates (``KVState.gather``) instead of being encoded M times. ``suffix`` (e.g.
    Self-AC's critic prompt) is seen by the returned hidden states but leaves no trace in the cache.

    With ``state`` (caches whose rows each prompt extends) only the new tokens are encoded; else
    ``prefix_ids`` (a prefix of every prompt, e.g. the few-shot header) is encoded once for all rows. Rows are
    left-padded, which puts the suffix and each prompt's last token in the final columns of every row: one crop
    removes them. When every row already holds ``prompt[:-1]``, there is no suffix and ``need_hidden`` is
    False, nothing is encoded (and the hidden states returned are None).
    """
    if state is not None and not state.extends(prompts):
        state = None  # a fresh cache
    if state is not None:
        if not suffix and not need_hidden and all(len(p) - len(q) == 1 for p, q in zip(prompts, state.seqs)):
            return None, state, 0
    cache, ids, mask, positions, base_pos, lengths, encoded = _inputs(body, prompts, state, prefix_ids, suffix, 0)
    hidden = body(input_ids=ids, attention_mask=layer_masks(body.config, mask, ids.shape[1]), position_ids=positions,
                  **cache_kwargs(body, cache), use_cache=True).last_hidden_state[:, -1]
    drop = len(suffix) + 1
    cache.crop(-drop)  # remove that many trailing columns
    return hidden, KVState(cache, mask[:, :-drop], [list(p[:-1]) for p in prompts], base_pos + lengths - 1), encoded


def read_values(
    body,
    value_head,
    prompts: list[list[int]],
    suffix: list[int],
    state: KVState | None = None,
) -> tuple[list[float], KVState, int]:
    """The value head on the last token of ``prompt + suffix`` for each prompt (``suffix``: Self-AC's critic
    prompt, or nothing for PPO's value at the last prompt token), a cache that the next generation of the same
    prompts continues from exactly as if the values had never been read (see :func:`extend_cache`), and the
    number of tokens encoded."""
    hidden, new_state, encoded = extend_cache(body, prompts, suffix, state, need_hidden=True)
    return value_head(hidden).tolist(), new_state, encoded
