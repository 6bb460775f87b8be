"""Rollout throughput of the local path against Ray with 1 and 2 workers, the driver's update time, and a model
of how throughput grows with workers.

Each mode builds a real ``Trainer`` (``distributed.backend=local`` or ``ray``) and times ``Trainer.collect()``,
the call a training step makes, on ``--repeats`` fresh steps after one warm-up step (for Ray the warm-up
includes starting the workers, reported apart). Steps are not updated in between (the adapter stays the same),
so every mode plays comparable episodes; they are in fact the same episodes, since each is seeded by itself.
The driver's update time is measured on the local trainer: ``credit`` + ``update`` of one collected batch.
The push (``distributed/put_s`` + one ``load_weights`` round trip per worker) is timed separately.

Scaling model of one synchronous step with N workers, B episodes, per-worker rate r (episodes/s at B/N
episodes each), update time U and push P:

    step(N)        = P + B / (N r) + U
    throughput(N)  = B / step(N)            (episodes per second of training, rollouts and update)
    rollout-only   = N r                    (the ceiling if the update overlapped the rollouts)

The driver is the bottleneck once B / (N r) < U + P, i.e. beyond N* = B / (r (U + P)) workers.

Usage::

    python benchmarks/bench_ray.py --model smollm2-135m --tasks 4 --group 4 --max-turns 4
    python benchmarks/bench_ray.py --model tiny --repeats 1            # quick check
    python benchmarks/bench_ray.py --sampler-cost                      # only: what per-episode streams cost

``--sampler-cost``: the local path's price for per-episode seeding. The same 16 episodes' rollout with one
shared stream (inverse CDF) and with one stream per episode (exponential race), alternating, and the sampling
step alone for 16 rows over the model's vocabulary.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import time

import torch


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tasks", type=int, default=4, help="tasks per step")
    p.add_argument("--group", type=int, default=4, help="rollouts per task (algo.group_size)")
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2, help="timed steps per mode (after one warm-up step)")
    p.add_argument("--local-threads", type=int, default=1, help="torch threads of the local path (a Ray worker "
                   "uses distributed.worker_cpus = 1)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--out", default="runs/bench_ray")
    p.add_argument("--sampler-cost", action="store_true", help="measure only the per-episode sampler's cost")
    return p.parse_args(argv)


def overrides(args, out: str, extra=()) -> list[str]:
    return [f"model.name={args.model}", "model.dtype=fp32", "env.name=frozenlake", f"env.max_turns={args.max_turns}",
            f"algo.group_size={args.group}", f"train.tasks_per_step={args.tasks}", "train.warm_start_steps=0",
            "eval.at_start=false", "train.progress=false", "train.log_trajectories=false", f"train.out_dir={out}",
            "train.overwrite=true", "distributed.start_timeout=600", *extra]


def time_collects(trainer, repeats: int) -> dict:
    """Warm-up step, then ``repeats`` timed collections of fresh steps (no update in between)."""
    t0 = time.perf_counter()
    trainer.collect()
    warm = time.perf_counter() - t0
    secs, episodes, tokens, put = 0.0, 0, 0, 0.0
    digest = hashlib.sha256()  # of every sampled token id: equal across modes when they play the same episodes
    for k in range(repeats):
        trainer.step = k + 1  # a new step: new seeds and (Ray) a new weights version pushed
        trainer.search_metrics = {}
        t0 = time.perf_counter()
        trajs, stats = trainer.collect()
        secs += time.perf_counter() - t0
        episodes += len(trajs)
        tokens += stats.new_tokens
        put += trainer.search_metrics.get("distributed/put_s", 0.0)
        digest.update(json.dumps([s.action_ids for t in trajs for s in t.steps]).encode())
    return {"tokens_sha": digest.hexdigest()[:12], "warmup_s": warm, "seconds": secs, "episodes": episodes, "new_tokens": tokens,
            "episodes_per_s": episodes / secs, "tokens_per_s": tokens / secs, "put_s": put / repeats}


def push_roundtrip(trainer) -> float:
    """One versioned push of the adapter to every worker, waited for: put + load on all (seconds)."""
    import ray

    from selfevolve.distributed.worker import lora_state

    t0 = time.perf_counter()
    ref = ray.put(lora_state(trainer.policy))
    ray.get([s.actor.load_weights.remote(trainer.step, ref) for s in trainer.rollouts.slots], timeout=120)
    return time.perf_counter() - t0


def update_time(trainer, repeats: int) -> float:
    """The driver's part of a step after the rollouts: credit + PPO update of one collected batch."""
    trajs, _ = trainer.collect()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rows, _ = trainer.objective.credit(trajs)
        if rows:
            trainer.update(rows, trajs)
        times.append(time.perf_counter() - t0)
    return min(times)


