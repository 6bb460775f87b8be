"""How many of an evolve run's hindsight references are detours? Counted from its recorded explorations.

For each ``selfevolve evolve`` run folder on a game, each round's ``round-R/explorations.jsonl`` goes through the
template writer twice, as the run's configuration writes (``evolve.hindsight``): with the explorer's own moves,
loops erased (``evolve.references=explored``), and with the shortest moves to the same state a breadth-first
search over replays finds (``evolve.references=shortest``, ``questioning/grid.py``). Per round it prints the
references written, how many are longer than the shortest (detoured) and by how many moves in all, and the same
among the longest third of that round's references (``evolve.bc_longest``'s cut, ``TaskPool.longest``'s rule: in
round 0 what behaviour cloning imitates, up to the filters; later rounds' cloning ranks the whole pool of every
round, here each round is ranked alone). The template writer is used whatever ``evolve.writer`` the run had.

    python benchmarks/bench_detours.py --runs runs/evolve-s0 runs/evolve-s1 --held-out 22 22

With ``--held-out`` (one figure a run: what the run kept, e.g. greedy successes of 64), the final SUMMARY line
gives Spearman's rank correlation between round 0's detoured references in the longest third and that figure.
No model is loaded. The references written here are the candidates, before the filters (a duplicate of an
earlier round's task is still counted), so the counts can differ by a few from a pool's.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from selfevolve import load_config
from selfevolve.build import resolve_env
from selfevolve.envs import make_env
from selfevolve.evolve.hindsight import game_of, train_options
from selfevolve.evolve.pool import longest_share
from selfevolve.questioning.explore import load_explorations


def round_counts(cfg, env_cls, explorations: Path) -> dict[str, int]:
    game = game_of(env_cls).game
    world = make_env(env_cls, **train_options(cfg, env_cls))
    relabel = cfg.evolve.hindsight == "goal"
    explored, shortest = [], []
    for record in load_explorations(str(explorations), cfg.env.name):
        if not record.good_turns:
            continue
        explored += [len(t["action_sequence"]) for t in game.template(record, world, relabel=relabel)]
        shortest += [len(t["action_sequence"]) for t in game.template(record, world, relabel=relabel, shortest=True)]
    top = longest_share(explored, cfg.evolve.bc_longest)  # TaskPool.longest's rule
    return {"references": len(explored), "detoured": sum(a > b for a, b in zip(explored, shortest)),
            "extra_moves": sum(explored) - sum(shortest), "longest": len(top),
            "longest_detoured": sum(explored[i] > shortest[i] for i in top),
            "longest_extra": sum(explored[i] - shortest[i] for i in top)}


def ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1  # ties share their mean rank
        i = j + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rho: Pearson's correlation of the ranks (ties at their mean rank)."""
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    spread = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return cov / spread if spread else math.nan  # nan: one side is constant, no ranking to correlate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", required=True, type=Path, help="selfevolve evolve run folders")
    ap.add_argument("--held-out", nargs="*", type=float, default=[],
                    help="one figure per run (what it kept), for the rank correlation")
    args = ap.parse_args()
    if args.held_out and len(args.held_out) != len(args.runs):
        raise SystemExit(f"--held-out has {len(args.held_out)} figures for {len(args.runs)} runs")
    print("| run | round | references | detoured | extra moves | longest third | detoured there | extra there |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    first = []
    for run in args.runs:
        if not (run / "round-0" / "train" / "config.yaml").exists():
            raise SystemExit(f"{run}: no round-0/train/config.yaml (not an evolve run folder)")
        cfg = load_config(run / "round-0" / "train" / "config.yaml")  # the run's own settings
        env_cls = resolve_env(cfg, None)
        if game_of(env_cls) is None:
            raise SystemExit(f"{run}: {cfg.env.name} is not a game; tool worlds keep their explored calls")
        rounds = sorted(run.glob("round-*/explorations.jsonl"), key=lambda p: int(p.parent.name[6:]))
        if not rounds:
            raise SystemExit(f"{run}: no round-R/explorations.jsonl")
        for path in rounds:
            c = round_counts(cfg, env_cls, path)
            if path.parent.name == "round-0":
                first.append(c["longest_detoured"])
            print(f"| {run.name} | {path.parent.name[6:]} | {c['references']} | {c['detoured']} | {c['extra_moves']} "
                  f"| {c['longest']} | {c['longest_detoured']} | {c['longest_extra']} |")
    rho = (f"; Spearman rho(round-0 detoured in the longest third, held out) = {spearman(first, args.held_out):.2f}"
           if args.held_out and len(first) == len(args.runs) and len(first) > 2 else "")
    n = len(args.runs)
    print(f"SUMMARY: {n} run{'s' if n != 1 else ''}; round 0's longest third holds {min(first, default=0)}-"
          f"{max(first, default=0)} detoured references{rho}")


if __name__ == "__main__":
    main()
