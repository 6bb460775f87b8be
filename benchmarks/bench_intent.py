"""Accuracy of the intent classifier (SEER's s3, ``experience/intent.py``) on held-out tool-world requests.

    OMP_NUM_THREADS=1 python benchmarks/bench_intent.py --worlds shop tables --episodes 32

The requests are the test-split tasks the experience benchmark plays (``eval.seed_offset + i``), so the
figures match its ``intent acc`` column.
"""

from __future__ import annotations

import argparse
import time

from selfevolve.config import load_config
from selfevolve.envs import ENVS, make_env
from selfevolve.experience.intent import classify
from selfevolve.models.llm import LLM
from selfevolve.train.trainer import build_policy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--worlds", nargs="+", default=["shop", "tables"])
    ap.add_argument("--episodes", type=int, default=32)
    args = ap.parse_args()
    cfg = load_config(overrides=[f"model.name={args.model}"])
    llm = LLM("policy", build_policy(cfg))
    summary = {}
    for world in args.worlds:
        env = make_env(world, split="test")
        tasks = [env.task_for(cfg.eval.seed_offset + i) for i in range(args.episodes)]
        t0 = time.perf_counter()
        found, malformed = classify(llm, [t.instruction for t in tasks], list(ENVS[world].intents))
        right = sum(f == t.intent for f, t in zip(found, tasks))
        summary[world] = round(right / len(tasks), 3)
        print(f"{world}: {right}/{len(tasks)} right, {malformed} replies named no intent, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    print(f"SUMMARY model={args.model} intent accuracy {summary}")


if __name__ == "__main__":
    main()
