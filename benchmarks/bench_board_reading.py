"""Does a FrozenLake policy read the board, or replay one route? Measured on its own held-out episodes.

For each run folder (a ``selfevolve train`` folder, or a ``selfevolve evolve`` folder: then each round's
``round-R/train``), the greedy episodes of its last evaluation (``eval_trajectories.jsonl``, the latest step)
are replayed in the environment the run evaluated on (its ``config.yaml``: the test split), each step checked
against the recorded observation. Per run it counts:

- the steps taken beside a hole (the board's hint line names a move as ``hole``), and how many of them walked
  into it; a policy that ignores the hint picks the hole as often as a uniform choice among the four moves
  (``uniform``: the mean share of hole moves at those steps) or more;
- the distinct move sequences over the episodes (one route replayed everywhere gives one).

Beside them, on the same maps: the best single fixed route among the shortest ones to the far corner (every
order of the right and down moves), i.e. the most a policy that does not look at the board could score.

    python benchmarks/bench_board_reading.py --runs runs/default-s0 runs/evolve-s9

Prints a markdown table and a final SUMMARY line. No model is loaded; it reads the recorded episodes only.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from selfevolve import load_config
from selfevolve.build import resolve_env
from selfevolve.envs import make_env
from selfevolve.envs.games.frozenlake import MOVES
from selfevolve.envs.games.moves import parse_moves
from selfevolve.train.evaluate import eval_env_options

DELTAS = dict(zip(MOVES, ((0, -1), (1, 0), (0, 1), (-1, 0))))  # MOVES: Left, Down, Right, Up


def train_folders(run: Path) -> list[tuple[str, Path]]:
    """``(label, folder)`` of every evaluated training folder of ``run``: itself, or an evolve run's rounds."""
    if (run / "eval_trajectories.jsonl").exists():
        return [(label(run), run)]
    rounds = sorted(run.glob("round-*/train/eval_trajectories.jsonl"), key=lambda p: int(p.parent.parent.name[6:]))
    if not rounds:
        raise SystemExit(f"{run}: no eval_trajectories.jsonl, and no round-R/train/ holding one")
    return [(f"{label(run)} {p.parent.parent.name}", p.parent) for p in rounds]


def label(run: Path) -> str:
    """A run's name in the table: its folder and the one above (runs of several arms share seed names)."""
    return f"{run.resolve().parent.name}/{run.resolve().name}"


def last_evaluation(folder: Path) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "eval_trajectories.jsonl").read_text().splitlines() if line]
    last = max(r["step"] for r in rows)
    return [r for r in rows if r["step"] == last]


def hole_moves(env) -> set[str]:
    """The moves that walk from the player's cell into a hole (what the hint line calls ``hole``)."""
    r, c = env.position
    out = set()
    for move, (dr, dc) in DELTAS.items():
        rr, cc = r + dr, c + dc
        if 0 <= rr < len(env.desc) and 0 <= cc < len(env.desc[0]) and env.desc[rr][cc] == "H":
            out.add(move)
    return out


def measure(folder: Path) -> dict:
    cfg = load_config(str(folder / "config.yaml"))
    env_cls = resolve_env(cfg, None)
    if cfg.env.name != "frozenlake":
        raise SystemExit(f"{folder}: env.name={cfg.env.name!r}; this benchmark reads FrozenLake boards only")
    env = make_env(env_cls, **eval_env_options(env_cls, cfg.env.options(), cfg.eval.env))
    episodes = last_evaluation(folder)
    beside = into = 0
    uniform = 0.0
    sequences, seeds = set(), []
    for ep in episodes:
        seed = int(ep["task"]["seed"])
        seeds.append(seed)
        env.reset(seed)
        for step in ep["steps"]:
            holes = hole_moves(env)
            move = (parse_moves(step["action_text"], MOVES, 1) or [None])[0]
            if holes:
                beside += 1
                into += move in holes
                uniform += len(holes) / len(MOVES)
            result = env.step(step["action_text"])
            if result.observation != step["observation"]:
                raise SystemExit(f"{folder}: episode of seed {seed} does not replay (another environment setting?)")
        if bool(env.success) != bool(ep["success"]):
            raise SystemExit(f"{folder}: episode of seed {seed} replays to another outcome")
        sequences.add(tuple(s["action_text"].strip() for s in ep["steps"]))
    return {"episodes": len(episodes), "success": sum(bool(e["success"]) for e in episodes), "beside": beside,
            "into": into, "uniform": uniform / max(beside, 1), "sequences": len(sequences), "seeds": seeds,
            "env": env}


def best_fixed_route(env, seeds: list[int]) -> tuple[str, int]:
    """The shortest route to the far corner (every order of size-1 Rights and Downs) that solves the most of
    the maps of ``seeds``, and how many it solves."""
    n = len(env.desc) - 1
    best = ("", -1)
    for order in sorted(set(itertools.permutations(["Right"] * n + ["Down"] * n))):
        solved = 0
        for seed in seeds:
            env.reset(seed)
            for move in order:
                if env.step(move).done:
                    break
            solved += bool(env.success)
        if solved > best[1]:
            best = (" ".join(m[0] for m in order), solved)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", required=True, help="train or evolve run folders")
    args = ap.parse_args()
    print("| run | held-out success | steps beside a hole | into the hole | uniform choice | distinct move sequences |")
    print("|---|---:|---:|---:|---:|---:|")
    routes, shares = {}, []
    for run in args.runs:
        for label, folder in train_folders(Path(run)):
            m = measure(folder)
            share = m["into"] / max(m["beside"], 1)
            shares.append(f"{label} {share:.2f}")
            print(f"| {label} | {m['success']}/{m['episodes']} | {m['beside']} | {m['into']} ({share:.0%}) | "
                  f"{m['uniform']:.0%} | {m['sequences']} |", flush=True)
            key = tuple(m["seeds"])
            if key not in routes:
                routes[key] = best_fixed_route(m["env"], m["seeds"]) + (len(key),)
    for route, solved, n in routes.values():
        print(f"best fixed route on these {n} maps: {route} solves {solved}/{n}")
    print("SUMMARY board reading (share of steps beside a hole that walk into it): " + ", ".join(shares)
          + "; best fixed route " + ", ".join(f"{s}/{n}" for _, s, n in routes.values()))


if __name__ == "__main__":
    main()
