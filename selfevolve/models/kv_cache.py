"""A key/value cache that appends in place: the generation loop's cache, with room to grow.

transformers' ``DynamicCache`` appends a step's keys and values with ``torch.cat``, which allocates a new tensor
for every layer and copies the whole cache into it, on every decode step: at 32 rows and 300 cached positions
that is 60 fresh tensors of 7 MB a step. On the AVX2 CPU of 2026-11-25 those copies (and the page faults of the
freshly allocated memory) took about a third of a decode step (``benchmarks/bench_kv_cache.py``).

:class:`GrowingCache` keeps each layer's keys and values in a buffer with spare positions at the end: an append
writes into the spare positions, and only a full buffer is copied into a larger one (by half more, at least
``MIN_SPARE`` positions), so the cost of copying is amortised over many appends. The model sees a view of the
filled positions, holding exactly the numbers ``torch.cat`` would have produced, so the results are identical
(tested). The row operations (selecting rows, repeating them, copying some into a new cache) copy the filled
positions into a buffer with the same spare room, and cropping only forgets positions: after any of them the next
append still writes in place. (``DynamicCache``'s versions replace a layer's tensors with full ones, so the next
append copied the whole cache once more: a second copy of every row a turn, measured in the sixth session,
2026-11-25/26.)

Generation only: an in-place write into a tensor that autograd saved for the backward would corrupt the
gradient, so with gradients enabled an append falls back to ``torch.cat``.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

MIN_SPARE = 64  # positions added at least when a buffer grows: a turn's decode steps then fit without a copy


def grown_capacity(needed: int) -> int:
    """Positions to allocate when ``needed`` no longer fit: half as many again, at least ``MIN_SPARE`` more, so
    that n appended positions cost O(n) copying in all, not O(n²) as with one ``torch.cat`` per append.

    Half, not a quarter: a turn of a FrozenLake episode adds ~65 positions (observation and reply), so with a
    quarter a cache under ~500 positions was copied into a new buffer on nearly every turn."""
    return needed + max(needed // 2, MIN_SPARE)


def _append(buf: torch.Tensor, n: int, new: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Write ``new`` [B, H, m, D] after the ``n`` filled positions of ``buf`` [B, H, cap, D]; a new buffer when
    it does not fit (or when ``buf`` holds nothing yet). Returns the buffer and its filled length."""
    m = new.shape[-2]
    if buf.dim() != 4 or n == 0:
        buf = new.new_empty(*new.shape[:-2], grown_capacity(m), new.shape[-1])
    elif buf.shape[:2] != new.shape[:2] or buf.shape[-1] != new.shape[-1]:
        # torch.cat would refuse; a slice copy would broadcast one row into all of them
        raise ValueError(f"cannot append keys/values of shape {tuple(new.shape)} to a cache of {tuple(buf.shape)}")
    elif n + m > buf.shape[-2]:
        grown = buf.new_empty(*buf.shape[:-2], grown_capacity(n + m), buf.shape[-1])
        grown[:, :, :n].copy_(buf[:, :, :n])
        buf = grown
    buf[:, :, n: n + m].copy_(new)
    return buf, n + m


def _rows_with_room(buf: torch.Tensor, n: int, rows: torch.Tensor) -> torch.Tensor:
    """A new buffer of ``buf``'s capacity holding, in its first ``n`` positions, ``buf``'s rows ``rows`` (repeats
    allowed). Only the filled positions are copied: gathering them straight into the new buffer took a quarter of
    the time of ``index_select`` over the whole buffer (0.54 against 2.4 ms for 30 rows of 600 of 900 positions).
    Under autograd (the update's cache) a plain ``index_select``: ``out=`` has no gradient."""
    if torch.is_grad_enabled() and buf.requires_grad:
        return buf[:, :, :n].index_select(0, rows)
    out = buf.new_empty(len(rows), *buf.shape[1:])
    torch.index_select(buf[:, :, :n], 0, rows, out=out[:, :, :n])
    return out


