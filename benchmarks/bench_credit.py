"""Credit assignment and rollout search, side by side: GRPO vs GiGPO vs GiGPO + SELAUR vs PPO vs Self-AC, and
plain sampling vs best-of-N vs beam vs lookahead search (TSR).

For every environment and seed, one behaviour-cloning warm start is trained once (``train.steps=0``); every
method then starts from that same adapter (``model.init_from``) and gets the same budget of RL updates, so the
methods differ in nothing but their credit assignment. Evaluation: greedy success on held-out tasks.

    python benchmarks/bench_credit.py                       # the full grid (hours on a 2-core CPU)
    python benchmarks/bench_credit.py --envs frozenlake --seeds 0 1 2 --steps 6 --episodes 32 --workers 2

Runs go to ``--out`` (default runs/bench_credit); an interrupted benchmark continues where it stopped (finished
runs are skipped, unfinished ones resume from their last checkpoint). Writes ``summary.json`` there, a plot
(``--plot``, needs matplotlib: ``pip install -e '.[bench]'``: greedy eval success at the start and at each
evaluation, and the training rollouts' success rate at every update), a markdown table, and a final SUMMARY
line. The warm start always uses the default batch (4 tasks x 8 rollouts per behaviour-cloning step);
``--tasks-per-step``/``--group-size`` set the RL batch of the method runs.
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

METHODS = {
    "grpo": ["algo.name=grpo"],
    "gigpo": ["algo.name=gigpo"],
    "gigpo+selaur": ["algo.name=gigpo", "reward.shaping=selaur"],
    "ppo": ["algo.name=ppo"],
    "self_ac": ["algo.name=self_ac"],  # per-token ratio (the default)
    "self_ac-turn": ["algo.name=self_ac", "algo.self_ac.ratio=turn"],  # the seed's per-turn ratio
    # trajectory-search rollouts (GRPO on the kept trajectories; "grpo" above is plain sampling)
    "best_of_n": ["algo.name=grpo", "rollout.search=best_of_n"],
    "beam": ["algo.name=grpo", "rollout.search=beam"],
    "lookahead": ["algo.name=grpo", "rollout.search=lookahead"],
    # AgentEvolver self-navigating (GRPO + insights in half the rollouts, stripped and boosted), evaluated
    # without experience: what the policy itself internalised
    "navigate": ["algo.name=grpo", "experience.navigate=true", "eval.experience=off"],
    "navigate_recompute": ["algo.name=grpo", "experience.navigate=true", "experience.old_logprobs=recompute",
                           "eval.experience=off"],
}


def read_metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def finished(run: Path, steps: int) -> bool:
    m = read_metrics(run)
    return bool(m) and m[-1].get("step") == steps and any("eval/success" in r or "warm/success" in r for r in m)


def run_job(name: str, overrides: list[str], run: Path, steps: int, threads: int, log_dir: Path) -> float:
    if finished(run, steps):
        return 0.0
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "selfevolve.cli", "train", *overrides, f"train.out_dir={run}",
           "train.resume=true", "train.progress=false"]
    t0 = time.perf_counter()
    with (log_dir / f"{name}.log").open("a") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    dt = time.perf_counter() - t0
    print(f"[{time.strftime('%H:%M:%S')}] {name}: exit {rc} after {dt / 60:.1f} min", flush=True)
    if rc != 0:
        raise RuntimeError(f"{name} failed (exit {rc}); see {log_dir / (name + '.log')}")
    return dt


def main(methods: dict | None = None, label: str = "credit", description: str | None = None, **defaults) -> None:
    """The benchmark over ``methods`` (default: :data:`METHODS`); ``defaults`` replace the options' defaults
    (another benchmark's grid: ``bench_combined.py``)."""
    global METHODS
    METHODS = methods or METHODS
    ap = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0])
    ap.add_argument("--envs", nargs="+", default=["frozenlake", "sokoban"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--steps", type=int, default=10, help="RL updates per method run")
    ap.add_argument("--tasks-per-step", type=int, default=4, help="tasks per RL update (method runs)")
    ap.add_argument("--group-size", type=int, default=8, help="rollouts per task (method runs)")
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=64, help="held-out eval episodes")
    ap.add_argument("--warm-steps", type=int, default=10, help="behaviour-cloning steps of the shared warm start")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--workers", type=int, default=2, help="runs in parallel")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--extra", nargs="*", default=[], help="more overrides for every run (key=value)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_credit"))
    ap.add_argument("--plot", type=Path, default=None, help="write the eval curves here (PNG)")
    ap.set_defaults(**defaults)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    logs = args.out / "logs"
    logs.mkdir(exist_ok=True)
    common = [f"model.name={args.model}", f"eval.episodes={args.episodes}", *args.extra]

    def warm_dir(env, seed):
        return args.out / f"{env}-s{seed}-warm"

    warm_jobs = [(f"{env}-s{seed}-warm",
                  [*common, f"env.name={env}", f"seed={seed}", "train.steps=0",
                   f"train.warm_start_steps={args.warm_steps}"], warm_dir(env, seed), 0)
                 for env in args.envs for seed in args.seeds]
    method_jobs = [(f"{env}-s{seed}-{m}",
                    [*common, f"env.name={env}", f"seed={seed}", *METHODS[m], f"model.init_from={warm_dir(env, seed)}",
                     "train.warm_start_steps=0", "eval.at_start=false", f"train.steps={args.steps}",
                     f"train.tasks_per_step={args.tasks_per_step}", f"algo.group_size={args.group_size}",
                     f"train.eval_every={args.eval_every}"], args.out / f"{env}-s{seed}-{m}", args.steps)
                   for env in args.envs for seed in args.seeds for m in args.methods]
    walls: dict[str, float] = {}
    with ThreadPoolExecutor(args.workers) as pool:
        # Warm starts are submitted first, so every one has started before any method run waits for it: a
        # method run needs only its own seed's warm start, and the other workers keep busy meanwhile.
        warm = {job[2]: pool.submit(run_job, *job, args.threads, logs) for job in warm_jobs}

        def method(job):
            env, seed = job[0].split("-s")[0], int(job[0].split("-s")[1].split("-")[0])
            warm[warm_dir(env, seed)].result()
            return run_job(*job, args.threads, logs)

        futures = {job[0]: pool.submit(method, job) for job in method_jobs}
        for job in warm_jobs:
            walls[job[0]] = warm[job[2]].result()
        for name, fut in futures.items():
            walls[name] = fut.result()

    summary = summarise(args, walls)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print_table(summary)
    if args.plot:
        plot(summary, args.plot)
    finals = "; ".join(f"{env}/{m} {s['final_mean']:.3f}±{s['final_std']:.3f}"
                       for env, ms in summary["results"].items() for m, s in ms.items())
    print(f"SUMMARY {label} benchmark ({len(args.seeds)} seeds, {args.steps} updates, {args.episodes} eval eps): {finals}")


