"""The update's heap threshold (``models/allocator.py``): time and peak memory of the warm start's update with
blocks from N MiB up mmapped, against no threshold in the update at all.

The batch: the default warm start's first step (16 expert FrozenLake episodes from the training seeds,
``bench_memory.py``'s ``warm_start_batch``), through the trainer's ``ppo_update`` with ``algo.minibatches=4`` (the
warm start's 4 optimizer steps a step): ``nll`` as the warm start, and ``ppo`` with advantages drawn from N(0, 1).
Learning rate 0, so every repetition sees the same weights; each update timed ``--reps`` times, the median kept.

Each setting runs in a process of its own (the peak, ``ru_maxrss``, is a process's), two processes at a time, one
torch thread each, in the order given (so that the pairs share the 2-core CPU's load):

    python benchmarks/bench_heap_threshold.py --settings 1 none 4 16
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path


def worker(setting: str, reps: int) -> dict:
    import torch

    import selfevolve.models.allocator as allocator
    from bench_memory import median_update_seconds, switch_off  # this folder is on the path: the script's own
    from selfevolve.build import build_policy
    from selfevolve.config import load_config

    if setting == "none":  # the run's settings throughout: blocks up to 32 MiB from the heap
        switch_off("heap")
    else:
        allocator.UPDATE_MMAP_THRESHOLD = int(setting) * 1024 * 1024
    cfg = load_config(overrides=["algo.minibatches=4"])
    torch.manual_seed(cfg.seed)
    policy = build_policy(cfg)
    return {"setting": setting, **median_update_seconds(cfg, policy, reps),
            "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", nargs="+", default=["1", "none", "4", "16"],
                    help="MiB thresholds, or none (no threshold in the update); run two at a time, in order")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.reps)))
        return
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    results = []
    for i in range(0, len(args.settings), 2):
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", s, "--reps", str(args.reps)],
                                  stdout=subprocess.PIPE, env={**os.environ, **env})
                 for s in args.settings[i:i + 2]]
        for proc in procs:
            stdout, _ = proc.communicate()
            if proc.returncode:
                sys.exit(f"a worker failed (exit {proc.returncode})")
            results.append(json.loads(stdout.decode().strip().splitlines()[-1]))
            r = results[-1]
            print(f"threshold {r['setting']}: warm-start update {r['nll']:.1f} s, ppo objective {r['ppo']:.1f} s, "
                  f"peak {r['peak_gb']:.2f} GB", flush=True)
    print("SUMMARY heap threshold (16 expert episodes, 4 minibatches, 1 thread, two processes at a time): "
          + "; ".join(f"{r['setting']}: {r['nll']:.1f}/{r['ppo']:.1f} s, {r['peak_gb']:.2f} GB" for r in results))


if __name__ == "__main__":
    main()
