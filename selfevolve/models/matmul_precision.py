"""The frozen body's matrix products in bf16, everything else in fp32 (``model.matmul_dtype``).

On a CPU with bf16 arithmetic (the AMD EPYC of 2026-11-29, AVX512-BF16) a matrix product of our shapes runs about
twice as fast in bf16 as in fp32, and a whole default run in bf16 (``model.dtype=bf16``) took 9:22 against 11:37,
but its adapters learned less: 33.6 % against 42.5 % held out over ten seeds (docs/benchmarks.md, "bf16 on a CPU
that has it"). A bf16 model rounds more than its products. Every layer's output, the residual stream, the
attention and the LoRA delta are bf16 there too, and the delta is added to a bf16 projection and rounded with it:
a delta below half the projection's last bit (2⁻⁹ of it) moves nothing.

Here only the products with the frozen weights are bf16: each linear layer of the body holds its weight in bf16,
rounds its input to bf16 for the product and returns fp32 (the product accumulates in fp32 and is rounded once,
to bf16, by the kernel). The residual stream, the norms, the attention, the adapter (whose delta peft adds to the
fp32 output), the embedding and the head stay fp32. The weights are converted once, at load, and the fp32
originals freed (0.21 GB less for SmolLM2-135M): they are frozen, and the adapter is what trains.

``model.matmul_dtype=bf16_update`` does the same in the update alone (its forwards and backwards, the warm start's
included), while generation keeps fp32 products (but ``selfevolve evolve``'s exploring and validation score,
``evolve.acting_precision``): :class:`UpdateProducts` holds a bf16 copy of the body's linear
weights beside the fp32 ones (0.21 GB for SmolLM2-135M) and points the layers at it for the update's duration.
Sampling in bf16 (``model.sampler_dtype``) learned less than fp32, and this is the other half of that split.
Measured on 2026-12-05 (docs/benchmarks.md, "bf16 products in the update alone"): the default run in 8:37 against
fp32's 10:29 alone (1.22x), and over ten seeds 40.6 % held out against fp32's 42.5 % on the same seeds (paired
-1.2 +- 7.6 maps of 64: ten seeds cannot tell them apart), but at peaks of 4.3-5.3 GB against fp32's 3.8-4.0
(4.1-4.7 GB on two seeds with oneDNN's primitive cache bounded, 0 or 16 kept: ``models/allocator.py``; 3.24 GB
on seed 0 by ``time -v`` and 3.34-3.40 GB on seeds 2 and 3 by the run's metric since the command runs with mimalloc,
``selfevolve/launch.py``). Its speed needs a CPU with bf16 arithmetic, so ``model.matmul_dtype=auto``, the
default, chooses it where the CPU has that and fp32 elsewhere (:func:`auto_choice`): alone on 2026-12-06 the
default run took 8:23 with it against fp32's 11:07, and ``selfevolve evolve`` was not worse with it over seven
seeds (docs/benchmarks.md, "The automatic choice").

Measured (docs/benchmarks.md, "bf16 products, fp32 activations"): on an AMD EPYC with AVX512-BF16 an update
micro-batch took 8.61 s against fp32's 13.45 s (bf16 throughout: 9.84 s) and the default run 11:56 against
16:14, but over nine seeds it reached 35.8 % held out against fp32's 41.1 % (lower on 6 of 9; bf16 throughout:
33.3 %) and peaked at 4.3-5.4 GB. Keeping the delta and the activations in fp32 did not bring fp32's learning back
measurably, so this is an option, not the default.

Not for export: a merge needs the full-precision weights, so ``selfevolve export`` loads the run without this
(``train/run.py``, ``load_run``).
"""

from __future__ import annotations

import os
import types

import torch
import torch.nn.functional as F

from selfevolve.errors import ConfigError
from selfevolve.models import allocator
from selfevolve.models.sampler_precision import WeightCopies

CPU_BF16_ENV = "SELFEVOLVE_CPU_BF16"  # 1 or 0: what model.matmul_dtype=auto takes this CPU to have (tests pin 0)


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies in bf16 itself (AVX512-BF16; Intel's AMX CPUs have it too). Without it oneDNN
    emulates bf16 on wider units and ``bf16_update`` buys no speed. ``SELFEVOLVE_CPU_BF16=1|0`` overrides the
    answer: a run reproducible across machines, and the tests, which are pinned to fp32."""
    forced = os.environ.get(CPU_BF16_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    if forced:
        raise ConfigError(f"{CPU_BF16_ENV}={forced!r}: set 1 (this CPU has bf16 arithmetic), 0 (it has not) or "
                          f"nothing (ask torch)")
    check = getattr(torch.cpu, "_is_avx512_bf16_supported", None)  # private in torch 2.13: absent means no
    return bool(check and check())


def auto_choice(model_cfg) -> str:
    """``model.matmul_dtype=auto`` made concrete: ``bf16_update`` where the model computes in fp32 because it runs
    on a CPU (``model.dtype=auto``), that CPU has bf16 arithmetic, and generation keeps the model's precision
    (``model.sampler_dtype=same``); ``same`` everywhere else. An explicit ``model.dtype=fp32`` asks for fp32
    throughout. Measured on an EPYC with AVX512-BF16 (docs/benchmarks.md, "The automatic choice"): the default
    run alone in 8:23 against fp32's 11:07, ten seeds of it 40.6 % ± 11.3 held out against fp32's 42.5 % ± 14.0,
    and ``evolve`` not worse over seven seeds (59.6 % ± 18.6 against 52.2 % ± 14.6)."""
    if model_cfg.matmul_dtype != "auto":
        return model_cfg.matmul_dtype
    if model_cfg.dtype != "auto" or model_cfg.sampler_dtype != "same" or torch.cuda.is_available():
        return "same"  # on a GPU model.dtype=auto is bf16 already
    return "bf16_update" if cpu_has_bf16() else "same"


def _forward(self, x: torch.Tensor) -> torch.Tensor:
    """A linear layer whose weight is held in a lower precision: the product in it, the output in ``x``'s."""
    return F.linear(x.to(self.weight.dtype), self.weight, self.bias).to(x.dtype)


def frozen_linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """Every frozen ``nn.Linear`` of ``model`` but its output head (and a layer tied to it). Trainable layers (the
    adapter, a value head) are not among them."""
    head = model.get_output_embeddings()
    return [m for m in model.modules()
            if type(m) is torch.nn.Linear and m is not head and not m.weight.requires_grad
            and m.weight is not getattr(head, "weight", None)]


def products_in(model: torch.nn.Module, dtype: torch.dtype) -> int:
    """Hold every layer of :func:`frozen_linears` in ``dtype`` and compute its product in it (the output in the
    input's precision). Returns how many layers changed."""
    layers = frozen_linears(model)
    for module in layers:
        module.weight.data = module.weight.data.to(dtype)
        if module.bias is not None:
            module.bias.data = module.bias.data.to(dtype)
        module.forward = types.MethodType(_forward, module)
    # the fp32 originals were freed into a heap that is never trimmed (models/allocator.py): hand them back once,
    # or the process keeps them resident until other blocks happen to reuse them
    allocator.release_freed_memory()
    return len(layers)


class UpdateProducts(WeightCopies):
    """The layers of :func:`frozen_linears` compute in ``dtype`` within :meth:`active` (the update) and in their
    own precision outside it: a copy of each weight in ``dtype``, made once (the weights are frozen)."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype):
        layers = frozen_linears(model)
        for module in layers:
            module.forward = types.MethodType(_forward, module)  # casts nothing while the weight is fp32
        super().__init__([p for m in layers for p in (m.weight, m.bias) if p is not None], dtype)
