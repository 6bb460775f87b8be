"""What differs between the transformers releases that ``transformers>=5.0`` admits.

transformers 5.24 (what a fresh install got on 2026-11-25) takes a model's key/value cache as ``cache``; the
older name ``past_key_values`` still works there, with a FutureWarning on every run, and is to be removed in
5.40. Earlier releases take ``past_key_values`` (and would swallow an unknown ``cache`` into ``**kwargs`` without
using it). So the name is read from the model's own signature, once per class.
"""

from __future__ import annotations

import inspect
from functools import lru_cache


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
