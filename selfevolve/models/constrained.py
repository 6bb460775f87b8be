"""Constrained decoding: sampling masked to an output's schema, so that a small model's reply is always well-formed.

A 135M model asked for JSON mostly writes something else (issue 41: 21 of 30 extraction replies held no JSON;
10 of 12 task-writer replies looped until their budget ran out). Here the reply's shape is not asked for but
enforced: at every decoding step the logits of the tokens that cannot continue a well-formed reply are set to
−∞, so the model chooses only among the tokens that can (ART's pattern of a strict output schema, done as a
token mask over the tokenizer's vocabulary instead of a server's JSON mode).

A schema is a **grammar**: a Python generator that yields segments and receives what was written for each:

- :class:`Lit` ``(text)``: fixed text (its tokens are forced, one decoding step each);
- :class:`OneOf` ``(options)``: one of a few texts (a move name, GOOD or BAD, a row number); the model picks
  among the first tokens of the options still possible, token by token; the grammar receives the option;
- :class:`Free` ``(end, max_tokens)``: free text up to the ``end`` token (``"`` closes a JSON string, a newline
  ends an analysis line), from tokens that contain none of ``forbid``; after ``max_tokens`` the end is forced.
  The grammar receives the text.

When the grammar returns, the row may only emit the end-of-turn token, and the reply is complete. Because the
grammar is ordinary Python, what comes next may depend on what was chosen (after a tool's name, that tool's
argument keys; after ``, `` another task, after ``]`` the end). Example — one of the game's moves, then stop::

    def move():
        yield OneOf(["Left", "Down", "Right", "Up"])

    gen = policy.generate(prompts, constraint=Constrained(tokenizer, [move() for _ in prompts]))

The mask costs one boolean row over the vocabulary per reply and step (a :class:`Free` segment's allowed set is
computed once per tokenizer and ``forbid``); segments are tokenized on their own, so a literal's tokens may
differ from how the tokenizer would split the whole reply — the model is shown (and conditioned on) exactly the
ids it emitted.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Generator, Iterator

import torch

JSON_FORBID = '"\\\n\r\t'  # what a JSON string may not hold unescaped (the rest of C0 is never in a safe token)


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class OneOf:
    options: tuple[str, ...]

    def __init__(self, options):
        object.__setattr__(self, "options", tuple(options))
        if not self.options:
            raise ValueError("OneOf needs at least one option")


@dataclass(frozen=True)
class Free:
    end: str = '"'
    max_tokens: int = 32
    min_tokens: int = 1
    forbid: str = JSON_FORBID
    only: str = ""  # when set: tokens made of these characters alone (e.g. "0123456789" for a number)


Grammar = Generator  # yields Lit | OneOf | Free, receives the text of each (None for a Lit)


@functools.lru_cache(maxsize=8)
def _decoded_vocab(tokenizer) -> tuple[str, ...]:
    """Every token id's text on its own (49k ids: ~2 s once per tokenizer)."""
    return tuple(tokenizer.batch_decode([[i] for i in range(len(tokenizer))]))


