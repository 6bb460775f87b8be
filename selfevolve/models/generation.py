"""Batched generation that returns what RL needs: tokens, their log-probs and per-token uncertainty statistics.

One call generates for many prompts at once (left padding, one shared key/value cache). For every sampled
token it records, from the full next-token distribution, the log-prob of the sampled token under the sampling
distribution (logits / temperature, the "old" policy of PPO), and the entropy, top-1 and top-2 probabilities of
the model's own distribution (temperature 1) — the raw statistics of SELAUR's uncertainty rewards. They come
free with the logits, so no second forward pass is ever needed for them.

A hand-written decoding loop rather than ``model.generate``: we need per-token statistics over the full
vocabulary, a private RNG (resumable runs), per-row stop, and a prompt prefix shared by all rows that is
encoded once (``prefix_ids``): with few-shot examples most of every prompt is the same text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache


@dataclass
class Generation:
    """Per prompt: generated ids (up to and including the stop token) and aligned per-token statistics."""

    ids: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    entropy: list[list[float]] = field(default_factory=list)
    top1: list[list[float]] = field(default_factory=list)
    top2: list[list[float]] = field(default_factory=list)
    prompt_tokens: int = 0  # tokens encoded (prefill), for throughput figures
    new_tokens: int = 0


def _token_stats(logits: torch.Tensor, temperature: float):
    """Sampling log-probs (at ``temperature``) and uncertainty statistics (at temperature 1) of ``logits`` [B, V]."""
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    entropy = -(p * logp).sum(-1)
    top2 = p.topk(2, dim=-1).values
    sample_logp = logp if temperature == 1.0 else torch.log_softmax(logits / max(temperature, 1e-6), dim=-1)
    return sample_logp, entropy, top2[:, 0], top2[:, 1]


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
    generator: torch.Generator | None = None,
    prefix_ids: list[int] | None = None,
) -> Generation:
    """Generate a continuation for each prompt.

    ``prefix_ids``: ids that every prompt starts with (checked). They are encoded once and their key/value cache
    is shared by all rows; each row then encodes only its own suffix. The result is identical to encoding the
    full prompts (same positions, same attention), just cheaper.
    """
    out = Generation()
    if not prompts:
        return out
    device = next(model.parameters()).device
    stop = torch.tensor(sorted(set(stop_ids)), device=device)
    B = len(prompts)
    P = 0
    cache = DynamicCache()
    if prefix_ids:
        P = len(prefix_ids)
        if any(p[:P] != list(prefix_ids) or len(p) <= P for p in prompts):
            raise ValueError("every prompt must start with prefix_ids and extend beyond it")
        pre = model(
            input_ids=torch.tensor([prefix_ids], device=device),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        del pre
        cache.batch_repeat_interleave(B)
        out.prompt_tokens += P
    suffixes = [p[P:] for p in prompts]
    L = max(len(s) for s in suffixes)
    # Padding sits between the shared prefix and each suffix (left-padding of the suffix): masked out, and
    # position ids skip it, so every row sees exactly its own prompt.
    ids = torch.full((B, L), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((B, P + L), dtype=torch.long, device=device)
    mask[:, :P] = 1
    for i, s in enumerate(suffixes):
        ids[i, L - len(s):] = torch.tensor(s, device=device)
        mask[i, P + L - len(s):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, P:]
    out.prompt_tokens += sum(len(s) for s in suffixes)

    # logits_to_keep=1: only the last position's logits are needed (the full-vocabulary head is ~20% of a
    # prefill otherwise).
    logits = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
        logits_to_keep=1,
    ).logits[:, -1, :]
    next_pos = positions[:, -1] + 1
    done = torch.zeros(B, dtype=torch.bool, device=device)
    cols: dict[str, list[torch.Tensor]] = {k: [] for k in ("ids", "logprobs", "entropy", "top1", "top2", "alive")}
    for _ in range(max_new_tokens):
        sample_logp, ent, t1, t2 = _token_stats(logits, temperature)
        if greedy:
            tok = sample_logp.argmax(-1)
        else:
            tok = torch.multinomial(sample_logp.exp(), 1, generator=generator).squeeze(-1)
        tok = torch.where(done, torch.full_like(tok, pad_id), tok)
        cols["ids"].append(tok)
        cols["logprobs"].append(sample_logp.gather(-1, tok[:, None]).squeeze(-1))
        cols["entropy"].append(ent)
        cols["top1"].append(t1)
        cols["top2"].append(t2)
        cols["alive"].append(~done)
        done = done | torch.isin(tok, stop)
        if bool(done.all()):
            break
        mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=device)], dim=1)
        logits = model(
            input_ids=tok[:, None],
            attention_mask=mask,
            position_ids=next_pos[:, None],
            past_key_values=cache,
            use_cache=True,
        ).logits[:, -1, :]
        next_pos = next_pos + 1

    stacked = {k: torch.stack(v, dim=1).cpu() for k, v in cols.items()}
    alive = stacked.pop("alive")
    for i in range(B):
        n = int(alive[i].sum())
        out.ids.append(stacked["ids"][i, :n].tolist())
        out.logprobs.append(stacked["logprobs"][i, :n].tolist())
        out.entropy.append(stacked["entropy"][i, :n].tolist())
        out.top1.append(stacked["top1"][i, :n].tolist())
        out.top2.append(stacked["top2"][i, :n].tolist())
        out.new_tokens += n
    return out


def normalised_entropy(entropy: float, vocab_size: int) -> float:
    """SELAUR's u_ent = H / log|V| in [0, 1]."""
    return entropy / math.log(vocab_size)
