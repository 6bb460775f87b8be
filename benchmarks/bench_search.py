"""Generation cost of trajectory search with and without shared-prefix reuse (TSR, ``rollout.search``).

One batch of beam searches (default M = 4 candidates per beam, B = 2 beams, 5 turns) is run three ways, side by
side, with the same sampling seed:

- ``tree``: every candidate continues from a copy of its parent's key/value cache, so each turn encodes only
  the new observation tokens (the default, ``search.reuse_cache=true``);
- ``header``: no cache carried between turns or candidates; only the few-shot header that every prompt of a
  generation call starts with is encoded once per call (what the plain rollout does without its turn cache);
- ``none``: every prompt encoded in full at every turn (what a naive implementation does).

All three must produce the same tokens (checked and printed). Reported: wall time, prompt tokens encoded,
generated tokens per second, and the time ratios against ``tree``. Also writes the search trees of the
``tree`` run (``--trees``), which ``benchmarks/plot_search_tree.py`` draws.

    python benchmarks/bench_search.py                          # smollm2-135m, FrozenLake, 4 searches
    python benchmarks/bench_search.py --model tiny --searches 2  # a smoke run (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")

import torch  # noqa: E402

from selfevolve.config import load_config  # noqa: E402
from selfevolve.envs import make_env  # noqa: E402
from selfevolve.rollout.search import SearchSpec, search_rollouts  # noqa: E402
from selfevolve.tasks.source import SeedTasks  # noqa: E402
from selfevolve.train.trainer import build_policy, build_prompt  # noqa: E402

MODES = {"tree": (True, True), "header": (False, True), "none": (False, False)}  # reuse_cache, share_prefix


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--env", default="frozenlake")
    ap.add_argument("--strategy", default="beam", choices=["beam", "lookahead"])
    ap.add_argument("--searches", type=int, default=4, help="searches (tasks) in the batch")
    ap.add_argument("--m", type=int, default=4)
    ap.add_argument("--beams", type=int, default=2)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--init-from", default=None, help="adapter to start from (e.g. a warm-start run)")
    ap.add_argument("--trees", default="runs/bench_search_trees.jsonl")
    ap.add_argument("--out", default="runs/bench_search.json")
    args = ap.parse_args()

    overrides = [f"model.name={args.model}", f"env.name={args.env}", f"agent.max_new_tokens={args.max_new_tokens}"]
    cfg = load_config(overrides=overrides)
    policy = build_policy(cfg)
    if args.init_from:
        from selfevolve.train.checkpoint import find_checkpoint, load_checkpoint

        policy.load_adapter_state(load_checkpoint(find_checkpoint(args.init_from), with_optimizer=False)["adapter"],
                                  value_head="ignore")
    options = cfg.env.options() | {"max_turns": args.turns}
    builder = build_prompt(cfg, policy, make_env(args.env, **options))
    tasks = SeedTasks(args.env, seed=0).next(args.searches)
    results, tokens = {}, {}
    for mode in args.modes:
        reuse, share = MODES[mode]
        spec = SearchSpec(args.strategy, m=args.m, beams=args.beams, keep="all", reuse_cache=reuse,
                          share_prefix=share)
        t0 = time.perf_counter()
        res = search_rollouts(policy, lambda: make_env(args.env, **options), tasks, builder, spec,
                              max_turns=args.turns, generator=torch.Generator().manual_seed(0), rng=random.Random(0))
        wall = time.perf_counter() - t0
        st = res.stats
        results[mode] = {"seconds": wall, "prompt_tokens": st.prompt_tokens, "new_tokens": st.new_tokens,
                         "generate_calls": st.generate_calls, "new_tok_per_s": st.new_tokens / wall,
                         "candidates": st.candidates, **res.metrics()}
        tokens[mode] = [[s.action_ids for s in t.steps] for t in res.trajectories]
        print(f"{mode:>6}: {wall:7.1f} s  encoded {st.prompt_tokens:>8} tok  generated {st.new_tokens:>6} tok  "
              f"{st.new_tokens / wall:6.1f} new tok/s  ({st.generate_calls} calls, {st.candidates} candidates)",
              flush=True)
        if mode == "tree" and args.trees:
            Path(args.trees).parent.mkdir(parents=True, exist_ok=True)
            with open(args.trees, "w") as f:
                for tree in res.trees:
                    f.write(json.dumps(tree) + "\n")
    same = all(tokens[m] == tokens[args.modes[0]] for m in tokens)
    base = results.get("tree")
    print("\n| mode | wall s | prompt tokens encoded | new tok/s | time ÷ tree |\n|---|---|---|---|---|")
    for mode, r in results.items():
        ratio = r["seconds"] / base["seconds"] if base else float("nan")
        print(f"| {mode} | {r['seconds']:.1f} | {r['prompt_tokens']:,} | {r['new_tok_per_s']:.1f} | {ratio:.2f}× |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "same_tokens": same, "results": results}, indent=1))
    parts = [f"{m} {r['seconds']:.1f}s/{r['prompt_tokens']} enc" for m, r in results.items()]
    ratios = [f"{m}/tree {results[m]['seconds'] / base['seconds']:.2f}x" for m in results if base and m != "tree"]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    print(f"SUMMARY {args.strategy} M={args.m} B={args.beams} turns={args.turns} searches={args.searches} "
          f"{args.model}: {', '.join(parts)}; {', '.join(ratios)}; same tokens: {same}; peak RSS {peak:.1f} GiB")


if __name__ == "__main__":
    main()
