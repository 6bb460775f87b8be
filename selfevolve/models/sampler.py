"""The sampler: what rollouts and search ask of a model, and what one generation call returns.

The rollout (``rollout/runner.py``), trajectory search (``rollout/search/``), the training step's collection,
evaluation and exploration depend on :class:`Sampler` and nothing more. The Hugging Face policy
(``models/policy.Policy``: local transformers, a LoRA adapter, a hand-written decoding loop) is one
implementation; a generation server or another engine would be another, and tests use a scripted one
(``tests/scripted_sampler.py``) that needs no model.

Two things stay the sampler's own, so that no caller depends on how it works:

- **state**: what it keeps of a batch of conversations from one call to the next (Hugging Face: the key/value
  caches, ``models/generation.KVState``). A caller passes it back with the next prompts of the same rows, keeps
  some rows (:meth:`SamplerState.select`) or copies rows (:meth:`SamplerState.gather`, search's branching);
- **random streams**: ``stream(seed)`` makes one; ``generate`` takes one for the batch or one per prompt (each row
  then samples from its own stream: an episode's samples do not depend on the batch it is played in). A stream's
  ``get_state``/``set_state`` let a checkpoint resume it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class SamplerState(Protocol):
    """A sampler's memory of a batch of conversations (one row per prompt of the call that returned it)."""

    def select(self, rows: list[int]) -> "SamplerState":
        """Keep only ``rows`` (finished conversations leave the batch); this state is consumed."""

    def gather(self, rows: list[int]) -> "SamplerState":
        """A copy holding ``rows`` in that order, repeats allowed (a search node's children all start from it);
        this state stays usable."""


class Stream(Protocol):
    """A random stream of a sampler, resumable."""

    def get_state(self) -> Any: ...

    def set_state(self, state: Any) -> None: ...


@dataclass
class Generation:
    """Per prompt: generated ids (up to and including the stop token) and aligned per-token statistics: the
    sampling log-prob of each token (the "old" policy of PPO) and, over the model's own full distribution, its
    entropy and top-1 / top-2 probabilities (SELAUR's raw statistics)."""

    ids: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    entropy: list[list[float]] = field(default_factory=list)
    top1: list[list[float]] = field(default_factory=list)
    top2: list[list[float]] = field(default_factory=list)
    prompt_tokens: int = 0  # tokens encoded (prefill), for throughput figures
    new_tokens: int = 0
    state: SamplerState | None = None  # what the sampler keeps of these rows, for the next turn


@runtime_checkable
class Sampler(Protocol):
    """What rollouts and search ask of a model (see the module docstring)."""

    @property
    def has_values(self) -> bool:
        """Whether :meth:`state_values` can be read (a value head: ``algo.name=ppo`` or ``self_ac``)."""

    def stream(self, seed: int) -> Stream:
        """A random stream seeded with ``seed``."""

    def generate(self, prompts: list[list[int]], *, greedy: bool = False,
                 generator: Stream | list[Stream] | None = None, state: SamplerState | None = None,
                 max_new_tokens: int | None = None, share_prefix: bool = True) -> Generation:
        """One reply per prompt (token ids in, token ids out). ``state``: the previous call's
        ``Generation.state`` for the same rows, when each prompt extends what its row holds; ``generator``: one
        stream for the batch or one per prompt; ``max_new_tokens``: this call's reply budget instead of the
        sampler's own; ``share_prefix=False``: encode every prompt in full (for measurements)."""

    def prefill(self, prompts: list[list[int]], state: SamplerState | None = None,
                share_prefix: bool = True) -> tuple[SamplerState, int]:
        """``(state, tokens encoded)``: the prompts read but not answered, ready for :meth:`generate` — and for
        copying to several candidates first."""

    def state_values(self, prompts: list[list[int]], suffix: list[int], state: SamplerState | None = None
                     ) -> tuple[list[float], SamplerState, int]:
        """``(values, state, tokens encoded)``: the value of each prompt's state, read at the end of
        ``prompt + suffix`` (Self-AC's critic prompt; nothing for PPO), and a state that the next
        :meth:`generate` of the same prompts continues from as if no value had been read."""

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text`` (no special tokens added)."""

    def decode(self, ids: list[int]) -> str:
        """The text of generated ids (special tokens left out)."""
