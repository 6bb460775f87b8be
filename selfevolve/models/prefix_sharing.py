"""Encoding training rows that begin alike, as a tree: every distinct beginning once, in one forward.

The update runs each episode as one row (``objectives/samples.py``): the system prompt and few-shot turns (the
*shared prefix*, the same in every row), then turn after turn. The rollouts of one task share their first
prompt, and two rollouts that chose the same first moves share those turns too. Encoded row by row, all of it
would be encoded once per row.

Here a row is cut into segments at its turns (``cuts``: the position of each turn's last prompt token, whose
hidden state predicts the reply), and the rows of a micro-batch form a tree: level 0 holds the distinct first
segments, level 1 the distinct second segments under each of them, and so on. The shared prefix and every node
are packed, each once and without padding, into a single sequence that goes through the model in one forward:
each token keeps its position in its row, and attention (``models/tree_attention.py``) lets it see the prefix,
its node's ancestors and its own segment up to itself. So every token sees exactly the tokens and positions it
sees in the plain forward, and the hidden states are the same (tested); a row's hidden states are gathered from
the nodes on its path, and gradients flow back through the gathers and add up over the rows that shared a node.

Why one packed forward (2026-11-26): the earlier version ran one forward per level, each level's segments padded
to its longest. On a FrozenLake step a level mixes whole turns (~48 tokens) with final replies (3), so 22 % of the
tokens were padding, and every forward reads all the weights twice (forward and backward) however few tokens it
carries: a 1-token level cost 0.12 s on this CPU. The packed forward took 0.62x the time for the same step
(docs/benchmarks.md, "The update's tree in one packed forward").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfevolve.models.tree_attention import Group, TreePlan, supports_tree, tree_forward


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


class EncodedPrefix:
    """The shared prefix of a minibatch's rows, encoded once for all its micro-batches (the update's).

    Encoded with each micro-batch, the prefix (system prompt and few-shot turns, ~160 tokens on FrozenLake) would
    be encoded once per micro-batch, and the memory bound on micro-batches (``objectives/memory.py``) makes more
    of them. Here it goes through the body once, with gradients; each micro-batch's tree attends to detached
    copies of its keys and values (:attr:`kv`), whose gradients add up over the micro-batches' backwards, and
    :meth:`backward` then carries their sum through the prefix's own forward once. The gradient is the sum over
    the micro-batches, as before, in another order of addition."""

    def __init__(self, body, ids: list[int]):
        from transformers import DynamicCache

        from selfevolve.models.compat import cache_kwargs

        self.length = len(ids)
        cache = DynamicCache()
        body(input_ids=torch.tensor([ids], device=body.device), **cache_kwargs(body, cache), use_cache=True)
        self._encoded = [(layer.keys[0], layer.values[0]) for layer in cache.layers]  # [Hkv, P, D], with graph
        self.kv = [(k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad))
                   for k, v in self._encoded]

    def backward(self) -> None:
        """Carry the gradients the micro-batches left on :attr:`kv` through the prefix's forward."""
        pairs = [(e, c.grad) for ek, ck in zip(self._encoded, self.kv) for e, c in zip(ek, ck) if c.grad is not None]
        if pairs:
            torch.autograd.backward([e for e, _ in pairs], [g for _, g in pairs])
        self._encoded = self.kv = []


