"""Where an update micro-batch's time goes, by operator: matrix products, attention, the rest.

One micro-batch shaped like the default run's (``--rows`` episodes of ``--length`` tokens whose first
``--prefix`` tokens are the shared system prompt and few-shot turns, encoded once as the update does; a
two-token reply every 50 tokens carries the loss), forward and backward through ``Policy.forward_rows`` with
the default LoRA, under ``torch.profiler``. Operators are grouped as matrix products (``aten::mm``,
``addmm``, ``bmm``), attention (the fused scaled-dot-product kernels, forward and backward) and everything
else (norms, activations, rotary embeddings, copies, the loss).

It also gives the micro-batch's rate the way ``bench_profile.py`` counts it (2 · N_body per token fed, the
same again for the backward through the layers it runs through, the shared prefix counted once), over the whole
micro-batch and over its matrix products alone, against the machine's compute limit (issue 19's large `linear`,
timed in the same run by ``bench_rollout.measured_limit``; ``--limit-gflops`` sets it instead).

    python benchmarks/bench_update_ops.py                      # 8 rows x 420 tokens, 140 shared
    python benchmarks/bench_update_ops.py --threads 1
    python benchmarks/bench_update_ops.py model.lora.top_layers=15
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from bench_rollout import measured_limit, param_counts
from selfevolve.build import products_in_other_precision
from selfevolve.config import load_config
from selfevolve.models.loading import load_model
from selfevolve.models.policy import Policy

MATMUL = ("aten::mm", "aten::addmm", "aten::bmm")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--length", type=int, default=420)
    ap.add_argument("--prefix", type=int, default=140)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--limit-gflops", type=float, default=None, help="default: measured (measured_limit)")
    ap.add_argument("override", nargs="*", help="config overrides (dotted.key=value), e.g. model.lora.top_layers=15")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = load_config(overrides=args.override)
    model, tok = load_model(cfg.model.name, cfg.model.dtype)  # auto: fp32 on a CPU; model.dtype=bf16 to compare
    policy = Policy(model, tok, lora=cfg.model.lora)
    products_in_other_precision(policy, cfg.model)  # model.matmul_dtype=bf16: the body's products in bf16
    policy.model.eval()
    R, L, P = args.rows, args.length, args.prefix
    ids = torch.randint(100, 40_000, (R, L))
    ids[:, :P] = ids[0, :P]
    mask = torch.ones_like(ids)
    loss_mask = torch.zeros_like(ids)
    for start in range(P + 10, L - 1, 50):
        loss_mask[:, start:start + 2] = 1

    def step() -> None:
        with policy.updating():  # model.matmul_dtype=bf16_update: the update's precision
            logp, _, _ = policy.forward_rows(ids, mask, loss_mask, with_entropy=True, prefix_len=P)
            (-logp.mean()).backward()

    step()  # warm-up: allocations, kernel selection
    t = time.perf_counter()
    step()
    plain_s = time.perf_counter() - t
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    groups = {"matrix products": 0.0, "attention": 0.0, "the rest": 0.0}
    for ev in prof.key_averages():
        sec = ev.self_cpu_time_total / 1e6
        if ev.key in MATMUL:
            groups["matrix products"] += sec
        elif "scaled_dot_product" in ev.key:
            groups["attention"] += sec
        else:
            groups["the rest"] += sec
    total = sum(groups.values())
    n_body, n_head = param_counts(policy.model)
    # the backward runs only down to the lowest adapted layer (model.lora.top_layers); the layers below hold no LoRA
    layers = policy.model.get_base_model().model.layers
    lowest = min(i for i, layer in enumerate(layers) if any(p.requires_grad for p in layer.parameters()))
    n_back = n_body - sum(p.numel() for layer in layers[:lowest] for p in layer.parameters())
    tokens = P + R * (L - P)  # the prefix is encoded once
    flops = 2.0 * (n_body + n_back) * tokens + 2.0 * n_head * int(loss_mask.sum())
    for name, sec in groups.items():
        print(f"{name:16s} {sec:7.2f} s {sec / total:6.1%}")
    if args.limit_gflops is None:
        args.limit_gflops = measured_limit()
    whole, mm = flops / plain_s / 1e9, flops / groups["matrix products"] / 1e9 * (plain_s / total)
    print(f"micro-batch {plain_s:.2f} s without the profiler ({tokens} tokens fed); counted FLOPs {flops / 1e9:.0f} G: "
          f"{whole:.1f} GFLOP/s ({whole / args.limit_gflops:.0%} of {args.limit_gflops:.0f}), over the matrix "
          f"products' time alone {mm:.1f} GFLOP/s ({mm / args.limit_gflops:.0%})")
    print(f"SUMMARY update micro-batch {R}x{L} ({P} shared): matrix products {groups['matrix products'] / total:.0%}, "
          f"attention {groups['attention'] / total:.0%}, the rest {groups['the rest'] / total:.0%}; "
          f"{whole / args.limit_gflops:.0%} of the limit overall, {mm / args.limit_gflops:.0%} within the matrix "
          f"products; torch threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
