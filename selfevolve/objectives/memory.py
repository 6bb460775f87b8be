"""How many tokens one micro-batch of the update may encode: a bound from the memory its activations take.

``algo.micro_batch_tokens`` bounds a micro-batch in tokens, whatever the model. What a token costs in memory
depends on the model: its backward keeps, per encoded token and decoder layer, a few vectors of the hidden
size (the norms' inputs and outputs, the adapters' inputs, queries, keys and values) and two of the MLP's width
(``models/recompute.py``), and it needs about as much again for the gradients and temporaries while it runs.
So the bound is also ``algo.micro_batch_gb`` divided by :func:`activation_bytes_per_token`, an estimate from the
model's sizes:

    bytes per token = layers × (12 × hidden + 4 × intermediate) × bytes per number

For SmolLM2-135M in fp32 (30 layers, hidden 576, MLP 1,536) that is 1.57 MB, above the 1.05-1.45 MB measured
as the peak above the loaded model over the forward and backward of warm-start batches of 1,290 and 2,136 tokens
(docs/benchmarks.md, "Memory of the default run"): the default 3.0 GB allows 1,914 (tokens and cached positions
counted as ``micro_batches`` counts them). 3.0 since 2026-12-05 (2.5 before, 1,595 tokens): with the attention's
backward of that day the whole default run's memory measures then cost 1.021x and 1.008x its time without them,
at peaks of 3.79 and 3.83 GB (seeds 0 and 1, side by side; docs/benchmarks.md, "The attention's backward without
its forward again"). For the tests' tiny model a token costs a few kilobytes, so
``micro_batch_tokens`` alone bounds it.
"""

from __future__ import annotations


def activation_bytes_per_token(layers: int, hidden: int, intermediate: int, bytes_per_number: int) -> int:
    """The estimate above: memory of one encoded token's activations over the update's forward and backward."""
    return layers * (12 * hidden + 4 * intermediate) * bytes_per_number


def _bytes_per_number(param) -> int:
    return max(4, param.element_size()) if param.device.type == "cpu" else param.element_size()


def micro_batch_bound(model, micro_batch_tokens: int, micro_batch_gb: float | None) -> int:
    """The tokens a micro-batch of ``model``'s update may encode: ``micro_batch_tokens``, and no more than
    ``micro_batch_gb`` of activations (None: no memory bound).

    On a CPU a half-precision body is counted at 4 bytes a number all the same: what the backward keeps is much of
    it fp32 there too (the norms compute in fp32, the fp32 adapters keep fp32 copies of their inputs), and counting
    2 bytes let the default run in bf16 peak at 4.00-4.15 GB against fp32's 3.48 (2026-11-29, docs/benchmarks.md).
    On a GPU the count stays the dtype's (not measured there; its memory is not a laptop's)."""
    if micro_batch_gb is None:
        return micro_batch_tokens
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    per_token = activation_bytes_per_token(config.num_hidden_layers, config.hidden_size,
                                           getattr(config, "intermediate_size", 4 * config.hidden_size),
                                           _bytes_per_number(next(model.parameters())))
    return max(1, min(micro_batch_tokens, int(micro_batch_gb * 1e9 // per_token)))
