"""What differs between the transformers releases that ``transformers>=5.0`` admits.

transformers 5.24 (what a fresh install got on 2026-11-25) takes a model's key/value cache as ``cache``; the
older name ``past_key_values`` still works there, with a FutureWarning on every run, and is to be removed in
5.40. Earlier releases take ``past_key_values`` (and would swallow an unknown ``cache`` into ``**kwargs`` without
using it). So the name is read from the model's own signature, once per class.

Its SDPA attention also copies grouped key/value heads whenever a mask is given (:func:`prefer_grouped_attention`
switches that off on the CPU).
"""

from __future__ import annotations

import inspect
import os
from functools import lru_cache

import torch


@lru_cache(maxsize=None)
def _cache_name(cls: type) -> str:
    params = inspect.signature(cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_kwargs(module, cache) -> dict:
    """``{name: cache}`` under the name ``module``'s forward takes a key/value cache by: pass it as
    ``module(..., **cache_kwargs(module, cache), use_cache=True)``. A peft wrapper is looked through to the
    transformers model it wraps (it forwards keyword arguments unchanged)."""
    inner = module
    while hasattr(inner, "get_base_model"):  # PeftModel and its subclasses
        inner = inner.get_base_model()
    return {_cache_name(type(inner)): cache}


SDPA_GQA_ENV = "TRANSFORMERS_SDPA_FORCE_GQA"
_set_here = False  # whether this process's value of SDPA_GQA_ENV is ours (not the user's)


def prefer_grouped_attention(device) -> None:
    """On the CPU, let torch's fused attention read the grouped key/value heads as they are (``enable_gqa``).

    transformers passes ``enable_gqa`` only when there is no attention mask; with one — every batch of ours has
    padding — it first copies each key/value head once per query head of its group (``repeat_kv``: three copies of
    the whole cache per layer for SmolLM2's 9 query and 3 key/value heads). torch's CPU flash kernel takes a mask
    and grouped heads together, with the same outputs (tested), so the copies and, in the update, their backward
    are saved: 0.96x an update micro-batch's forward and backward (docs/benchmarks.md). transformers reads this
    switch, an environment variable of the process, at every attention call. A value the user set is kept. On
    CUDA a mask with grouped heads would make torch fall back from the fused kernels to the plain one, so a model
    loaded onto CUDA takes back the value this function set.
    """
    global _set_here
    if torch.device(device).type == "cpu":
        if SDPA_GQA_ENV not in os.environ:
            os.environ[SDPA_GQA_ENV] = "1"
            _set_here = True
    elif _set_here:
        if os.environ.get(SDPA_GQA_ENV) == "1":  # still ours: not changed since
            del os.environ[SDPA_GQA_ENV]
        _set_here = False
