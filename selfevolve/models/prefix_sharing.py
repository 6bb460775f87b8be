"""Encoding training rows that begin alike: once for all rows, once per group, then each row's own part.

The update runs each episode as one row (``train/samples.py``). Rows begin with the same system prompt and
few-shot turns (the *shared prefix*, the same in every row), and the rollouts of one task also share their
first observation up to the first reply (the row's *opening*, the same in every row of a task's group). Encoded
row by row, both would be encoded once per row. Here the shared prefix is encoded once, each distinct opening
once (on top of the prefix's cache), and only the rest of each row once per row, attending to its prefix and
opening through the key/value cache. Every token sees exactly the tokens and positions it sees in the plain
forward, so the hidden states are the same; gradients flow back through the repeated keys and values (an index)
and add up over the rows that shared them.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from selfevolve.models.compat import cache_kwargs


def opening_groups(input_ids: torch.Tensor, prefix_len: int, openings: list[int]) -> list[int]:
    """Per row, the index of its group: rows whose opening (the ids from ``prefix_len`` to its opening length)
    is the same, in order of first appearance."""
    slot: dict[tuple[int, ...], int] = {}
    return [slot.setdefault(tuple(input_ids[b, prefix_len:o].tolist()), len(slot)) for b, o in enumerate(openings)]


def encode_rows(body, input_ids: torch.Tensor, attention_mask: torch.Tensor, prefix_len: int = 0,
                openings: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The decoder ``body``'s hidden states of right-padded rows, from each row's own part on.

    ``prefix_len``: the ids every row starts with, encoded once. ``openings``: per row, the length of the
    beginning it shares with the other rows of its group (at least ``prefix_len``); rows with the same ids up to
    there are a group, whose opening is encoded once. Grouping needs a shared prefix (every query then has a key
    to attend to) and is skipped when no two rows share an opening.

    Returns ``(hidden [B, R, H], columns [B, R], real [B, R])``: ``hidden[b, j]`` belongs to column
    ``columns[b, j]`` of ``input_ids``, and ``real`` marks the entries that are the row's tokens, not padding.
    Each row's own part starts at its opening (at ``prefix_len`` without groups, at 0 without a prefix).
    """
    B, L = input_ids.shape
    device = input_ids.device
    P = prefix_len if B > 1 else 0
    lengths = attention_mask.sum(1)
    if P == 0:
        columns = torch.arange(L, device=device).expand(B, L)
        return body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, columns, attention_mask > 0
    group = opening_groups(input_ids, P, openings) if openings is not None and max(openings) > P else None
    if group is not None and len(set(group)) == B:
        group = None  # nothing shared beyond the prefix
    cache = DynamicCache()
    with_cache = cache_kwargs(body, cache)
    body(input_ids=input_ids[:1, :P], **with_cache, use_cache=True)
    if group is None:
        cache.batch_repeat_interleave(B)
        starts = torch.full((B,), P, device=device)
        cached_mask = torch.ones((B, P), dtype=attention_mask.dtype, device=device)
    else:
        first = {g: b for b, g in reversed(list(enumerate(group)))}  # each group's first row
        G = len(first)
        segs = [input_ids[first[g], P:openings[first[g]]] for g in range(G)]
        S = max(len(s) for s in segs)
        # left-padded, so that each opening ends where its rows' own parts begin; the padding is masked out and
        # skipped by the position ids (every query can still attend to the shared prefix)
        seg_ids = torch.full((G, S), int(input_ids[0, 0]), dtype=input_ids.dtype, device=device)
        seg_mask = torch.zeros((G, S), dtype=attention_mask.dtype, device=device)
        for g, s in enumerate(segs):
            if len(s):
                seg_ids[g, S - len(s):] = s
                seg_mask[g, S - len(s):] = 1
        cache.batch_repeat_interleave(G)
        g_mask = torch.cat([torch.ones((G, P), dtype=attention_mask.dtype, device=device), seg_mask], dim=1)
        body(input_ids=seg_ids, attention_mask=g_mask, position_ids=P + (seg_mask.cumsum(-1) - 1).clamp(min=0),
             **with_cache, use_cache=True)
        rows_group = torch.tensor(group, device=device)
        cache.batch_select_indices(rows_group)  # an index: the gradient adds up over a group's rows
        starts = torch.tensor(openings, device=device)
        cached_mask = g_mask[rows_group]
    R = int((lengths - starts).max())
    columns = starts[:, None] + torch.arange(R, device=device)
    real = columns < lengths[:, None]
    columns = columns.clamp(max=L - 1)
    own = torch.where(real, input_ids.gather(1, columns), input_ids[0, 0])
    hidden = body(input_ids=own, attention_mask=torch.cat([cached_mask, real.to(cached_mask.dtype)], dim=1),
                  position_ids=columns, **with_cache, use_cache=True).last_hidden_state
    return hidden, columns, real
