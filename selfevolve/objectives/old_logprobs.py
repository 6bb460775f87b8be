"""PPO's π_old: the log-probs the sampler recorded, or the trainer's own (``algo.old_logprobs``).

The clipped ratio ρ = π_θ / π_old should measure how far the update has moved the policy. The sampler (the decode
loop: one query per step over a key/value cache) and the trainer (one packed forward over the whole episode) are
two computations of the same function. In fp32 they agree to ~1e-7: in two default runs every step's ratio
was within 8e-7 of 1 (the update takes one optimizer step, at the weights that sampled), so the sampled
log-probs are π_old. In bf16 they round differently: over 140 steps of seven bf16 runs on the CPU of 2026-11-29,
``approx_kl`` at the sampling weights averaged 0.0027 per token in size (−0.009 to 0.021), and 33 steps clipped
tokens (up to 3.7 %) before the policy had moved at all: the ratio weighed tokens by rounding noise.
Recomputing removes that, but did not make bf16 learn as fp32 does (docs/benchmarks.md, "π_old recomputed in
bf16").

``recompute`` takes π_old from the trainer's forward at the weights that sampled — the same restatement verl's
"old_log_prob" makes before its update. With one optimizer step per batch (``algo.epochs × algo.minibatches``
= 1, the default) those are the update's own log-probs, detached: no extra forward, the ratio is exactly 1 and its
gradient that of log π_θ (:func:`current_as_old`). With several steps, one no-grad forward before the first
restates them (:func:`restate`); that forward encodes the rows plainly, not as the update's tree of turns, so in
half precision the first step's ratio is 1 only to that rounding (not measured). ``auto`` recomputes where the
model computes in half precision, or samples in it (``model.sampler_dtype``). Guided rows (self-navigating) keep
theirs whatever the mode: their ratio is off-policy on purpose (``experience.old_logprobs``).

In every mode ``update/sampler_kl`` reports mean(log π_sampler − log π_trainer) over the unguided tokens at the
weights that sampled (the first optimizer step, or the restating forward): the k1 estimate of
KL(sampler ‖ trainer) that rounding alone causes (:class:`SamplerGap`). :class:`PiOld` is what an update calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def half_precision(policy) -> bool:
    """Whether the policy's body computes in bf16 or fp16 (its adapters stay fp32 either way)."""
    body, _ = policy.body_and_head()
    return body.get_input_embeddings().weight.dtype in (torch.bfloat16, torch.float16)


def recomputes(policy, algo) -> bool:
    """Whether the update takes π_old from the trainer's forward (``algo.old_logprobs``; ``auto``: in half
    precision, or where the sampler computes in another precision than the update, ``model.sampler_dtype``, or
    where the body's products are bf16, ``model.matmul_dtype``, which a decode step and the update's packed
    forward round differently)."""
    if algo.old_logprobs == "auto":
        return (half_precision(policy) or getattr(policy, "sampler_weights", None) is not None
                or getattr(policy, "matmul_dtype", None) is not None)
    return algo.old_logprobs == "recompute"


def one_step(algo) -> bool:
    """One optimizer step per batch: the update's first forward runs at the weights that sampled."""
    return algo.epochs * algo.minibatches == 1


def current_as_old(sampled: torch.Tensor, current: torch.Tensor, keep_sampled: torch.Tensor) -> torch.Tensor:
    """π_old per token: the update's own log-probs ``current``, detached, except where ``keep_sampled`` (guided
    tokens), which keep ``sampled``. Only valid at the weights that sampled (:func:`one_step`)."""
    return torch.where(keep_sampled, sampled.to(current.dtype), current.detach())


@dataclass
class SamplerGap:
    """Σ (log π_sampler − log π_trainer) and the count over unguided tokens, at the weights that sampled: its mean
    is the k1 estimate of KL(sampler ‖ trainer), logged as ``update/sampler_kl``."""

    total: float = 0.0
    tokens: int = 0

    def add(self, sampled: torch.Tensor, current: torch.Tensor, keep_sampled: torch.Tensor) -> None:
        free = ~keep_sampled
        self.total += float((sampled.to(current.dtype) - current.detach())[free].double().sum())
        self.tokens += int(free.sum())

    def metrics(self) -> dict[str, float]:
        return {"update/sampler_kl": self.total / self.tokens} if self.tokens else {}


def restate(items: list, logprobs_of, gap: SamplerGap | None = None) -> None:
    """Before the first of several optimizer steps: every unguided item's (row's or episode's) ``old_logprobs``
    becomes ``logprobs_of(those items)`` — the trainer's no-grad forward at the weights that sampled; ``gap`` adds
    what the sampler's differed by."""
    plain = [it for it in items if not it.guided]
    for it, lp in zip(plain, logprobs_of(plain) if plain else []):
        if gap is not None:
            new = torch.tensor(lp, dtype=torch.float64)
            gap.add(torch.tensor(it.old_logprobs, dtype=torch.float64), new, torch.zeros(len(lp), dtype=torch.bool))
        it.old_logprobs = list(lp)


class PiOld:
    """π_old for one update's optimizer steps: restates ``items`` first when it must (several steps, recomputing),
    then gives each micro-batch its π_old (:meth:`of`) and measures the sampler's gap at the first step."""

    def __init__(self, policy, algo, items: list, logprobs_of):
        recompute = recomputes(policy, algo)
        self.in_step = recompute and one_step(algo)
        self.restated = recompute and not self.in_step
        self.gap = SamplerGap()
        if self.restated:
            restate(items, logprobs_of, self.gap)

    def of(self, step: int, sampled: torch.Tensor, current: torch.Tensor, guided: torch.Tensor) -> torch.Tensor:
        """π_old of a micro-batch of optimizer step ``step`` (0 first): ``sampled`` (the items' ``old_logprobs``),
        or the update's own log-probs ``current`` where they replace them (:func:`current_as_old`)."""
        if step == 0 and not self.restated:  # at the weights that sampled
            self.gap.add(sampled, current, guided)
        return current_as_old(sampled, current, guided) if self.in_step else sampled

    def metrics(self) -> dict[str, float]:
        return self.gap.metrics()
