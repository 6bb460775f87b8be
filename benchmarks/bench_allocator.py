"""The allocator the ``selfevolve`` command runs with (``selfevolve/launch.py``): time and peak memory of the warm
start's update with mimalloc against glibc with the run's settings (``models/allocator.py``).

The batch: the default warm start's first step (16 expert FrozenLake episodes from the training seeds,
``bench_memory.py``'s ``warm_start_batch``), through the trainer's ``ppo_update`` with ``algo.minibatches=4`` (the
warm start's 4 optimizer steps a step): ``nll`` as the warm start, and ``ppo`` with advantages drawn from N(0, 1).
Learning rate 0, so every repetition sees the same weights; each update timed ``--reps`` times, the median kept.

Each allocator runs in a process of its own, started with it as the command would start it (``LD_PRELOAD`` and
``MIMALLOC_PURGE_DELAY=-1``; ``SELFEVOLVE_MALLOC=glibc``), two processes at a time, one torch thread each (so
that the pair shares the 2-core CPU's load). ``purge`` is mimalloc handing freed pages back after its default
10 ms:

    python benchmarks/bench_allocator.py --settings glibc mimalloc
    python benchmarks/bench_allocator.py --settings glibc mimalloc --matmul bf16_update
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(matmul: str, reps: int) -> dict:
    import torch

    from bench_memory import median_update_seconds  # this folder is on the path: the script's own
    from selfevolve.build import build_policy
    from selfevolve.config import load_config
    from selfevolve.models.allocator import mimalloc_loaded

    cfg = load_config(overrides=["algo.minibatches=4", f"model.matmul_dtype={matmul}"])
    torch.manual_seed(cfg.seed)
    policy = build_policy(cfg)
    seconds = median_update_seconds(cfg, policy, reps)
    return {**seconds, "mimalloc": mimalloc_loaded(),
            "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def environment(setting: str) -> dict[str, str]:
    """A worker's environment: the one the launcher builds (``launch.preload_env``), or glibc with the run's
    settings; ``purge`` drops the launcher's ``MIMALLOC_PURGE_DELAY`` (mimalloc's own 10 ms)."""
    from selfevolve import launch

    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", launch.MARK, "MIMALLOC_PURGE_DELAY", "SELFEVOLVE_MALLOC")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    if setting == "glibc":
        return {**env, "SELFEVOLVE_MALLOC": "glibc"}
    preloaded = launch.preload_env(env)
    if preloaded is None:
        sys.exit("mimalloc is not installed (the cmeel-mimalloc wheel, a dependency on Linux x86-64)")
    if setting == "purge":
        del preloaded["MIMALLOC_PURGE_DELAY"]
    return preloaded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", nargs="+", default=["glibc", "mimalloc"], choices=["glibc", "mimalloc", "purge"],
                    help="allocators, run two at a time, in order")
    ap.add_argument("--matmul", default="same", choices=["same", "bf16_update"], help="model.matmul_dtype")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.matmul, args.reps)))
        return
    sys.path.insert(0, str(ROOT))
    results = []
    for i in range(0, len(args.settings), 2):
        pair = args.settings[i:i + 2]
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", "--matmul", args.matmul, "--reps",
                                   str(args.reps)], stdout=subprocess.PIPE, env=environment(s)) for s in pair]
        for setting, proc in zip(pair, procs):
            stdout, _ = proc.communicate()
            if proc.returncode:
                sys.exit(f"the {setting} worker failed (exit {proc.returncode})")
            r = {"setting": setting, **json.loads(stdout.decode().strip().splitlines()[-1])}
            if r["mimalloc"] != (setting != "glibc"):
                sys.exit(f"the {setting} worker ran with the wrong allocator")
            results.append(r)
            print(f"{setting}: warm-start update {r['nll']:.1f} s, ppo objective {r['ppo']:.1f} s, "
                  f"peak {r['peak_gb']:.2f} GB", flush=True)
    print(f"SUMMARY allocator (16 expert episodes, 4 minibatches, matmul {args.matmul}, 1 thread, two processes at "
          "a time): " + "; ".join(f"{r['setting']}: {r['nll']:.1f}/{r['ppo']:.1f} s, {r['peak_gb']:.2f} GB"
                                  for r in results))


if __name__ == "__main__":
    main()