class GrowingLayer(DynamicLayer):
    """One layer's cache: ``keys``/``values`` are views of the first filled positions of larger buffers.

    Assigning ``keys`` or ``values`` makes the assigned tensor the buffer, full; it is copied into a larger buffer
    at the next append. The row operations below keep the spare room instead."""

    def __init__(self, **kwargs):
        self._kbuf = self._vbuf = None
        self._kn = self._vn = 0
        super().__init__(**kwargs)

    @staticmethod
    def _filled(buf, n):
        return buf if buf is None or buf.dim() != 4 else buf[:, :, :n]

    @staticmethod
    def _length(t):
        return t.shape[-2] if t is not None and t.dim() == 4 else 0

    @property
    def keys(self):
        return self._filled(self._kbuf, self._kn)

    @keys.setter
    def keys(self, t):
        self._kbuf, self._kn = t, self._length(t)

    @property
    def values(self):
        return self._filled(self._vbuf, self._vn)

    @values.setter
    def values(self, t):
        self._vbuf, self._vn = t, self._length(t)

    # Row operations that keep the spare room, so that the next append still writes in place.
    def _select_rows(self, indices: torch.Tensor) -> None:
        self._kbuf = _rows_with_room(self._kbuf, self._kn, indices)
        self._vbuf = _rows_with_room(self._vbuf, self._vn, indices)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() > 0:
            self._select_rows(indices.to(self._kbuf.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            rows = torch.arange(self._kbuf.shape[0], device=self._kbuf.device)
            self._select_rows(rows.repeat_interleave(repeats))

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last ``-tokens_to_remove`` positions (a negative count, as ``DynamicLayer.crop`` takes); the
        next append overwrites them."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of positions to remove, not {tokens_to_remove}")
        if self.is_initialized and tokens_to_remove:
            self._kn = max(self._kn + tokens_to_remove, 0)
            self._vn = max(self._vn + tokens_to_remove, 0)

    def rows(self, indices: torch.Tensor) -> "GrowingLayer":
        """A new layer holding rows ``indices`` of this one (repeats allowed), with its own buffers."""
        layer = GrowingLayer()
        if self.is_initialized:
            layer.lazy_initialization(self._kbuf, self._vbuf)
        if self.get_seq_length() > 0:
            layer._kbuf, layer._vbuf, layer._kn, layer._vn = self._kbuf, self._vbuf, self._kn, self._vn
            layer._select_rows(indices.to(self._kbuf.device))
        return layer

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if torch.is_grad_enabled() and (key_states.requires_grad or value_states.requires_grad):
            return super().update(key_states, value_states, *args, **kwargs)
        self._kbuf, self._kn = _append(self._kbuf, self._kn, key_states)
        self._vbuf, self._vn = _append(self._vbuf, self._vn, value_states)
        return self.keys, self.values


class GrowingCache(DynamicCache):
    """A ``DynamicCache`` whose layers are :class:`GrowingLayer` (created as the model's layers first write)."""

    def __init__(self):
        super().__init__()
        self.layer_class_to_replicate = GrowingLayer

    def rows(self, indices: torch.Tensor) -> "GrowingCache":
        """A new cache holding rows ``indices`` of this one, in that order, repeats allowed; this one is unchanged.
        One copy of the chosen rows, spare room included (appending to a copy of full tensors made a second)."""
        out = GrowingCache()
        out.layers = [layer.rows(indices) for layer in self.layers]
        return out

    def extend_rows(self, other: DynamicCache, rows: torch.Tensor) -> None:
        """Append to row i the positions ``other`` holds beyond this cache, from ``other``'s row ``rows[i]``: a
        prefill run on a copy of some rows (one of each distinct prompt), given to all of them. Only the new
        positions are copied, into each row's spare room."""
        for whole, part in zip(self.layers, other.layers):
            n = whole.keys.shape[-2]
            whole.update(part.keys[:, :, n:].index_select(0, rows), part.values[:, :, n:].index_select(0, rows))
