"""Does a trained policy read the board, or replay a few fixed move sequences? (issue 41, Sokoban 6x6)

Reads the held-out episodes of a run's last evaluation (``eval_trajectories.jsonl``, the greedy episodes on the
test split) and, in the environment itself:

- replays each episode's own moves on its room (a check: it must give back the recorded wins);
- plays each of the policy's most common move sequences blind on every room (what a policy that ignores the
  board would solve with it);
- plays the random valid policy of ``selfevolve bench`` (``bench/players.py``) on every room, ``--draws`` seeds.

    python benchmarks/bench_blind_replay.py runs/bench_evolve/sokoban/evolve/seed-0/round-2/train --env sokoban

Prints one line per measure and a final SUMMARY line.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from selfevolve.bench.players import play_text, random_chooser
from selfevolve.envs import env_class
from selfevolve.types import Task


def fixed(sequences: list[tuple[str, ...]]):
    """A chooser that plays episode i's move sequence, move by move (its last move again once it runs out)."""
    def choose(envs, observations, actions, tasks):
        return [sequences[t][min(len(a), len(sequences[t]) - 1)] for a, t in zip(actions, (int(t.id) for t in tasks))]
    return choose


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a training folder holding eval_trajectories.jsonl")
    ap.add_argument("--env", default="sokoban")
    ap.add_argument("--split", default="test", help="the evaluation's split (its environment option)")
    ap.add_argument("--draws", type=int, default=3, help="seeds of the random valid policy")
    ap.add_argument("--top", type=int, default=3, help="how many of the policy's sequences to play blind")
    args = ap.parse_args()

    rows = [json.loads(line) for line in (args.run / "eval_trajectories.jsonl").open()]
    last = max(r["eval"]["step"] for r in rows)
    rows = [r for r in rows if r["eval"]["step"] == last]  # the last evaluation's episodes
    env_cls, options = env_class(args.env), {"split": args.split}
    tasks = [Task(id=str(i), env=args.env, seed=r["task"]["seed"]) for i, r in enumerate(rows)]
    own = [tuple(s["action_text"].strip() for s in r["steps"]) for r in rows]
    sequences = collections.Counter(own)

    recorded = sum(bool(r["success"]) for r in rows)
    replayed = sum(play_text(env_cls, options, tasks, fixed(own)))
    print(f"policy: {recorded} of {len(rows)} rooms solved (replayed: {replayed}); "
          f"{len(sequences)} distinct move sequences")
    blind = []
    for seq, n in sequences.most_common(args.top):
        blind.append(sum(play_text(env_cls, options, tasks, fixed([seq] * len(tasks)))))
        print(f"sequence played on {n} rooms, played blind on all {len(tasks)}: {blind[-1]} solved ({' '.join(seq)})")
    randoms = [sum(play_text(env_cls, options, tasks, random_chooser(draw)[0])) for draw in range(args.draws)]
    print(f"random valid policy (selfevolve bench's), seeds 0..{args.draws - 1}: {randoms} solved of {len(tasks)}")
    print(f"SUMMARY blind replay {args.env}: policy {recorded}/{len(rows)} with {len(sequences)} sequences; "
          f"its sequences blind {blind}; random {randoms}")


if __name__ == "__main__":
    main()
