"""The update's peak memory and time before and after issue 43's changes, side by side, on one fixed batch.

*Before*: every activation of the training forward kept for the backward (``models/recompute.py``'s ``ENABLED``
off), the heap grown by every block (``models/allocator.py``'s update context left out), micro-batches bounded by
``algo.micro_batch_tokens`` alone. *After*: the defaults: the tree's attention and the MLP's gated product
recomputed in the backward, large blocks that the heap's free chunks do not fit mmapped during the update, and
micro-batches also bounded by ``algo.micro_batch_gb``.

The batch: the default warm start's first step (``train.warm_start_tasks`` = 16 expert FrozenLake episodes from
the training seeds, as the trainer makes them), through the trainer's ``ppo_update``: once as the warm start ran it
before 2026-11-27 (``nll``, one optimizer step on all 16; today's warm start splits them into 4), once as an RL
update would (``ppo``, advantages drawn from N(0, 1) with a fixed seed, old log-probs 0). The optimizer's
learning rate is 0, so every repetition sees the same weights.

Each way runs in a process of its own, the two at the same time (side by side: the same machine load for both):
the model loaded, then ``--reps`` × (nll, ppo). Reported: each update's wall time, the median of each, their
ratio, and each process's peak resident memory (``ru_maxrss``) with its value after loading the model.

    python benchmarks/bench_memory.py --reps 3
    python benchmarks/bench_memory.py --reps 2 --tasks 8   # a smaller batch: less memory for the before way
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time

WAYS = ("before", "after")


def switch_off(*measures: str) -> None:
    """Switch off issue 43's memory measures named in this process: ``recompute`` (every activation of the training
    forward kept, ``models/recompute.py``'s ``ENABLED``) and ``heap`` (the update's heap context of
    ``models/allocator.py`` left out). The micro-batch bound is a setting: ``algo.micro_batch_gb=null``."""
    import contextlib

    import selfevolve.models.recompute as recompute
    from selfevolve.objectives import update

    if "recompute" in measures:
        recompute.ENABLED = False
    if "heap" in measures:
        update.heap_not_grown_by_large_blocks = contextlib.nullcontext


def rss_gb() -> float:
    """This process's peak resident memory so far, in GB (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def warm_start_batch(cfg, policy, n_tasks: int | None = None):
    """The default warm start's first batch as update rows: ``(nll rows, ppo rows)``, the ppo rows with advantages
    drawn from N(0, 1) with a fixed seed (also used by ``bench_heap_threshold.py`` and ``bench_allocator.py``)."""
    from selfevolve.build import build_prompt
    from selfevolve.envs import ENVS, make_env
    from selfevolve.objectives.samples import build_rows
    from selfevolve.tasks.source import SeedTasks
    from selfevolve.train.warm_start import expert_episodes

    env_cls = ENVS[cfg.env.name]
    builder = build_prompt(cfg, policy, make_env(env_cls))
    tasks = SeedTasks(cfg.env.name, seed=cfg.seed).next(n_tasks or cfg.train.warm_start_tasks)
    trajs = expert_episodes(env_cls, {}, tasks, builder, policy.tokenizer)
    draw = random.Random(0)
    return build_rows(trajs, [0.0] * len(trajs)), build_rows(trajs, [draw.gauss(0, 1) for _ in trajs])


