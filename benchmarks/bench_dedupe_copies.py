"""What a later turn's dedupe costs besides the model: the cache copies around the prefill of the distinct rows.

A later turn whose rows share prompts prefills one row of each distinct prompt and gives every row the result.
Two ways to do that, timed on caches of a training rollout's size with random keys and values (no model: the
model's writes are stood in for by appends of the same shapes, the same in both):

- ``select/expand`` (commit ``5e37ef5``): keep the distinct rows (``KVState.select``), prefill, then copy the
  whole cache back out to every row (``batch_select_indices``), which the next decode step copies once more into
  a buffer with spare room;
- ``new positions`` (the default since): prefill on a copy of the distinct rows (``KVState.gather``) and append
  only the new positions to every row's own buffer (``GrowingCache.extend_rows``).

    python benchmarks/bench_dedupe_copies.py                       # 32 rows, 600 cached, 8 distinct, 40 new
    python benchmarks/bench_dedupe_copies.py --rows 64 --cached 400 --distinct 58 --new 30   # an evaluation turn
"""

from __future__ import annotations

import argparse
import time

import torch

from selfevolve.models.generation import KVState
from selfevolve.models.kv_cache import GrowingCache

LAYERS, KV_HEADS, HEAD_DIM = 30, 3, 64  # SmolLM2-135M


def _write(cache: GrowingCache, rows: int, positions: int) -> None:
    """The model's appends of one forward: ``positions`` new keys and values in every layer."""
    for layer in range(LAYERS):
        shape = (rows, KV_HEADS, positions, HEAD_DIM)
        cache.update(torch.randn(shape), torch.randn(shape), layer)


def _state(rows: int, cached: int) -> KVState:
    cache = GrowingCache()
    _write(cache, rows, cached)
    return KVState(cache, torch.ones(rows, cached, dtype=torch.long), [[0]] * rows, torch.full((rows,), cached))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--cached", type=int, default=600, help="positions already in the cache")
    ap.add_argument("--distinct", type=int, default=8, help="distinct prompts among the rows")
    ap.add_argument("--new", type=int, default=40, help="positions the turn's prompt adds")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    rows = torch.tensor([i % args.distinct for i in range(args.rows)])  # row i shares the prompt of row i % distinct
    first = list(range(args.distinct))
    times: dict[str, list[float]] = {"select/expand": [], "new positions": []}
    for _ in range(args.reps):
        s = _state(args.rows, args.cached)
        t = time.perf_counter()
        s = s.select(first)
        _write(s.cache, args.distinct, args.new)
        s.cache.batch_select_indices(rows)
        _write(s.cache, args.rows, 1)  # the first decode step
        times["select/expand"].append(time.perf_counter() - t)

        s = _state(args.rows, args.cached)
        t = time.perf_counter()
        sub = s.gather(first)
        _write(sub.cache, args.distinct, args.new)
        s.cache.extend_rows(sub.cache, rows)
        _write(s.cache, args.rows, 1)
        times["new positions"].append(time.perf_counter() - t)
    old, new = min(times["select/expand"]), min(times["new positions"])
    for k, v in times.items():
        print(f"{k:14s} " + " ".join(f"{x * 1000:6.0f} ms" for x in v))
    print(f"SUMMARY new positions / select-expand {new / old:.2f}x ({old * 1000:.0f} ms -> {new * 1000:.0f} ms a turn, "
          f"best of {args.reps}); {args.rows} rows, {args.cached} cached, {args.distinct} distinct, {args.new} new; "
          f"torch threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
