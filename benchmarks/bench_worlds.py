"""Baseline of the tool worlds: greedy few-shot success of an untrained model per world, split and intent, and
how fast the worlds themselves step.

The success numbers are the starting point later features (self-questioning, experience recall, ...) must
raise. Episodes are played through the training code path (``selfevolve.train.evaluate.greedy_rollouts``:
the same prompt builder, function-calling format and context template as ``selfevolve train``).
Environment speed replays the reference solutions (no model), so it measures the world alone.

    python benchmarks/bench_worlds.py                                   # smollm2-135m, 64 episodes per cell
    python benchmarks/bench_worlds.py --model tiny --episodes 2         # a smoke run (seconds)

Writes ``--out`` (JSON) and prints a markdown table and a final SUMMARY line.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from selfevolve.config import load_config  # noqa: E402
from selfevolve.envs import ENVS, make_env  # noqa: E402
from selfevolve.train.evaluate import greedy_rollouts  # noqa: E402
from selfevolve.train.trainer import build_policy, build_prompt  # noqa: E402

WORLDS = ("shop", "tables")


def env_steps_per_s(world: str, seconds: float = 2.0) -> float:
    """Steps per second replaying reference solutions (reset included), single process."""
    env = make_env(world, split="all")
    steps, t0, i = 0, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        env.reset(i)
        while (action := env.expert_action()) is not None:
            env.step(action)
            steps += 1
        i += 1
    return steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--worlds", nargs="+", default=list(WORLDS), choices=WORLDS)
    ap.add_argument("--splits", nargs="+", default=["train", "test"], choices=["train", "test"])
    ap.add_argument("--episodes", type=int, default=64, help="greedy episodes per world and split")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--context", default="causal")
    ap.add_argument("--max-turns", type=int, default=None, help="episode turn limit (default: the world's own: shop 10, tables 12)")
    ap.add_argument("--out", default="runs/bench_worlds.json")
    args = ap.parse_args()

    results: dict = {"model": args.model, "episodes": args.episodes, "max_new_tokens": args.max_new_tokens,
                     "max_turns": args.max_turns, "worlds": {}}
    policy = None
    for world in args.worlds:
        cfg = load_config(overrides=[f"model.name={args.model}", f"env.name={world}",
                                     f"agent.max_new_tokens={args.max_new_tokens}", f"agent.context={args.context}"])
        policy = policy or build_policy(cfg)
        env_cls = ENVS[world]
        builder = build_prompt(cfg, policy, make_env(env_cls))
        entry = {"env_steps_per_s": env_steps_per_s(world), "splits": {}}
        for split in args.splits:
            t0 = time.perf_counter()
            options = {"split": split} | ({"max_turns": args.max_turns} if args.max_turns else {})
            _, trajs = greedy_rollouts(policy, env_cls, options, builder, episodes=args.episodes,
                                       seed_offset=cfg.eval.seed_offset)
            by_intent: dict[str, list[bool]] = defaultdict(list)
            for t in trajs:
                by_intent[t.steps[-1].info.get("intent", "?") if t.steps else "?"].append(t.success)
            steps = [s for t in trajs for s in t.steps]
            entry["splits"][split] = {
                "success": sum(t.success for t in trajs) / len(trajs),
                "valid": sum(s.valid for s in steps) / max(1, len(steps)),
                "turns": len(steps) / len(trajs),
                "seconds": time.perf_counter() - t0,
                "intents": {k: {"n": len(v), "success": sum(v) / len(v)} for k, v in sorted(by_intent.items())},
            }
        results["worlds"][world] = entry
        print(f"{world}: " + ", ".join(f"{s} {r['success']:.3f} in {r['seconds']:.0f} s"
                                        for s, r in entry["splits"].items()), flush=True)

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print("| world | split | intent | episodes | success |\n|---|---|---|---|---|")
    for world, entry in results["worlds"].items():
        for split, r in entry["splits"].items():
            print(f"| {world} | {split} | (all) | {args.episodes} | {r['success']:.3f} |")
            for intent, v in r["intents"].items():
                print(f"| {world} | {split} | {intent} | {v['n']} | {v['success']:.3f} |")
    summary = {w: {"env_steps_per_s": round(e["env_steps_per_s"]),
                   **{s: round(r["success"], 3) for s, r in e["splits"].items()}} for w, e in results["worlds"].items()}
    print(f"SUMMARY model={args.model} episodes={args.episodes} {json.dumps(summary)}")


if __name__ == "__main__":
    main()
