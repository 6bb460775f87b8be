"""How the update splits a batch into micro-batches: filled greedily by length, or the split that encodes the
fewest tokens (``micro_batches(..., shared=...)``, the update's default)?

One training step's rows, real ones: a step's batch (``--tasks`` × ``--group-size`` sampled episodes, as the trainer
seeds them) played by the policy (``--init-from``: a trained adapter, whose episodes are as long as a run's), turned
into rows with random advantages. Then the update's forward and backward over every micro-batch of each split,
alternated ``--reps`` times: wall time, tokens encoded (padding included, the shared prefix once a micro-batch)
and the largest difference between the two splits' LoRA gradients (the same sum, taken in another order).

    python benchmarks/bench_microbatch.py --init-from runs/bench_profile/checkpoints/step-19
"""

from __future__ import annotations

import random
import time

import torch

from bench_dedupe import step_batch
from selfevolve.rollout.collect import play_episodes
from selfevolve.train.samples import build_rows, collate, micro_batches, shared_prefix_len


def encoded(chunks) -> int:
    return sum(max(map(len, c)) * len(c) - (len(c) - 1) * shared_prefix_len(c) for c in chunks)


def main() -> None:
    args, cfg, policy, env_cls, builder, episodes = step_batch(__doc__.split("\n\n")[0])
    trajs = play_episodes(policy, builder, env_cls, {}, episodes, run_seed=0, step=1, version=1)
    rng = random.Random(0)
    rows = build_rows(trajs, [rng.gauss(0, 1) for _ in trajs])
    n_tokens = sum(len(r.advantages) for r in rows)
    splits = {"greedy": micro_batches(rows, cfg.algo.micro_batch_tokens),
              "fewest tokens": micro_batches(rows, cfg.algo.micro_batch_tokens, shared_prefix_len(rows))}
    params = policy.trainable_parameters()
    policy.model.eval()
    times = {k: [] for k in splits}
    grads = {}
    for _ in range(args.reps):
        for name, chunks in splits.items():
            for p in params:
                p.grad = None
            t = time.perf_counter()
            for chunk in chunks:
                b = collate(chunk, policy.pad_id, policy.device)
                logp, _, _ = policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"], with_entropy=True,
                                                 prefix_len=shared_prefix_len(chunk))
                (-(logp * b["advantages"]).sum() / n_tokens).backward()
            times[name].append(time.perf_counter() - t)
            grads[name] = torch.cat([p.grad.flatten() for p in params])
            print(f"{name:14s} {times[name][-1]:6.1f} s, {len(chunks)} micro-batches, {encoded(chunks)} tokens encoded",
                  flush=True)
    g, d = grads["greedy"], grads["fewest tokens"]
    rel = float((g - d).abs().max() / g.abs().max())
    a, b = min(times["greedy"]), min(times["fewest tokens"])
    print(f"SUMMARY fewest-tokens/greedy split {b / a:.2f}x wall ({a:.1f} s -> {b:.1f} s, best of {args.reps}), tokens "
          f"encoded {encoded(splits['greedy'])} -> {encoded(splits['fewest tokens'])}, micro-batches "
          f"{len(splits['greedy'])} -> {len(splits['fewest tokens'])}, max |d grad| / max |grad| {rel:.1e}; "
          f"{len(rows)} rows, torch threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
