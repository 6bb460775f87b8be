"""What a decode step costs as the KV cache grows, and how much of it is the cache's own growth.

One batch of rows (default 32, as a training rollout) is prefilled to each cache length, then timed for single-
token decode steps (`logits_to_keep=1`, as `Policy.generate`). Beside it: one `torch.cat` of a layer's key
cache with one new position, times the 2 × layers appends a step makes with transformers' `DynamicCache`, which
is what a preallocated (static) cache would save.

    python benchmarks/bench_decode.py                       # SmolLM2-135M, fp32, cache lengths 50 300 600
    python benchmarks/bench_decode.py --rows 8 --lengths 100 400
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import DynamicCache

from selfevolve.models.compat import cache_kwargs
from selfevolve.models.loading import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--lengths", type=int, nargs="+", default=[50, 300, 600])
    ap.add_argument("--steps", type=int, default=6, help="timed decode steps per length (median reported)")
    args = ap.parse_args()
    torch.manual_seed(0)
    model, _ = load_model(args.model, args.dtype)
    torch.set_grad_enabled(False)
    layers = model.config.num_hidden_layers
    line = []
    for length in args.lengths:
        cache = DynamicCache()
        model(input_ids=torch.randint(100, 40_000, (args.rows, length), device=model.device),
              **cache_kwargs(model, cache), use_cache=True, logits_to_keep=1)
        nxt = torch.randint(100, 40_000, (args.rows, 1), device=model.device)
        times = []
        for _ in range(args.steps):
            t = time.perf_counter()
            model(input_ids=nxt, **cache_kwargs(model, cache), use_cache=True, logits_to_keep=1)
            times.append(time.perf_counter() - t)
        step = sorted(times)[len(times) // 2]
        keys = cache.layers[0].keys
        t = time.perf_counter()
        for _ in range(20):
            torch.cat([keys, keys[:, :, :1]], dim=-2)
        appends = (time.perf_counter() - t) / 20 * 2 * layers
        print(f"cache {length:4d}: decode step {step * 1000:6.0f} ms; cache appends {appends * 1000:5.1f} ms "
              f"({appends / step:.0%}); keys {tuple(keys.shape)}", flush=True)
        line.append(f"{length}: {step * 1000:.0f} ms, appends {appends / step:.0%}")
    print(f"SUMMARY decode step ({args.rows} rows, torch threads {torch.get_num_threads()}) by cache length: "
          + "; ".join(line))


if __name__ == "__main__":
    main()