def encode_rows(body, input_ids: torch.Tensor, attention_mask: torch.Tensor, prefix_len: int = 0,
                cuts: list[list[int]] | None = None, prefix: EncodedPrefix | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The decoder ``body``'s hidden states of right-padded rows, from the shared prefix's end on.

    ``prefix_len``: the ids every row starts with, encoded once. ``cuts``: per row, where its segments begin
    (see the module's text); without them, each row's rest is one segment (rows with the same rest share it).
    The tree needs a shared prefix (every query then has a key to attend to, even in padding) and an attention it
    can stand in for (``tree_attention.supports_tree``); without them, rows are encoded plainly. ``prefix``: the
    first ``prefix_len`` ids already encoded (:class:`EncodedPrefix`): the tree attends to its keys and values
    instead of encoding them again.

    Returns ``(hidden [B, R, H], columns [B, R], real [B, R])``: ``hidden[b, j]`` belongs to column
    ``columns[b, j]`` of ``input_ids`` (the prefix's length plus j, or j without a prefix), and ``real`` marks
    the entries that are the row's tokens, not padding.
    """
    B, L = input_ids.shape
    device = input_ids.device
    # one row alone gains nothing from the tree, unless its prefix is already encoded (a micro-batch of one row
    # beside others that share the prefix): encoded plainly, it would go through the body a second time
    P = prefix_len if (B > 1 or prefix is not None) and supports_tree(body.config) else 0
    if P == 0:
        columns = torch.arange(L, device=device).expand(B, L)
        hidden = body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        return hidden, columns, attention_mask > 0
    lengths = attention_mask.sum(1)
    columns = torch.arange(P, L, device=device).expand(B, L - P)
    real = columns < lengths[:, None]
    ids = input_ids.tolist()
    levels, path = segment_tree(ids, lengths.tolist(), P, cuts if cuts is not None else [[] for _ in ids])
    packed, positions, spans, plan = _plan(ids, P, levels, device, body.get_input_embeddings().weight.dtype)
    skip = 0  # packed positions not encoded here: the prefix, when it was encoded beforehand
    if prefix is not None:
        if prefix.length != P:
            raise ValueError(f"the encoded prefix holds {prefix.length} positions, these rows share {P}")
        skip, packed, positions = P, packed[P:], positions[P:]
        plan.prefix_kv, plan.queries = prefix.kv, (plan.queries - P).clamp(min=0)  # (padding slots: anywhere)
    out = tree_forward(body, torch.tensor(packed, device=device), torch.tensor(positions, device=device), plan)
    # where each row's position sits in the packed sequence (padding: anywhere, it is masked by ``real``)
    where = [[0] * (L - P) for _ in range(B)]
    for b in range(B):
        for depth, k in enumerate(path[b]):
            node, first = levels[depth][k], spans[depth][k][0] - skip
            where[b][node.start - P:node.end - P] = range(first, first + node.end - node.start)
    return out[torch.tensor(where, device=device)], columns, real


def _plan(ids: list[list[int]], prefix_len: int, levels: list[list[Node]], device, dtype: torch.dtype):
    """``(packed ids, their positions, spans, attention plan)``: the prefix, then each level's nodes, longest
    first, each node's segment once; ``spans[depth][k]`` is where node k of that level lies in the packed sequence,
    ``(first, end)``. Each node attends to its keys: its parent's keys (the prefix and the segments above it)
    and its own segment. The masks are built in the model's ``dtype``, once for all layers."""
    packed, positions = list(ids[0][:prefix_len]), list(range(prefix_len))
    queries, keys, real, groups = [], [], [], []
    spans: list[list[tuple[int, int]]] = []
    parent_keys = [list(range(prefix_len))]  # level 0's parent (0) is the prefix
    neg = torch.finfo(dtype).min
    for nodes in levels:
        size = [n.end - n.start for n in nodes]
        order = sorted(range(len(nodes)), key=lambda k: -size[k])
        level_spans: list[tuple[int, int]] = [(0, 0)] * len(nodes)
        for k in order:
            n = nodes[k]
            level_spans[k] = (len(packed), len(packed) + size[k])
            packed += ids[n.row][n.start:n.end]
            positions += range(n.start, n.end)
        spans.append(level_spans)
        own = [list(range(*span)) for span in level_spans]
        above = [parent_keys[n.parent] for n in nodes]
        for group in _similar_lengths(order, size):
            m, S = len(group), size[group[0]]
            K = max(len(above[k]) for k in group) + S
            mask = torch.full((m, 1, S, K), neg, dtype=dtype)
            for j, k in enumerate(group):
                a, o = above[k], own[k]
                queries += o + [0] * (S - len(o))
                keys += a + o + [0] * (K - len(a) - len(o))
                mask[j, 0, :, :len(a)] = 0  # everything above, seen by every query (padding too: no empty rows)
                mask[j, 0, :len(o), len(a):len(a) + len(o)] = torch.triu(torch.full((len(o), len(o)), neg, dtype=dtype), 1)
                real += range(len(queries) - S, len(queries) - S + len(o))
            groups.append(Group(m, S, K, mask.to(device)))
        parent_keys = [a + o for a, o in zip(above, own)]
    as_index = lambda xs: torch.tensor(xs, dtype=torch.long, device=device)  # noqa: E731
    return packed, positions, spans, TreePlan(prefix_len, as_index(queries), as_index(keys), groups, as_index(real))


def _similar_lengths(order: list[int], size: list[int]) -> list[list[int]]:
    """A level's nodes, longest first, cut into groups whose shortest is at least half their longest: the
    padding a group's attention computes stays under half of it."""
    groups: list[list[int]] = []
    for k in order:
        if groups and 2 * size[k] >= size[groups[-1][0]]:
            groups[-1].append(k)
        else:
            groups.append([k])
    return groups