def median_update_seconds(cfg, policy, reps: int) -> dict[str, float]:
    """The warm start's first batch through the trainer's update, ``nll`` (as the warm start) and ``ppo``, each
    timed ``reps`` times at learning rate 0 (every repetition sees the same weights): the median seconds of each
    (``bench_heap_threshold.py``, ``bench_allocator.py``)."""
    import torch

    from selfevolve.objectives import update

    rows = dict(zip(("nll", "ppo"), warm_start_batch(cfg, policy)))
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=0.0)
    times: dict[str, list[float]] = {"nll": [], "ppo": []}
    for _ in range(reps):
        for objective, batch in rows.items():
            t = time.perf_counter()
            update.ppo_update(policy, optimizer, batch, cfg.algo, random.Random(0), objective=objective)
            times[objective].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def one_thread_cloning_setup():
    """The setting of the one-thread update benchmarks (``bench_lone_row.py``, ``bench_recompute.py``): one torch
    thread, the defaults with 4 minibatches, the default model, the warm start's first batch and an optimizer at
    learning rate 0 (every repetition sees the same weights): ``(cfg, policy, (nll rows, ppo rows), optimizer)``."""
    import torch

    from selfevolve.build import build_policy
    from selfevolve.config import load_config

    torch.set_num_threads(1)
    cfg = load_config(overrides=["algo.minibatches=4"])
    torch.manual_seed(cfg.seed)
    policy = build_policy(cfg)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=0.0)
    return cfg, policy, warm_start_batch(cfg, policy), optimizer


def worker(way: str, reps: int, n_tasks: int | None) -> dict:
    """One way's updates in this process; its times and peak memory."""
    import torch

    from selfevolve.build import build_policy
    from selfevolve.config import load_config
    from selfevolve.objectives import update

    cfg = load_config(overrides=["algo.micro_batch_gb=null"] if way == "before" else [])
    torch.manual_seed(cfg.seed)
    policy = build_policy(cfg)
    loaded = rss_gb()
    nll_rows, ppo_rows = warm_start_batch(cfg, policy, n_tasks)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=0.0)
    if way == "before":
        switch_off("recompute", "heap")
    times: dict[str, list[float]] = {"nll": [], "ppo": []}
    losses = {}
    for _ in range(reps):
        for objective, rows in (("nll", nll_rows), ("ppo", ppo_rows)):
            t = time.perf_counter()
            st = update.ppo_update(policy, optimizer, rows, cfg.algo, random.Random(0), objective=objective)
            times[objective].append(time.perf_counter() - t)
            losses[objective] = st.get("loss/bc", st.get("loss/policy"))
            print(f"{way} {objective}: {times[objective][-1]:.1f} s", file=sys.stderr, flush=True)
    return {"way": way, "times": times, "loaded_gb": loaded, "peak_gb": rss_gb(), "losses": losses,
            "tokens": sum(len(r) for r in nll_rows), "rows": len(nll_rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=None, help="expert episodes in the batch (default: the warm "
                    "start's, train.warm_start_tasks)")
    ap.add_argument("--worker", choices=WAYS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.reps, args.tasks)))
        return
    extra = ["--tasks", str(args.tasks)] if args.tasks else []
    procs = {way: subprocess.Popen([sys.executable, __file__, "--worker", way, "--reps", str(args.reps), *extra],
                                   stdout=subprocess.PIPE, env=os.environ.copy()) for way in WAYS}
    out = {}
    for way, proc in procs.items():
        stdout, _ = proc.communicate()
        if proc.returncode:
            sys.exit(f"the {way} worker failed (exit {proc.returncode})")
        out[way] = json.loads(stdout.decode().strip().splitlines()[-1])
    b, a = out["before"], out["after"]
    for way in WAYS:
        r = out[way]
        print(f"{way}: peak {r['peak_gb']:.2f} GB ({r['loaded_gb']:.2f} GB after loading the model); "
              + "; ".join(f"{k} {', '.join(f'{t:.1f}' for t in v)} s" for k, v in r["times"].items())
              + f"; losses {r['losses']}")
    med = {way: {k: statistics.median(v) for k, v in out[way]["times"].items()} for way in WAYS}
    ratios = {k: med["after"][k] / med["before"][k] for k in med["after"]}
    print(f"SUMMARY update peak memory {b['peak_gb']:.2f} GB before, {a['peak_gb']:.2f} GB after "
          f"({b['peak_gb'] - b['loaded_gb']:.2f} and {a['peak_gb'] - a['loaded_gb']:.2f} GB above the loaded model); "
          f"time after/before (median of {args.reps}, side by side): warm-start step {ratios['nll']:.3f}x, "
          f"RL update {ratios['ppo']:.3f}x; {a['rows']} rows, {a['tokens']} tokens")


if __name__ == "__main__":
    main()
