"""Sampling in another precision than the update (``model.sampler_dtype``): the frozen base held twice.

On a CPU with fast bf16 (the AMD EPYC of 2026-11-29, AVX512-BF16) generation runs about 1.4x faster in bf16 than
in fp32, the update only 1.09x, and a whole default run in bf16 learned less than in fp32 (docs/benchmarks.md,
"bf16 on a CPU that has it"). bf16-trained adapters scored the same when evaluated in fp32, and one update's LoRA
gradient in bf16 points where fp32's does (cosine 0.997-0.999, ``benchmarks/bench_bf16_gradients.py``). Sampling
in bf16 while updating in fp32 keeps generation's speed and the update's precision, and separates the two. It
did not keep fp32's learning either: 28.7 % against 41.9 % held out over five seeds (fp32's seed 4 from another CPU; docs/benchmarks.md, "Sampling
in bf16, the update in fp32"), so it is an option (``model.sampler_dtype``), not the default.

Only the base model is held twice: its weights never change (LoRA trains the adapter alone), so the second copy
is made once, at load, and never synchronised. The adapter's weights (fp32, as peft keeps them) are the same
tensors in both precisions: what the update changes, the next rollout samples with. :meth:`SamplerWeights.active`
points every frozen parameter at its copy in the sampler's dtype for the duration of a block and back after;
nothing is converted while sampling, and the cost is the copy's memory (0.27 GB for SmolLM2-135M in bf16).

The sampler's log-probs then differ from the update's by the rounding of bf16; ``algo.old_logprobs=auto``
recomputes π_old for that reason (``objectives/old_logprobs.py``), and ``update/sampler_kl`` shows the gap.
"""

from __future__ import annotations

import contextlib

import torch


class WeightCopies:
    """Parameters and a copy of each in ``dtype``, made once (they are frozen). :meth:`active` points them at the
    copies for the duration of a block and back after (``models/matmul_precision.py`` uses it for the update)."""

    def __init__(self, params, dtype: torch.dtype):
        self.dtype = dtype
        self.pairs: list[tuple[torch.nn.Parameter, torch.Tensor, torch.Tensor]] = [
            (p, p.data, p.data.to(dtype)) for p in params]
        self.depth = 0  # nested blocks (a generate inside a prefill's block) swap once

    @property
    def nbytes(self) -> int:
        """The copy's memory."""
        return sum(copy.numel() * copy.element_size() for _, _, copy in self.pairs)

    @contextlib.contextmanager
    def active(self):
        """Within the block the parameters hold their copies; their own tensors after it."""
        self.depth += 1
        try:
            if self.depth == 1:
                for p, _, copy in self.pairs:
                    p.data = copy
            yield
        finally:
            self.depth -= 1
            if self.depth == 0:  # every pair, even where an interruption stopped the swap half way
                for p, full, _ in self.pairs:
                    p.data = full


class SamplerWeights(WeightCopies):
    """The frozen parameters of ``model`` and a copy of each in ``dtype``; trainable ones (the adapter, a value
    head) are left alone and shared."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype):
        # parameters() lists a tied weight (embedding and head) once: one copy, swapped once
        super().__init__([p for p in model.parameters() if not p.requires_grad and p.is_floating_point()], dtype)
