"""Each round of a finished ``selfevolve evolve`` run on its own validation set: success and shaped reward.

``evolve.keep=best`` keeps the round with the highest validation success, the later one on a tie. This rescores
every round's saved adapter (``round-R/train``) on the run's validation tasks (``validation/tasks.jsonl``, as the
run wrote them), greedy, and prints per round the success, the mean shaped reward of the episodes and which tasks
were solved, then the round kept by success (ties to the later round) beside the round a tie-break by reward would
keep. A diagnostic for the choice of round; the held-out maps are printed beside it and choose nothing.

    python benchmarks/bench_validation_rounds.py --runs runs/evolve-s4 runs/evolve-s8

Prints one line per round and a final SUMMARY line. One thread (``OMP_NUM_THREADS=1``) is what docs/evolve.md used.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_keep_best import round_policy  # the adapter of round R loaded, as bench_keep_best scores it
from selfevolve import load_config
from selfevolve.build import resolve_env
from selfevolve.evolve import validation
from selfevolve.evolve.report import best_round


def score_rounds(run: Path) -> list[dict]:
    """Every round of ``run`` scored on its validation tasks (``validation.score``: success, shaped reward), with
    the tasks solved and its held-out success."""
    state = json.loads((run / "evolve.json").read_text())
    tasks = state.get("validation", {}).get("tasks")
    if not tasks:
        raise SystemExit(f"{run}: the run has no validation set (made without evolve.keep=best?)")
    cfg = load_config(str(run / "round-0" / "train" / "config.yaml"))
    env_cls = resolve_env(cfg, None)
    rows = []
    for rec in state["rounds"]:
        r = rec["round"]
        c, policy = round_policy(cfg, run, r)
        episodes: list = []
        scored = validation.score(c, env_cls, policy, run, tasks, episodes_out=episodes)
        rows.append({"round": r, "validation": scored, "held_out": rec["eval"]["eval/success"],
                     "solved": "".join("1" if t.success else "0" for t in episodes)})
        print(f"{run.name} round {r}: validation success {scored['success']:.3f}, reward {scored['reward']:.3f}, "
              f"solved {rows[-1]['solved']}; held out {rows[-1]['held_out']:.3f}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", type=Path, required=True, help="finished `selfevolve evolve` run folders")
    args = ap.parse_args()
    parts = []
    for run in args.runs:
        rows = score_rounds(run)
        by_success = rows[best_round(rows)]  # what evolve.keep=best keeps
        by_reward = max(rows, key=lambda x: (x["validation"]["success"], x["validation"]["reward"], x["round"]))
        parts.append(f"{run.name}: kept round {by_success['round']} (held out {by_success['held_out']:.3f}), "
                     f"with the reward tie-break round {by_reward['round']} ({by_reward['held_out']:.3f})")
    print("SUMMARY validation rounds: " + "; ".join(parts))


if __name__ == "__main__":
    main()