def summarise(args, walls: dict[str, float]) -> dict:
    results: dict = {}
    for env in args.envs:
        results[env] = {}
        for m in args.methods:
            curves, seconds, tokens, train_curves, upd, multiple, sampled = [], [], [], [], [], [], []
            for seed in args.seeds:
                warm = read_metrics(args.out / f"{env}-s{seed}-warm")
                start = next((r.get("warm/success", r.get("eval/success")) for r in warm if r.get("step") == 0), None)
                rows = read_metrics(args.out / f"{env}-s{seed}-{m}")
                curve = {0: start, **{r["step"]: r["eval/success"] for r in rows if "eval/success" in r}}
                curves.append(curve)
                train_curves.append({r["step"]: r["success/rate"] for r in rows if "success/rate" in r})
                seconds.append(sum(r.get("time/rollout", 0) + r.get("time/update", 0) for r in rows))
                upd.append(sum(r.get("time/update", 0) for r in rows))
                cm = [r["search/compute_multiple"] for r in rows if "search/compute_multiple" in r]
                multiple.append(statistics.mean(cm) if cm else 1.0)
                sampled.append(next((r["eval/sample_success"] for r in reversed(rows) if "eval/sample_success" in r),
                                    None))
                tokens.append(statistics.mean(r.get("tokens_per_s", 0) for r in rows if "tokens_per_s" in r)
                              if any("tokens_per_s" in r for r in rows) else 0)
            steps = sorted(set.intersection(*(set(c) for c in curves)))
            mean = {s: statistics.mean(c[s] for c in curves) for s in steps}
            std = {s: statistics.pstdev(c[s] for c in curves) if len(curves) > 1 else 0.0 for s in steps}
            last = steps[-1]
            tsteps = sorted(set.intersection(*(set(c) for c in train_curves))) if train_curves else []
            results[env][m] = {
                "steps": steps, "mean": [mean[s] for s in steps], "std": [std[s] for s in steps],
                "per_seed_final": [c[last] for c in curves], "start_mean": mean[0],
                "final_mean": mean[last], "final_std": std[last],
                "train_seconds_mean": statistics.mean(seconds),
                "compute_multiple_mean": statistics.mean(multiple),
                "final_sample_success_per_seed": sampled,
                "update_seconds_mean": statistics.mean(upd),
                "train_steps": tsteps,
                "train_success_mean": [statistics.mean(c[t] for c in train_curves) for t in tsteps],
                # the sampled training rollouts of the last 3 updates (G x tasks per update, per seed): a finer
                # signal than greedy eval success while that is still near 0
                "train_success_late_per_seed": [statistics.mean(sorted(c.items())[-3:][i][1] for i in range(min(3, len(c))))
                                                for c in train_curves],
            }
    return {"args": {k: str(v) for k, v in vars(args).items()}, "results": results}