@functools.lru_cache(maxsize=32)
def free_token_mask(tokenizer, forbid: str, only: str = "") -> torch.Tensor:
    """[len(tokenizer)] bool: the tokens a :class:`Free` segment may emit — non-empty text holding none of
    ``forbid`` (and, with ``only``, nothing but its characters), no control character, no broken UTF-8 piece (a
    byte-level token that decodes to U+FFFD) and not a special token."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    bad, allowed = set(forbid), set(only)
    ok = [bool(t) and i not in special and "\ufffd" not in t and not (bad & set(t))
          and all(ch >= " " for ch in t) and (not allowed or set(t) <= allowed)
          for i, t in enumerate(_decoded_vocab(tokenizer))]
    return torch.tensor(ok, dtype=torch.bool)


def _encode(tokenizer, text: str) -> tuple[int, ...]:
    ids = tuple(tokenizer.encode(text, add_special_tokens=False))
    if not ids:
        raise ValueError(f"{text!r} encodes to no tokens")
    return ids


class _Row:
    """One reply's place in its grammar: the current segment and how far into it the reply is."""

    def __init__(self, grammar: Iterator, tokenizer, stop_ids: list[int]):
        self.grammar, self.tok, self.stop_ids = grammar, tokenizer, stop_ids
        self.finished = False  # the grammar has returned: only the end of the turn may follow
        self.segment = None
        self._enter(next(self.grammar, None))

    def _enter(self, segment) -> None:
        self.segment = segment
        if segment is None:
            self.finished = True
            return
        if isinstance(segment, Lit):
            self.ids, self.pos = _encode(self.tok, segment.text), 0
        elif isinstance(segment, OneOf):
            self.options = [(o, _encode(self.tok, o)) for o in segment.options]
            self.pos = 0
        elif isinstance(segment, Free):
            self.end = _encode(self.tok, segment.end)
            if len(self.end) != 1:
                raise ValueError(f"Free(end={segment.end!r}) must end with a single token, not {len(self.end)}")
            self.written: list[int] = []
        else:
            raise TypeError(f"a grammar yields Lit, OneOf or Free, not {segment!r}")

    def _send(self, value) -> None:
        try:
            nxt = self.grammar.send(value)
        except StopIteration:
            nxt = None
        self._enter(nxt)

    def allowed(self, vocab: int) -> torch.Tensor:
        """[vocab] bool: the tokens that keep the reply well-formed."""
        mask = torch.zeros(vocab, dtype=torch.bool)
        seg = self.segment
        if self.finished:
            mask[list(self.stop_ids)] = True
        elif isinstance(seg, Lit):
            mask[self.ids[self.pos]] = True
        elif isinstance(seg, OneOf):
            mask[[ids[self.pos] for _, ids in self.options]] = True
        else:
            if len(self.written) < seg.max_tokens:
                free = free_token_mask(self.tok, seg.forbid, seg.only)
                n = min(vocab, free.shape[0])
                mask[:n] = free[:n]
            if len(self.written) >= seg.min_tokens or len(self.written) >= seg.max_tokens:
                mask[self.end[0]] = True
        return mask

    def advance(self, token: int) -> None:
        seg = self.segment
        if self.finished:
            return
        if isinstance(seg, Lit):
            self.pos += 1
            if self.pos == len(self.ids):
                self._send(None)
        elif isinstance(seg, OneOf):
            self.options = [(o, ids) for o, ids in self.options if ids[self.pos] == token]
            self.pos += 1
            done = [o for o, ids in self.options if len(ids) == self.pos]
            if done:  # the first option whose tokens are complete (options sharing a prefix: the shorter)
                self._send(done[0])
        elif token == self.end[0]:
            self._send(self.tok.decode(self.written))
        else:
            self.written.append(token)


class Constrained:
    """The per-reply grammars of one batched generation (``models/generation.py`` applies it): row ``i`` of the
    batch follows ``grammars[i]``. Rows are never dropped within a generation, so the row order is fixed."""

    def __init__(self, tokenizer, grammars: list[Iterator], stop_ids: list[int] | set[int] | None = None):
        if stop_ids is None:
            from selfevolve.agent.prompt import end_of_turn_ids

            stop_ids = end_of_turn_ids(tokenizer)
        self.rows = [_Row(g, tokenizer, sorted(stop_ids)) for g in grammars]

    def __len__(self) -> int:
        return len(self.rows)

    def mask_logits(self, logits: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        """``logits`` [B, V] with every token a live row's grammar forbids at −∞ (rows that stopped unchanged)."""
        if logits.shape[0] != len(self.rows):
            raise ValueError(f"a constraint for {len(self.rows)} rows applied to {logits.shape[0]}")
        V = logits.shape[-1]
        keep = torch.ones_like(logits, dtype=torch.bool)
        for i, (row, live) in enumerate(zip(self.rows, alive.tolist())):
            if live:
                keep[i] = row.allowed(V).to(logits.device)
        return logits.masked_fill(~keep, float("-inf"))

    def advance(self, tokens: list[int], alive: list[bool]) -> None:
        for row, tok, live in zip(self.rows, tokens, alive):
            if live:
                row.advance(int(tok))


# ---- grammars the project uses -------------------------------------------------------------------------------
def one_of(options) -> Callable[[], Grammar]:
    """A grammar factory: exactly one of ``options`` (an answer from a fixed vocabulary, e.g. a game's moves)."""
    def grammar():
        yield OneOf(options)
    return grammar


def json_string(max_tokens: int = 32) -> Free:
    """The inside of a JSON string (after its opening quote, up to and including the closing one)."""
    return Free(end='"', max_tokens=max_tokens, forbid=JSON_FORBID)

