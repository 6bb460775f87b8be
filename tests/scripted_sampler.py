"""A deterministic sampler without a model (``models/sampler.py``'s protocol), for tests of rollouts and search.

Each reply is chosen by a script from the prompt's text and the row's random stream (``random.Random``), then
tokenised with a real tokenizer and closed with the end-of-turn id, as a model's reply is. Every reply token
gets the log-prob of 1/2; its "full distribution" has entropy 1 nat, top-1 probability 1/2 and top-2 1/4.
A state's value, where a test asks for one, is a second script of the prompt's text (with the suffix).

Its state records which rows it holds and how it was narrowed or copied, so tests can check what a caller did
with it; the tokens it counts as encoded are those a cache would encode (the part of each prompt beyond what
its row already holds).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable

from selfevolve.models.sampler import Generation


class ScriptedStream(random.Random):
    """A random stream with the protocol's ``get_state``/``set_state``."""

    def get_state(self):
        return self.getstate()

    def set_state(self, state) -> None:
        self.setstate(state)


@dataclass
class ScriptedState:
    seqs: list[list[int]]
    log: list[tuple[str, list[int]]] = field(default_factory=list)  # ("select" | "gather", rows), in order

    def select(self, rows: list[int]) -> "ScriptedState":
        return ScriptedState([self.seqs[i] for i in rows], self.log + [("select", list(rows))])

    def gather(self, rows: list[int]) -> "ScriptedState":
        return ScriptedState([list(self.seqs[i]) for i in rows], self.log + [("gather", list(rows))])


class ScriptedSampler:
    """``reply(prompt_text, rng) -> str`` answers each prompt; ``value(text) -> float`` gives state values."""

    LOGPROB = math.log(0.5)

    def __init__(self, tokenizer, stop_id: int, reply: Callable[[str, random.Random], str],
                 value: Callable[[str], float] | None = None, max_new_tokens: int = 8):
        self.tokenizer, self.stop_id, self.reply, self.value = tokenizer, stop_id, reply, value
        self.max_new_tokens = max_new_tokens
        self.calls: list[list[list[int]]] = []  # the prompts of every generate call
        self.states: list[list | None] = []  # the log of the state each generate call was given (None: none)

    @property
    def has_values(self) -> bool:
        return self.value is not None

    def stream(self, seed: int) -> ScriptedStream:
        return ScriptedStream(seed)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _encoded(self, prompts, state) -> int:
        if state is not None and len(state.seqs) == len(prompts) and all(
                p[: len(s)] == s for p, s in zip(prompts, state.seqs)):
            return sum(len(p) - len(s) for p, s in zip(prompts, state.seqs))
        return sum(len(p) for p in prompts)

    def generate(self, prompts, *, greedy=False, generator=None, state=None, max_new_tokens=None,
                 share_prefix=True) -> Generation:
        self.calls.append([list(p) for p in prompts])
        self.states.append(None if state is None else list(state.log))
        out = Generation(prompt_tokens=self._encoded(prompts, state))
        budget = max_new_tokens or self.max_new_tokens
        for i, p in enumerate(prompts):
            rng = (random.Random(0) if greedy else generator[i] if isinstance(generator, (list, tuple))
                   else generator)
            ids = (self.encode(self.reply(self.tokenizer.decode(p), rng)) + [self.stop_id])[:budget]
            out.ids.append(ids)
            out.logprobs.append([self.LOGPROB] * len(ids))
            out.entropy.append([1.0] * len(ids))
            out.top1.append([0.5] * len(ids))
            out.top2.append([0.25] * len(ids))
            out.new_tokens += len(ids)
        out.state = self._state(prompts, state)
        return out

    def _state(self, prompts, state) -> ScriptedState:
        return ScriptedState([list(p) for p in prompts], list(state.log) if state is not None else [])

    def prefill(self, prompts, state=None, share_prefix=True):
        return self._state(prompts, state), self._encoded(prompts, state)

    def state_values(self, prompts, suffix, state=None):
        values = [self.value(self.tokenizer.decode(list(p) + list(suffix))) for p in prompts]
        return values, self._state(prompts, state), self._encoded(prompts, state) + len(suffix) * len(prompts)