def print_table(summary: dict) -> None:
    print("| env | method | greedy eval success: start (warm) | final, mean ± std over seeds | per seed | "
          "training-rollout success, last 3 updates: mean ± std | per seed | final sampled eval success per seed "
          "(eval.pass_k) | compute multiple | train s/run (update s) |")
    print("|---|---|---:|---:|---|---:|---|---|---:|---:|")
    for env, ms in summary["results"].items():
        for m, s in ms.items():
            seeds = ", ".join(f"{x:.3f}" for x in s["per_seed_final"])
            late = s["train_success_late_per_seed"]
            sd = statistics.pstdev(late) if len(late) > 1 else 0.0
            print(f"| {env} | {m} | {s['start_mean']:.3f} | {s['final_mean']:.3f} ± {s['final_std']:.3f} | {seeds} | "
                  f"{statistics.mean(late):.3f} ± {sd:.3f} | {', '.join(f'{x:.3f}' for x in late)} | "
                  f"{', '.join('-' if x is None else f'{x:.3f}' for x in s.get('final_sample_success_per_seed', []))} | "
                  f"{s.get('compute_multiple_mean', 1.0):.2f} | "
                  f"{s['train_seconds_mean']:.0f} ({s['update_seconds_mean']:.0f}) |")


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(summary["results"])
    fig, axes = plt.subplots(2, len(envs), figsize=(5.5 * len(envs), 6.4), squeeze=False)
    for col, env in enumerate(envs):
        top, bottom = axes[0][col], axes[1][col]
        for m, s in summary["results"][env].items():
            lo = [a - b for a, b in zip(s["mean"], s["std"])]
            hi = [a + b for a, b in zip(s["mean"], s["std"])]
            line, = top.plot(s["steps"], s["mean"], marker="o", label=m)
            top.fill_between(s["steps"], lo, hi, alpha=0.15, color=line.get_color())
            bottom.plot(s["train_steps"], s["train_success_mean"], marker=".", label=m, color=line.get_color())
        top.set_title(f"{env}: greedy eval success (mean ± std over seeds)")
        bottom.set_title(f"{env}: success of the training rollouts")
        bottom.set_xlabel("RL update (after the shared warm start)")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
