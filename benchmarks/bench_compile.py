"""Does `torch.compile` pay for the update on this CPU? One micro-batch of the update (the default micro-batch:
8 rows × 512 tokens = 4,096, two reply spans of 60 tokens per row carrying the loss), forward and backward
through `Policy.forward_rows` with the default LoRA, eager against the decoder body compiled
(`torch.compile(..., dynamic=True)`), side by side in one process on the same weights and ids.

    python benchmarks/bench_compile.py                     # SmolLM2-135M, fp32 (what model.dtype=auto picks here)
    python benchmarks/bench_compile.py --rows 4 --length 256 --reps 2

Prints the eager and compiled times (best of ``--reps``), the compile time (first call), the largest difference in
the action tokens' log-probs, and a SUMMARY line.
"""

from __future__ import annotations

import argparse
import time

import torch

from selfevolve.config import load_config
from selfevolve.models.loading import load_model
from selfevolve.models.policy import Policy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    model, tok = load_model(args.model, args.dtype)
    policy = Policy(model, tok, lora=load_config(overrides=[]).model.lora)
    policy.model.eval()
    ids = torch.randint(100, 40_000, (args.rows, args.length), device=policy.device)
    mask = torch.ones_like(ids)
    loss_mask = torch.zeros_like(ids)
    for start in (args.length * 2 // 5, args.length * 4 // 5):  # two reply spans, as a two-turn episode
        loss_mask[:, start:start + args.length // 8] = 1

    def step() -> torch.Tensor:
        logp, _, _ = policy.forward_rows(ids, mask, loss_mask, with_entropy=True)
        (-logp.mean()).backward()
        return logp.detach()

    def best(n: int) -> tuple[float, torch.Tensor]:
        times, out = [], None
        for _ in range(n):
            t = time.perf_counter()
            out = step()
            times.append(time.perf_counter() - t)
        return min(times), out

    eager_s, eager_logp = best(args.reps)
    print(f"eager: forward + backward {eager_s:.2f} s ({args.rows * args.length / eager_s:.0f} tokens/s)", flush=True)
    body, _ = policy.body_and_head()
    body.forward = torch.compile(body.forward, dynamic=True)
    t = time.perf_counter()
    step()
    compile_s = time.perf_counter() - t
    print(f"compiled: first call (compiling) {compile_s:.1f} s", flush=True)
    comp_s, comp_logp = best(args.reps)
    diff = float((eager_logp - comp_logp).abs().max())
    print(f"compiled: forward + backward {comp_s:.2f} s ({args.rows * args.length / comp_s:.0f} tokens/s)")
    print(f"SUMMARY compiled/eager {comp_s / eager_s:.2f}x per micro-batch ({eager_s:.2f} s -> {comp_s:.2f} s), "
          f"compile {compile_s:.0f} s, max |d logp| {diff:.1e}; torch threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
