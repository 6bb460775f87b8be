"""Does a trained policy read the board, or replay a few fixed move sequences? (issue 41, Sokoban 6x6)

Reads the held-out episodes of a run's last evaluation (``eval_trajectories.jsonl``, the greedy episodes on the
test split) and, in the environment itself:

- replays each episode's own moves on its room (a check: it must give back the recorded wins);
- plays each of the policy's most common move sequences blind on every room (what a policy that ignores the
  board would solve with it);
- plays uniformly random moves, ``--turns`` of them, on every room for each of ``--draws`` seeded draws.

    python benchmarks/bench_blind_replay.py runs/bench_evolve/sokoban/evolve/seed-0/round-2/train --env sokoban

Prints one line per measure and a final SUMMARY line.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
from pathlib import Path

from selfevolve.envs import make_env


def play(env_name: str, options: dict, seed: int, moves: list[str]) -> bool:
    """The moves played from the room of ``seed`` until the episode ends; whether it was solved."""
    env = make_env(env_name, **options)
    env.reset(seed)
    result = None
    for move in moves:
        result = env.step(move)
        if result.done:
            break
    return bool(result and result.info["success"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a training folder holding eval_trajectories.jsonl")
    ap.add_argument("--env", default="sokoban")
    ap.add_argument("--split", default="test", help="the evaluation's split (its environment option)")
    ap.add_argument("--moves", nargs="+", default=["Up", "Down", "Left", "Right"], help="the random policy's moves")
    ap.add_argument("--turns", type=int, default=10, help="random moves per episode (the game's turn budget)")
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--top", type=int, default=3, help="how many of the policy's sequences to play blind")
    args = ap.parse_args()

    rows = [json.loads(line) for line in (args.run / "eval_trajectories.jsonl").open()]
    last = max(r["eval"]["step"] for r in rows)
    rows = [r for r in rows if r["eval"]["step"] == last]  # the last evaluation's episodes
    options = {"split": args.split}
    seeds = [r["task"]["seed"] for r in rows]
    sequences = collections.Counter(tuple(s["action_text"].strip() for s in r["steps"]) for r in rows)

    recorded = sum(bool(r["success"]) for r in rows)
    replayed = sum(play(args.env, options, r["task"]["seed"], [s["action_text"].strip() for s in r["steps"]])
                   for r in rows)
    print(f"policy: {recorded} of {len(rows)} rooms solved (replayed: {replayed}); "
          f"{len(sequences)} distinct move sequences")
    blind = []
    for seq, n in sequences.most_common(args.top):
        wins = sum(play(args.env, options, seed, list(seq)) for seed in seeds)
        blind.append(wins)
        print(f"sequence played on {n} rooms, played blind on all {len(seeds)}: {wins} solved ({' '.join(seq)})")
    randoms = []
    for draw in range(args.draws):
        rng = random.Random(draw)
        randoms.append(sum(play(args.env, options, seed, [rng.choice(args.moves) for _ in range(args.turns)])
                           for seed in seeds))
    print(f"{args.turns} uniformly random moves, draws 0..{args.draws - 1}: {randoms} solved of {len(seeds)}")
    print(f"SUMMARY blind replay {args.env}: policy {recorded}/{len(rows)} with {len(sequences)} sequences; "
          f"its sequences blind {blind}; random {randoms}")


if __name__ == "__main__":
    main()
