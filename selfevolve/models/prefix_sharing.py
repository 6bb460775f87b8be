"""Encoding training rows that begin alike, as a tree: every distinct beginning once.

The update runs each episode as one row (``train/samples.py``): the system prompt and few-shot turns (the
*shared prefix*, the same in every row), then turn after turn. The rollouts of one task share their first
prompt, and two rollouts that chose the same first moves share those turns too. Encoded row by row, all of it
would be encoded once per row.

Here a row is cut into segments at its turns (``cuts``: the position of each turn's last prompt token, whose
hidden state predicts the reply), and the rows of a micro-batch form a tree: level 0 holds the distinct first
segments, level 1 the distinct second segments under each of them, and so on. The shared prefix is encoded once,
then each level in one forward, every node once, on top of its parent's keys and values; a row's hidden states are
gathered from the nodes on its path. Every token sees exactly the tokens and positions it sees in the plain
forward, so the hidden states are the same (tested); gradients flow back through the gathers and add up over the
rows that shared a node. Each level pads its segments only to the longest of that level, and a row that has ended
takes no part in the levels below, so short and long episodes share a micro-batch without padding the short ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from selfevolve.models.compat import cache_kwargs


@dataclass
class Node:
    parent: int  # index of the parent node in the level above (0: the shared prefix, for level 0)
    row: int  # a row whose segment this node is
    start: int  # the segment's first position in that row
    end: int  # one past its last


def segment_tree(ids: list[list[int]], lengths: list[int], prefix_len: int,
                 cuts: list[list[int]]) -> tuple[list[list[Node]], list[list[int]]]:
    """The tree of a micro-batch's rows: ``(levels, path)``, where ``levels[l]`` are the distinct segments at depth
    l and ``path[b][l]`` the node that row b's l-th segment is. Row b's segments run from ``prefix_len`` to
    ``lengths[b]``, cut at ``cuts[b]``; two rows share a node when they share its parent and its ids."""
    levels: list[list[Node]] = []
    path: list[list[int]] = [[] for _ in ids]
    bounds = [[prefix_len] + [c for c in sorted(set(cs)) if prefix_len < c < n] + [n]
              for cs, n in zip(cuts, lengths)]
    depth = 0
    while True:
        slot: dict = {}
        nodes: list[Node] = []
        for b, bs in enumerate(bounds):
            if depth + 1 >= len(bs):
                continue  # the row has ended
            parent = path[b][-1] if depth else 0
            s, e = bs[depth], bs[depth + 1]
            key = (parent, tuple(ids[b][s:e]))
            if key not in slot:
                slot[key] = len(nodes)
                nodes.append(Node(parent, b, s, e))
            path[b].append(slot[key])
        if not nodes:
            return levels, path
        levels.append(nodes)
        depth += 1


def encode_rows(body, input_ids: torch.Tensor, attention_mask: torch.Tensor, prefix_len: int = 0,
                cuts: list[list[int]] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The decoder ``body``'s hidden states of right-padded rows, from the shared prefix's end on.

    ``prefix_len``: the ids every row starts with, encoded once. ``cuts``: per row, where its segments begin
    (see the module's text); without them, each row's rest is encoded whole. The tree needs a shared prefix
    (every query then has a key to attend to, even in padding); without one, rows are encoded plainly.

    Returns ``(hidden [B, R, H], columns [B, R], real [B, R])``: ``hidden[b, j]`` belongs to column
    ``columns[b, j]`` of ``input_ids`` (the prefix's length plus j, or j without a prefix), and ``real`` marks
    the entries that are the row's tokens, not padding.
    """
    B, L = input_ids.shape
    device = input_ids.device
    P = prefix_len if B > 1 else 0
    if P == 0:
        columns = torch.arange(L, device=device).expand(B, L)
        return body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, columns, attention_mask > 0
    lengths = attention_mask.sum(1)
    columns = torch.arange(P, L, device=device).expand(B, L - P)
    real = columns < lengths[:, None]
    cache = DynamicCache()
    with_cache = cache_kwargs(body, cache)
    body(input_ids=input_ids[:1, :P], **with_cache, use_cache=True)
    if cuts is None:
        cache.batch_repeat_interleave(B)
        hidden = body(input_ids=input_ids[:, P:], attention_mask=attention_mask, position_ids=columns,
                      **with_cache, use_cache=True).last_hidden_state
        return hidden, columns, real
    ids = input_ids.tolist()
    levels, path = segment_tree(ids, lengths.tolist(), P, cuts)
    pad = int(input_ids[0, 0])  # any id: padding is masked out and skipped by the position ids
    cached_mask = torch.ones((1, P), dtype=attention_mask.dtype, device=device)
    outputs, offsets, total = [], [], 0
    for nodes in levels:
        S = max(n.end - n.start for n in nodes)
        # left-padded, so that every segment ends where its children's begin
        seg = torch.full((len(nodes), S), pad, dtype=input_ids.dtype, device=device)
        seg_mask = torch.zeros((len(nodes), S), dtype=attention_mask.dtype, device=device)
        starts = torch.tensor([n.start for n in nodes], device=device)
        for k, n in enumerate(nodes):
            seg[k, S - (n.end - n.start):] = input_ids[n.row, n.start:n.end]
            seg_mask[k, S - (n.end - n.start):] = 1
        parents = torch.tensor([n.parent for n in nodes], device=device)
        cache.batch_select_indices(parents)  # an index: the gradient adds up over a node's children
        cached_mask = torch.cat([cached_mask[parents], seg_mask], dim=1)
        positions = starts[:, None] + (seg_mask.cumsum(-1) - 1).clamp(min=0)
        out = body(input_ids=seg, attention_mask=cached_mask, position_ids=positions, **with_cache,
                   use_cache=True).last_hidden_state
        outputs.append(out.reshape(len(nodes) * S, -1))
        offsets.append((total, S))
        total += len(nodes) * S
    # where each row's position sits among the levels' outputs (padding: anywhere, it is masked by ``real``)
    where = [[0] * (L - P) for _ in range(B)]
    for b in range(B):
        for depth, k in enumerate(path[b]):
            node, (base, S) = levels[depth][k], offsets[depth]
            first = base + k * S + S - (node.end - node.start) - node.start
            for p in range(node.start, node.end):
                where[b][p - P] = first + p
    hidden = torch.cat(outputs)[torch.tensor(where, device=device)]
    return hidden, columns, real