def sampler_cost(args) -> None:
    from selfevolve.config import load_config
    from selfevolve.envs import ENVS, make_env
    from selfevolve.models.generation import _sample
    from selfevolve.rollout.runner import RolloutStats, rollout
    from selfevolve.rollout.seeding import episode_streams
    from selfevolve.tasks.source import SeedTasks
    from selfevolve.build import build_policy, build_prompt

    torch.set_num_threads(args.local_threads)
    cfg = load_config(overrides=[f"model.name={args.model}", "model.dtype=fp32"])
    policy, env_cls = build_policy(cfg), ENVS["frozenlake"]
    builder = build_prompt(cfg, policy, make_env(env_cls))
    tasks = [t for t in SeedTasks("frozenlake").next(args.tasks) for _ in range(args.group)]
    runs = {"shared stream (inverse CDF)": [0.0, 0], "per-episode streams (race)": [0.0, 0]}
    for rep in range(args.repeats):
        for name, acc in runs.items():
            gen = torch.Generator().manual_seed(rep) if name.startswith("shared") else \
                episode_streams(policy, rep, 0, list(range(len(tasks))), [t.id for t in tasks])
            st = RolloutStats()
            envs = [make_env(env_cls, max_turns=args.max_turns) for _ in tasks]
            rollout(policy, envs, tasks, builder, max_turns=args.max_turns, generator=gen, stats=st)
            acc[0] += st.seconds
            acc[1] += st.new_tokens
    logp = torch.log_softmax(torch.randn(len(tasks), policy.vocab_size), -1)
    ms = {}
    for name, g in (("inverse CDF", torch.Generator().manual_seed(0)),
                    ("race", [torch.Generator().manual_seed(i) for i in range(len(tasks))])):
        _sample(logp, g)
        t0 = time.perf_counter()
        for _ in range(50):
            _sample(logp, g)
        ms[name] = (time.perf_counter() - t0) / 50 * 1000
    for name, (secs, toks) in runs.items():
        print(f"{name}: {toks} new tokens in {secs:.1f} s = {toks / secs:.1f} tok/s")
    print(f"SUMMARY sampler ({args.model}, {len(tasks)} rows): sampling step {ms['race']:.2f} ms (race) vs "
          f"{ms['inverse CDF']:.2f} ms (inverse CDF); rollout " + " vs ".join(
              f"{t / s:.1f} tok/s ({n.split(' (')[0]})" for n, (s, t) in runs.items()))


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.sampler_cost:
        return sampler_cost(args)
    from selfevolve.config import load_config
    from selfevolve.train.trainer import Trainer

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    B = args.tasks * args.group
    results = {}
    torch.set_num_threads(args.local_threads)
    local = Trainer(load_config(overrides=overrides(args, f"{args.out}/local")))
    results["local"] = time_collects(local, args.repeats)
    U = update_time(local, 2)
    local.close()
    for n in args.workers:
        torch.set_num_threads(args.local_threads)
        tr = Trainer(load_config(overrides=overrides(args, f"{args.out}/ray{n}", [
            "distributed.backend=ray", f"distributed.workers={n}"])))
        try:
            res = time_collects(tr, args.repeats)
            res["push_s"] = min(push_roundtrip(tr) for _ in range(3))
        finally:
            tr.close()
        results[f"ray{n}"] = res

    print(f"\n{args.model}, frozenlake, {args.tasks} tasks x {args.group} = {B} episodes per step, "
          f"max {args.max_turns} turns; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"local torch threads {args.local_threads}, 1 per worker\n")
    print("| mode | warm-up s (Ray: + start) | s per step | episodes/s | new tok/s | vs local | push s | tokens sha |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    base = results["local"]["episodes_per_s"]
    for name, r in results.items():
        push = f"{r['push_s']:.3f}" if "push_s" in r else ""
        print(f"| {name} | {r['warmup_s']:.1f} | {r['seconds'] / args.repeats:.2f} | {r['episodes_per_s']:.3f} | "
              f"{r['tokens_per_s']:.1f} | {r['episodes_per_s'] / base:.2f}x | {push} | {r['tokens_sha']} |")
    # the model, from the largest measured worker count's per-worker rate (each worker then holds B/N episodes)
    n_max = max(args.workers)
    r = results[f"ray{n_max}"]["episodes_per_s"] / n_max
    P = results[f"ray{n_max}"]["push_s"]
    n_star = B / (r * (U + P))
    print(f"\ndriver update (credit + PPO update of {B} episodes): {U:.2f} s; push {P:.3f} s; per-worker rate "
          f"r = {r:.3f} episodes/s (measured with {n_max} workers, {B // n_max} episodes each)\n")
    print("| workers N | rollout s = B/(N r) | step s = P + B/(N r) + U | training episodes/s | rollout-only N r |")
    print("|---:|---:|---:|---:|---:|")
    for n in (1, 2, 4, 8, 16, 32):
        roll = B / (n * r)
        print(f"| {n} | {roll:.2f} | {P + roll + U:.2f} | {B / (P + roll + U):.3f} | {n * r:.3f} |")
    print(f"\nthe driver is the bottleneck (rollout shorter than update + push) beyond N* = B / (r (U + P)) = "
          f"{n_star:.1f} workers; the ceiling is B / (U + P) = {B / (U + P):.2f} training episodes/s")
    os.makedirs(args.out, exist_ok=True)
    with open(f"{args.out}/summary.json", "w") as f:
        json.dump({"results": results, "update_s": U, "per_worker_rate": r, "n_star": n_star, "B": B}, f, indent=1)
    same = len({v["tokens_sha"] for v in results.values()}) == 1
    parts = " ; ".join(f"{k} {v['episodes_per_s']:.3f} ep/s ({v['episodes_per_s'] / base:.2f}x)"
                       for k, v in results.items())
    print(f"\nSUMMARY ray rollouts ({args.model}, {B} episodes/step): {parts} ; update {U:.2f} s, push {P:.3f} s ; "
          f"driver-bound beyond N* = {n_star:.1f} workers ; same sampled tokens in every mode: {same}")


if __name__ == "__main__":
    main()
