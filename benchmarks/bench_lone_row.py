"""A micro-batch of one row beside others that share its prefix: before 2026-11-29 it was encoded whole, its
prefix included, though the update had encoded that prefix once for all the minibatch's micro-batches
(``objectives/update.py``, ``models/prefix_sharing.EncodedPrefix``); now it attends to the encoded prefix as the
others do (``prefix_sharing.encode_rows``). How much of the update does that save?

The batch: the default warm start's first step (16 expert FrozenLake episodes from the training seeds,
``bench_memory.py``'s ``warm_start_batch``), through ``ppo_update`` with 4 minibatches (the warm start's and
``selfevolve evolve``'s cloning step's 4 optimizer steps): ``nll`` as the cloning does, and ``ppo`` with
advantages drawn from N(0, 1). Learning rate 0, so every repetition sees the same weights. The two ways alternate
in one process, one torch thread (``before``: one-row micro-batches encoded plainly, as the old rule did), each
update timed ``--reps`` times, the median kept; the body's fed ids are counted, and the losses compared.

    OMP_NUM_THREADS=1 python benchmarks/bench_lone_row.py --reps 3
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from bench_memory import one_thread_cloning_setup  # this folder is on the path: the script's own
from selfevolve.models import policy as policy_module
from selfevolve.objectives import update

NEW = policy_module.encode_rows


def old_rule(body, input_ids, attention_mask, prefix_len=0, cuts=None, prefix=None):
    """The rule before 2026-11-29: one row is encoded plainly, whether or not its prefix was encoded already."""
    if input_ids.shape[0] == 1:
        return NEW(body, input_ids, attention_mask, 0, cuts, None)
    return NEW(body, input_ids, attention_mask, prefix_len, cuts, prefix)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    cfg, policy, rows, optimizer = one_thread_cloning_setup()
    batches = dict(zip(("nll", "ppo"), rows))
    body, _ = policy.body_and_head()
    fed, forward = [0], body.forward
    calls = {"micro": 0, "lone": 0}  # the "now" way's forwards of micro-batches, and of lone rows beside others

    def counting(*a, **k):
        fed[0] += k["input_ids"].numel()
        return forward(*a, **k)

    def now(body, input_ids, attention_mask, prefix_len=0, cuts=None, prefix=None):
        calls["micro"] += 1
        calls["lone"] += input_ids.shape[0] == 1 and prefix is not None
        return NEW(body, input_ids, attention_mask, prefix_len, cuts, prefix)

    body.forward = counting
    ways = {"before": old_rule, "now": now}
    times = {(w, o): [] for w in ways for o in batches}
    tokens, losses = {}, {}
    for _ in range(args.reps):
        for way, rule in ways.items():
            policy_module.encode_rows = rule
            for objective, rows in batches.items():
                fed[0] = calls["micro"] = calls["lone"] = 0
                t = time.perf_counter()
                st = update.ppo_update(policy, optimizer, rows, cfg.algo, random.Random(0), objective=objective)
                times[way, objective].append(time.perf_counter() - t)
                tokens[way, objective] = fed[0]
                losses[way, objective] = st.get("loss/bc", st.get("loss/policy"))
    policy_module.encode_rows = NEW
    # the split is the same in both ways; counted in the last update of the "now" way (the ppo objective's)
    print(f"minibatches {cfg.algo.minibatches}, micro-batches {calls['micro']}, of one row beside others "
          f"{calls['lone']}")
    for objective in batches:
        b, n = (statistics.median(times[w, objective]) for w in ways)
        print(f"{objective}: before {b:.2f} s ({tokens['before', objective]} ids fed), now {n:.2f} s "
              f"({tokens['now', objective]} ids fed), {b / n:.2f}x; loss before {losses['before', objective]:.6f}, "
              f"now {losses['now', objective]:.6f}")
    ratio = {o: statistics.median(times["before", o]) / statistics.median(times["now", o]) for o in batches}
    print(f"SUMMARY lone row (16 expert episodes, 4 minibatches, 1 thread, {args.reps} reps alternated): "
          + ", ".join(f"{o} {r:.2f}x faster, {tokens['now', o] / tokens['before', o]:.2f} of the ids"
                      for o, r in ratio.items()))


if __name__ == "__main__":
    main()
