"""What each recomputation of the update's backward costs (``models/recompute.py``: the gated MLP's activation;
``models/tree_attention.py``: the tree's attention, through ``GroupsAttended`` on the CPU since 2026-12-05, under
a checkpoint before), on the cloning step's update.

The batch: the default warm start's first step (16 expert FrozenLake episodes from the training seeds,
``bench_memory.py``'s ``warm_start_batch``), through ``ppo_update`` with 4 minibatches and the ``nll`` objective, as
the warm start and ``selfevolve evolve``'s cloning step run it. Learning rate 0, so every repetition sees the same
weights. Five ways alternate in one process, one torch thread: the default (the MLP's activation recomputed, the
attention through ``GroupsAttended``); the attention under the checkpoint instead, as before 2026-12-05
(``checkpoint``); the MLP's activation recomputed and the attention keeping everything (``mlp``); the attention's
checkpoint alone (``attention``); and nothing recomputed, every activation kept (``none``). Each update is timed
``--reps`` times and the median kept; the losses and the adapter's gradients after each way's last update are
compared (bit for bit). The peak memory of each way is not separable in one process: ``bench_memory.py`` and
``bench_memory_run.py`` measure memory.

    OMP_NUM_THREADS=1 python benchmarks/bench_recompute.py --reps 3
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
from torch.utils.checkpoint import checkpoint

from bench_memory import one_thread_cloning_setup  # this folder is on the path: the script's own
from transformers import AttentionInterface

from selfevolve.models import recompute, tree_attention
from selfevolve.objectives import update

# the parts recomputed, and whether the attention goes under the checkpoint (the way before 2026-12-05)
WAYS = {"default": (("mlp", "attention"), False), "checkpoint": (("mlp", "attention"), True),
        "mlp": (("mlp",), False), "attention": (("attention",), True), "none": ((), False)}
MODULES = {"mlp": recompute, "attention": tree_attention}  # each looks up ``recomputing`` in its own namespace


def checkpointed(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """The tree attention as it ran before 2026-12-05: under the checkpoint wherever it recomputes."""
    plan = kwargs[tree_attention.KWARG]
    q, k, v = query[0], key[0], value[0]
    if plan.prefix_kv is not None:
        pk, pv = plan.prefix_kv[module.layer_idx]
        k, v = torch.cat([pk, k], dim=1), torch.cat([pv, v], dim=1)
    if tree_attention.recomputing(q, k, v):
        out = checkpoint(tree_attention._attend, q, k, v, plan, scaling, use_reentrant=False,
                         preserve_rng_state=False)
    else:
        out = tree_attention._attend(q, k, v, plan, scaling)
    return out[None], None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    cfg, policy, (rows, _), optimizer = one_thread_cloning_setup()
    on = recompute.recomputing
    times = {w: [] for w in WAYS}
    losses, grads = {}, {}
    for _ in range(args.reps):
        for way, (parts, old) in WAYS.items():
            for part, module in MODULES.items():
                module.recomputing = on if part in parts else (lambda *tensors: False)
            AttentionInterface.register(tree_attention.NAME, checkpointed if old else tree_attention.tree_attention)
            try:
                t = time.perf_counter()
                st = update.ppo_update(policy, optimizer, rows, cfg.algo, random.Random(0), objective="nll")
                times[way].append(time.perf_counter() - t)
            finally:
                for module in MODULES.values():
                    module.recomputing = on
                AttentionInterface.register(tree_attention.NAME, tree_attention.tree_attention)
            losses[way] = st["loss/bc"]
            grads[way] = [p.grad.clone() for p in policy.trainable_parameters() if p.grad is not None]
    same = len(set(losses.values())) == 1 and all(
        len(grads[w]) == len(grads["default"]) and all(torch.equal(a, b) for a, b in zip(grads[w], grads["default"]))
        for w in WAYS)
    med = {w: statistics.median(t) for w, t in times.items()}
    for way in WAYS:
        print(f"{way}: {med[way]:.2f} s (runs {', '.join(f'{t:.2f}' for t in times[way])}), loss {losses[way]:.6f}")
    print(f"SUMMARY recomputation (16 expert episodes, 4 minibatches, nll, 1 thread, {args.reps} reps alternated): "
          + ", ".join(f"{w} {med[w] / med['none']:.3f}x" for w in WAYS if w != "none")
          + f" the time of none; same loss and gradients: {same}")


if __name__ == "__main__":
    main()
