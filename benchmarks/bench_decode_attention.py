"""One decode step's attention in one layer: torch's fused SDPA kernel against ``models/decode_attention.py``'s
two matrix products, in fp32 and bf16, as the cache grows.

Shapes are SmolLM2-135M's (9 query heads, 3 key/value heads, head size 64); the fused call is the one transformers
makes on the CPU with grouped heads (``enable_gqa``, ``models/compat.py``) and a padding mask. Alternated, best of
the repeats; one thread unless ``--threads``.

    python benchmarks/bench_decode_attention.py
    python benchmarks/bench_decode_attention.py --rows 32 --lengths 300 700 --threads 2
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from selfevolve.models.decode_attention import single_query_attention


def best_ms(fn, n: int, repeats: int = 3) -> float:
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--lengths", type=int, nargs="+", default=[300, 700])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=50, help="calls per timed repeat")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    B, H, Hkv, D = args.rows, 9, 3, 64
    summary = []
    print("| cached positions | dtype | fused SDPA (ms) | two products (ms) | fused / products |")
    print("|---:|---|---:|---:|---:|")
    for L in args.lengths:
        for dtype in (torch.float32, torch.bfloat16):
            q = torch.randn(B, H, 1, D, dtype=dtype)
            k, v = torch.randn(B, Hkv, L, D, dtype=dtype), torch.randn(B, Hkv, L, D, dtype=dtype)
            mask = torch.ones(B, 1, 1, L, dtype=torch.bool)
            mask[: B // 2, ..., :7] = False  # left padding on half the rows
            fused = best_ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True),
                            args.calls)
            ours = best_ms(lambda: single_query_attention(q, k, v, mask, D ** -0.5), args.calls)
            name = str(dtype).removeprefix("torch.")
            print(f"| {L} | {name} | {fused:.2f} | {ours:.2f} | {fused / ours:.2f}x |")
            summary.append(f"{L} {name} {fused:.2f}/{ours:.2f} ms")
    print(f"SUMMARY decode attention, one layer, {B} rows, {args.threads} thread(s), fused SDPA/two products: "
          + "; ".join(summary))


if __name__ == "__main__":
    main()
