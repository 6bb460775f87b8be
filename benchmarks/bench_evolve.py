"""The evolve benchmark (issue 41 item 4): ``selfevolve evolve`` from zero human-written tasks, and its three
ablations, on several seeds; each run a ``selfevolve evolve`` process, resumable (``train.resume=true``: a
finished run is skipped, an interrupted one continues).

Arms (every one: the same RL updates, ``train.steps``, and the same rollouts per update):

- ``evolve``: the loop with its defaults;
- ``no_curriculum``: tasks drawn uniformly from the pool (``evolve.curriculum=false``);
- ``no_imitation``: no behaviour cloning on the references and no replay term (``evolve.bc_steps=0
  evolve.imitation_weight=0``);
- ``no_reexplore``: only round 0 explores (``evolve.reexplore=false``).

The untrained model (arm i) and today's default recipe on the original tasks (arm ii) are ``selfevolve eval`` and
``selfevolve sweep`` runs; ``--baseline DIR`` reads a sweep's ``summary.json`` into the table.

    python benchmarks/bench_evolve.py --env frozenlake --seeds 0 1 2 --arms evolve no_curriculum \\
        --out runs/bench_evolve --workers 2 --baseline runs/sweep-default
    python benchmarks/bench_evolve.py --env sokoban --seeds 0 --arms evolve --extra eval.episodes=32

Writes ``OUT/ENV/ARM/seed-N/`` (the evolve runs), ``OUT/summary-ENV.json`` and prints a markdown table and a
final SUMMARY line: per arm, held-out greedy success of the kept round per seed (the last one with
evolve.keep=last), mean ± std, the change against the baseline's mean gain, wall minutes and rollouts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ARMS = {
    "evolve": [],
    "no_curriculum": ["evolve.curriculum=false"],
    "no_imitation": ["evolve.bc_steps=0", "evolve.imitation_weight=0"],
    "no_reexplore": ["evolve.reexplore=false"],
}


def run(env: str, arm: str, seed: int, args) -> dict:
    out = args.out / env / arm / f"seed-{seed}"
    state = out / "evolve.json"
    done = out / "bench_done.json"
    if done.is_file():
        cached = json.loads(done.read_text())
        if "kept_round" in cached:  # older records count the last round as final: resume the run to recount
            return cached
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "selfevolve.cli", "evolve", f"env.name={env}", f"seed={seed}",
           f"train.out_dir={out}", "train.progress=false", *ARMS[arm], *args.extra]
    if state.is_file():
        cmd.append("train.resume=true")
    env_vars = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    if args.small_heap:  # glibc's own settings, not the run's (selfevolve/models/allocator.py)
        env_vars["MALLOC_MMAP_THRESHOLD_"] = "65536"
    t0 = time.perf_counter()
    with (out / "bench.log").open("a") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env_vars)
    if code != 0:
        return {"arm": arm, "seed": seed, "error": f"exit {code}, see {out / 'bench.log'}"}
    s = json.loads(state.read_text())
    rounds = s["rounds"]
    summary = json.loads((out / "evolve_report.json").read_text())["summary"]
    result = {
        "arm": arm, "seed": seed, "start": s.get("start_eval", {}).get("eval/success"),
        "per_round": [r.get("eval", {}).get("eval/success") for r in rounds],
        # the policy the run keeps: its kept round's (evolve.keep=best), else its last round's (the run's summary)
        "final": summary["final"],
        "kept_round": summary.get("kept_round"),
        "last": rounds[-1].get("eval", {}).get("eval/success"),
        "pool": rounds[-1].get("pool", {}).get("tasks"),
        "kept_per_round": [r.get("write", {}).get("kept") for r in rounds],
        "rollouts": sum(r.get("train", {}).get("rollouts", 0) for r in rounds),
        "exploration_answers": sum(r.get("explore", {}).get("answers", 0) for r in rounds),
        "bc_demonstrations": sum(r.get("bc", {}).get("bc/demonstrations", 0) for r in rounds),
        "updates": sum(r.get("train", {}).get("updates", 0) for r in rounds),
        # the stages' own seconds (exploring, writing, cloning + RL + evaluation), so a resumed run counts once
        "minutes": round((sum(r.get(k, {}).get("seconds", 0) for r in rounds
                              for k in ("explore", "write", "train", "validation"))
                          + s.get("validation", {}).get("seconds", 0)) / 60, 1),
        "wall_minutes_this_call": round((time.perf_counter() - t0) / 60, 1),
    }
    done.write_text(json.dumps(result))
    return result


def baseline(path: Path | None) -> dict | None:
    if path is None:
        return None
    f = path / "summary.json" if path.is_dir() else path
    if not f.is_file():
        return None
    s = json.loads(f.read_text())
    per = [x for x in s.get("per_seed", []) if x.get("after") is not None]
    return {"per_seed": {x["seed"]: (x.get("before"), x["after"]) for x in per}, "source": str(f)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="frozenlake")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--workers", type=int, default=1, help="runs at a time")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--small-heap", action="store_true",
                    help="hand freed memory back to the system (glibc's 64 KiB mmap threshold): a smaller peak "
                    "per run for many runs at once, at about 1.4x the wall time (docs/benchmarks.md)")
    ap.add_argument("--extra", nargs="*", default=[], help="more overrides for every run (key=value)")
    ap.add_argument("--baseline", type=Path, default=None, help="a selfevolve sweep folder (arm ii)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_evolve"))
    args = ap.parse_args()
    jobs = [(args.env, arm, seed) for seed in args.seeds for arm in args.arms]
    with ThreadPoolExecutor(args.workers) as pool:
        results = list(pool.map(lambda j: run(*j, args), jobs))
    base = baseline(args.baseline)
    summary = {"env": args.env, "extra": args.extra, "baseline": base, "arms": {}}
    print("| arm | held-out success per seed | mean ± std | per round (mean over seeds) | minutes per run | "
          "rollouts per run |")
    print("|---|---|---:|---|---:|---:|")
    for arm in args.arms:
        rs = [r for r in results if r["arm"] == arm and "error" not in r]
        finals = [r["final"] for r in rs if r["final"] is not None]
        if not finals:
            print(f"| {arm} | (no finished run: {[r.get('error') for r in results if r['arm'] == arm]}) | | | | |")
            continue
        mean = statistics.mean(finals)
        std = statistics.stdev(finals) if len(finals) > 1 else 0.0
        rounds = [statistics.mean(x for x in col if x is not None) for col in zip(*[r["per_round"] for r in rs])]
        summary["arms"][arm] = {"runs": rs, "mean": mean, "std": std, "per_round_mean": rounds}
        seeds = ", ".join(f"s{r['seed']} {r['final']:.3f}" for r in rs)
        print(f"| {arm} | {seeds} | {mean:.3f} ± {std:.3f} | "
              f"{' → '.join(f'{x:.3f}' for x in rounds)} | {statistics.mean(r['minutes'] for r in rs):.0f} | "
              f"{statistics.mean(r['rollouts'] for r in rs):.0f} |")
    if base:
        gains = [a - (b or 0.0) for b, a in base["per_seed"].values()]
        summary["baseline_gain_mean"] = statistics.mean(gains) if gains else None
        print(f"baseline (arm ii, {base['source']}): per seed after {[a for _, a in base['per_seed'].values()]}, "
              f"mean gain {summary['baseline_gain_mean']:.3f}")
    (args.out / f"summary-{args.env}.json").write_text(json.dumps(summary, indent=1))
    line = "; ".join(f"{arm} {s['mean']:.3f}±{s['std']:.3f} (n={len(s['runs'])})"
                     for arm, s in summary["arms"].items())
    print(f"SUMMARY evolve {args.env}: held-out greedy success after the last round: {line}")


if __name__ == "__main__":
    main()
