"""How the update splits and encodes a batch: micro-batches filled greedily by length; the split that encodes the
fewest tokens with the prefix every row shares encoded once (``micro_batches(..., shared=...)``); or the rows of
each micro-batch encoded as a tree of their turns, every distinct beginning once (``grouped=True`` and
``forward_rows(..., cuts=...)``, the update's default)?

One training step's rows, real ones: a step's batch (``--tasks`` × ``--group-size`` sampled episodes, as the trainer
seeds them) played by the policy (``--init-from``: a trained adapter, whose episodes are as long as a run's), turned
into rows with random advantages. Then the update's forward and backward over every micro-batch of each way,
alternated ``--reps`` times: wall time, tokens encoded (shared parts once a micro-batch)
and the largest difference between each way's LoRA gradients and the greedy ones' (the same sum, taken in
another order).

Since 2026-11-26 every way runs through the packed forward of ``models/prefix_sharing.py`` (the prefix once, no
padding, one forward per micro-batch), so the ways differ in their split and in whether rows are cut at their
turns; "tokens encoded" counts what that forward encodes. Run it in a checkout of an earlier commit to compare
with the forward level by level (``486ea47`` and before).

    python benchmarks/bench_microbatch.py --init-from runs/bench_profile/checkpoints/step-19
"""

from __future__ import annotations

import random
import time

import torch

from bench_dedupe import step_batch
from selfevolve.objectives.samples import (build_rows, collate, encoded_tokens, micro_batches, shared_prefix_len,
                                           turn_cuts)
from selfevolve.rollout.collect import play_episodes


def encoded(chunks, grouped: bool = False) -> int:
    """Tokens encoded over a split, each chunk with the prefix its own rows share."""
    return sum(encoded_tokens(c, shared_prefix_len(c), grouped) for c in chunks)


def main() -> None:
    args, cfg, policy, env_cls, builder, episodes = step_batch(__doc__.split("\n\n")[0])
    trajs = play_episodes(policy, builder, env_cls, {}, episodes, run_seed=0, step=1, version=1)
    rng = random.Random(0)
    rows = build_rows(trajs, [rng.gauss(0, 1) for _ in trajs])
    n_tokens = sum(len(r.advantages) for r in rows)
    P = shared_prefix_len(rows)
    ways = {"greedy": (micro_batches(rows, cfg.algo.micro_batch_tokens), False),
            "fewest tokens": (micro_batches(rows, cfg.algo.micro_batch_tokens, P), False),
            "turn tree": (micro_batches(rows, cfg.algo.micro_batch_tokens, P, grouped=True), True)}
    params = policy.trainable_parameters()
    policy.model.eval()
    times = {k: [] for k in ways}
    grads = {}
    for _ in range(args.reps):
        for name, (chunks, grouped) in ways.items():
            for p in params:
                p.grad = None
            t = time.perf_counter()
            for chunk in chunks:
                b = collate(chunk, policy.pad_id, policy.device)
                logp, _, _ = policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"], with_entropy=True,
                                                 prefix_len=shared_prefix_len(chunk),
                                                 cuts=[turn_cuts(r) for r in chunk] if grouped else None)
                (-(logp * b["advantages"]).sum() / n_tokens).backward()
            times[name].append(time.perf_counter() - t)
            grads[name] = torch.cat([p.grad.flatten() for p in params])
            print(f"{name:14s} {times[name][-1]:6.1f} s, {len(chunks)} micro-batches, "
                  f"{encoded(chunks, grouped)} tokens encoded", flush=True)
    g = grads["greedy"]
    parts = []
    for name, (chunks, grouped) in ways.items():
        rel = float((grads[name] - g).abs().max() / g.abs().max())
        parts.append(f"{name} {min(times[name]):.1f} s ({min(times[name]) / min(times['greedy']):.2f}x), "
                     f"{encoded(chunks, grouped)} tokens in {len(chunks)} micro-batches, max |d grad| / max |grad| "
                     f"{rel:.1e}")
    print(f"SUMMARY best of {args.reps}: {'; '.join(parts)}; {len(rows)} rows, torch threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
