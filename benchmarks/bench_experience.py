"""SEER recall on the tool worlds: held-out greedy success of the untrained model with static few-shot examples,
with SEER recall from the same seed examples, with online (test-time) accumulation, and the ablations.

Every variant plays the same held-out episodes (the world's ``test`` split, ``eval.seed_offset`` seeds) through
the training code path (``selfevolve.train.evaluate.evaluate``), greedy; each starts from a fresh pool of
``--seed-examples`` expert episodes of *training* tasks (never test tasks).

    python benchmarks/bench_experience.py --world shop --episodes 32 --variants static seer seer_acc
    python benchmarks/bench_experience.py --model tiny --episodes 2 --variants seer      # smoke (seconds)

Variants: static (the environment's few-shot examples, no pool), seer (stepwise recall, k=4), seer_acc (seer +
test-time accumulation in chunks of --chunk), no_s2 / no_s3 (λ2 = 0 / λ3 = 0), query (query-only, first turn),
k1 / k2 (k = 1 / 2), oracle (intents from the task instead of the LLM classifier).
Writes ``--out`` (JSON, one entry per variant, updated after each) and prints a table and a final SUMMARY line.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")

from selfevolve.config import load_config  # noqa: E402
from selfevolve.envs import ENVS, make_env  # noqa: E402
from selfevolve.experience.guide import Experience  # noqa: E402
from selfevolve.train.evaluate import evaluate  # noqa: E402
from selfevolve.train.trainer import build_policy, build_prompt  # noqa: E402

VARIANTS = {
    "static": [],
    "seer": ["experience.recall=seer"],
    "seer_acc": ["experience.recall=seer", "eval.accumulate=true"],
    "no_s2": ["experience.recall=seer", "experience.w_tools=0"],
    "no_s3": ["experience.recall=seer", "experience.w_intent=0"],
    "query": ["experience.recall=seer", "experience.mode=query"],
    "k1": ["experience.recall=seer", "experience.k=1"],
    "k2": ["experience.recall=seer", "experience.k=2"],
    "oracle": ["experience.recall=seer", "experience.intent=task"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--world", default="shop", choices=["shop", "tables", "frozenlake", "sokoban"])
    ap.add_argument("--variants", nargs="+", default=["static", "seer", "seer_acc"], choices=list(VARIANTS))
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--seed-examples", type=int, default=8)
    ap.add_argument("--chunk", type=int, default=8, help="episodes per chunk of test-time accumulation")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", default="runs/bench_experience.json")
    args = ap.parse_args()

    out_path = Path(args.out)
    results = json.loads(out_path.read_text()) if out_path.is_file() else {}
    policy = None
    for name in args.variants:
        cfg = load_config(overrides=[f"model.name={args.model}", f"env.name={args.world}",
                                     f"agent.max_new_tokens={args.max_new_tokens}",
                                     f"experience.seed_examples={args.seed_examples}", f"eval.chunk={args.chunk}",
                                     *VARIANTS[name]])
        policy = policy or build_policy(cfg)
        env_cls = ENVS[args.world]
        builder = build_prompt(cfg, policy, make_env(env_cls))
        options = {"split": "test"} if "split" in env_cls.__init__.__code__.co_varnames else {}
        exp = None
        with tempfile.TemporaryDirectory() as tmp:
            if cfg.experience.enabled:
                exp = Experience.build(cfg, tmp, policy, env_cls, {}, args.world)
            t0 = time.perf_counter()
            ev = evaluate(policy, env_cls, options, builder, episodes=args.episodes, seed_offset=cfg.eval.seed_offset,
                          experience=exp, accumulate=cfg.eval.accumulate, chunk=cfg.eval.chunk)
            seconds = time.perf_counter() - t0
            llm_calls = sum(1 for _ in open(Path(tmp) / "llm_calls.jsonl")) if (Path(tmp) / "llm_calls.jsonl").is_file() else 0
        entry = {"overrides": VARIANTS[name], "episodes": args.episodes, "seconds": round(seconds, 1),
                 "success": ev["eval/success"], "valid": ev["eval/valid"],
                 "intents": {k.split("/")[-1]: v for k, v in ev.items() if k.startswith("eval/success/intent/")},
                 **{k.removeprefix("eval/experience/"): v for k, v in ev.items() if k.startswith("eval/experience/")}}
        if exp is not None:
            entry["pool_seed"] = exp.pool.count("trajectory")
            entry["recall_s_per_turn"] = exp.recall_seconds / max(exp.recall_turns, 1)
            entry["recall_share_of_time"] = exp.recall_seconds / seconds
            entry["batched_turns"] = exp.recall_turns  # generation calls of the whole batch (recall runs once each)
            entry["llm_calls"] = llm_calls
        results[f"{args.world}/{name}"] = entry
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(results, indent=2))
        print(f"{args.world} {name}: success {ev['eval/success']:.3f} ({round(ev['eval/success'] * args.episodes)}/"
              f"{args.episodes}) valid {ev['eval/valid']:.3f} in {seconds:.0f} s", flush=True)

    print("| world/variant | success | valid | intent acc | recall s/turn | minutes |\n|---|---:|---:|---:|---:|---:|")
    for key, e in results.items():
        print(f"| {key} | {round(e['success'] * e['episodes'])}/{e['episodes']} | {e['valid']:.3f} | "
              f"{e.get('intent_accuracy', float('nan')):.2f} | {e.get('recall_s_per_turn', 0):.3f} | "
              f"{e['seconds'] / 60:.1f} |")
    summary = {k: round(v["success"], 3) for k, v in results.items()}
    print(f"SUMMARY model={args.model} episodes={args.episodes} {json.dumps(summary)}")


if __name__ == "__main__":
    main()
