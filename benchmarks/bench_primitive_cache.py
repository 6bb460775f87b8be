"""oneDNN's primitive cache (``models/allocator.py``, ``bound_primitive_cache``): the memory a process keeps after
bf16 matrix products of many lengths, and what a product costs, with the cache at oneDNN's default (1,024), at the
run's 16, and off (0); fp32 beside them, which does not go through oneDNN.

The products are the update's with SmolLM2-135M's four frozen shapes (hidden 576, keys and values 192, MLP
1,536): for each length, ``x @ W.T`` forward and ``g @ W`` for the input's gradient, in bf16 as
``model.matmul_dtype=bf16_update`` computes them.
- **lengths**: ``--lengths`` micro-batches of random lengths (500-6,000 tokens, the same for every arm); the
  process's resident memory after them, against before.
- **layers**: the products of one micro-batch's 30 layers at each of 20 short lengths (16-64 tokens, where building a
  primitive is not hidden behind the product's own time); microseconds a product, the median of the lengths.

The heap is a run's update's (``keep_freed_memory``, ``heap_not_grown_by_large_blocks``). Each arm runs in a
process of its own (oneDNN reads its cache's size once), one torch thread, one after the other,
in the order given, twice over by default (``--rounds``):

    python benchmarks/bench_primitive_cache.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

SHAPES = [(576, 576), (192, 576), (1536, 576), (576, 1536)]  # (out, in): q and o, k and v, gate and up, down
ARMS = ["1024", "16", "0", "fp32"]


def rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9


def worker(arm: str, lengths: int) -> dict:
    from selfevolve.models import allocator

    if arm == "16":
        applied = allocator.bound_primitive_cache()  # the library's own bound, as a run sets it at load
        if not applied or allocator.PRIMITIVE_CACHE != 16:
            raise SystemExit("the run's primitive cache bound was not applied as 16")
    elif arm != "fp32":
        os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = arm
    if not allocator.keep_freed_memory():  # the heap as a run's update has it
        raise SystemExit("the run's malloc settings are not in force (SELFEVOLVE_MALLOC or MALLOC_*_ is set)")
    with allocator.heap_not_grown_by_large_blocks():
        return products(arm, lengths)


def products(arm: str, lengths: int) -> dict:
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dtype = torch.float32 if arm == "fp32" else torch.bfloat16
    weights = [torch.randn(o, i).to(dtype) for o, i in SHAPES]

    def inputs(m: int) -> list:
        """Per weight, a micro-batch of ``m`` tokens' input and its output's gradient."""
        return [(torch.randn(m, w.shape[1]).to(dtype), torch.randn(m, w.shape[0]).to(dtype)) for w in weights]

    rng = random.Random(0)
    before = rss_gb()
    for _ in range(lengths):
        for w, (x, g) in zip(weights, inputs(rng.randint(500, 6000))):
            F.linear(x, w), g @ w
    after = rss_gb()
    per_length = []
    for _ in range(20):
        short = inputs(rng.randint(16, 64))
        t = time.perf_counter()
        for _layer in range(30):
            for w, (x, g) in zip(weights, short):
                F.linear(x, w), g @ w
        per_length.append((time.perf_counter() - t) / (30 * 2 * len(weights)) * 1e6)
    return {"arm": arm, "rss_before_gb": before, "rss_after_gb": after, "us_per_product": statistics.median(per_length)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", nargs="+", default=ARMS, help="cache sizes, or fp32")
    ap.add_argument("--lengths", type=int, default=200, help="micro-batch lengths in the memory phase")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.lengths)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ONEDNN_PRIMITIVE_CACHE_CAPACITY", None)
    env.pop("DNNL_PRIMITIVE_CACHE_CAPACITY", None)
    results: dict[str, list[dict]] = {a: [] for a in args.arms}
    for r in range(args.rounds):
        for arm in args.arms:
            out = subprocess.run([sys.executable, __file__, "--worker", arm, "--lengths", str(args.lengths)],
                                 env=env, capture_output=True, text=True, check=True).stdout
            res = json.loads(out.strip().splitlines()[-1])
            results[arm].append(res)
            print(f"round {r} {arm:>5}: resident {res['rss_before_gb']:.2f} -> {res['rss_after_gb']:.2f} GB, "
                  f"{res['us_per_product']:.0f} us a short product", flush=True)
    summary = []
    for arm, rs in results.items():
        grown = statistics.median(x["rss_after_gb"] - x["rss_before_gb"] for x in rs)
        us = statistics.median(x["us_per_product"] for x in rs)
        summary.append(f"{arm}: +{grown:.2f} GB, {us:.0f} us")
    print(f"summary ({args.lengths} lengths, medians of {args.rounds} rounds; cache size: kept memory, a short "
          f"product): " + "; ".join(summary))


if __name__ == "__main__":
    main()
