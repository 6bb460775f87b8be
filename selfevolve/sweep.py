"""``selfevolve sweep``: the same configuration trained once per seed, and what the seeds say together.

One seed cannot tell a recipe from luck: on small benchmarks the seed-to-seed spread is 5–15 points. A sweep runs
``selfevolve train`` for every seed of ``sweep.seeds`` into ``OUT/seed-N/`` (``train.resume=true``: an
interrupted seed continues from its last checkpoint, a finished one is skipped), one after another or
``sweep.parallel`` at a time, and writes:

- ``OUT/summary.json`` and ``OUT/summary.md``: per seed, held-out greedy success before and after training, the
  best evaluation and its step, the wall time; across seeds, mean ± std, median and min of the final success
  and of the gain, and how many seeds learned (a gain of at least ``sweep.learned_gain``);
- ``OUT/curves.png``: every seed's training success per step, with its evaluations as points.

Each seed is its own process (its memory is returned when it ends; a crash costs one seed, not the sweep).
From Python: ``run_sweep(cfg, overrides)``; with a ``TextEnv`` class of your own the seeds run in this process,
one after another.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from selfevolve.errors import ConfigError
from selfevolve.train.metrics import held_out_evaluations

DONE = "sweep_done.json"  # a finished seed's record, in its run folder


def parse_seeds(text: Any) -> list[int]:
    """``"0-9"``, ``"0,3,7"``, ``"2"`` or a list of integers → the seeds, in order, without repeats."""
    if isinstance(text, int) and not isinstance(text, bool):
        return [text]
    if isinstance(text, (list, tuple)):
        parts = [str(x) for x in text]
    else:
        parts = str(text).replace(" ", "").split(",")
    seeds: list[int] = []
    try:
        for part in parts:
            lo, dash, hi = part.partition("-")
            rng = range(int(lo), int(hi) + 1) if dash else [int(lo)]
            if dash and len(rng) == 0:
                raise ValueError
            seeds += [s for s in rng if s not in seeds]
    except ValueError:
        raise ConfigError(f"sweep.seeds must be like 0-9, 0,3,7 or 5 (non-negative integers), got {text!r}") from None
    if not seeds or len(seeds) > 1000 or min(seeds) < 0 or max(seeds) >= 2**63:
        raise ConfigError(f"sweep.seeds must name 1 to 1000 seeds in [0, 2^63), got {text!r}")
    return seeds


@dataclass
class SeedResult:
    """What one seed's run ended with (read from its ``metrics.jsonl``)."""

    seed: int
    before: float | None  # held-out greedy success before training (eval at step 0)
    after: float | None  # at the last evaluation
    best: float | None
    best_step: int | None
    eval_tasks: int | None  # distinct held-out tasks evaluated
    steps: int
    wall_s: float
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, training success/rate)
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, eval/success)

    @property
    def gain(self) -> float | None:
        return None if self.before is None or self.after is None else self.after - self.before


def read_run(run_dir: Path, seed: int, wall_s: float) -> SeedResult:
    """A seed's result from its run folder's ``metrics.jsonl`` (unreadable lines are skipped)."""
    curve, evals, tasks, steps = [], [], None, 0
    path = run_dir / "metrics.jsonl"
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []
    for line in lines:
        try:
            row = json.loads(line)
            step = int(row["step"])
        except (ValueError, KeyError, TypeError):
            continue
        steps = max(steps, step)
        if isinstance(row.get("success/rate"), (int, float)):
            curve.append((step, float(row["success/rate"])))
        for success, n in held_out_evaluations(row):  # the step's, then (step 0) the one after the warm start
            evals.append((step, success))
            tasks = n if n is not None else tasks
    before = evals[0][1] if evals and evals[0][0] == 0 else None
    after = evals[-1][1] if evals else None
    best_step, best = max(evals, key=lambda e: (e[1], -e[0])) if evals else (None, None)
    return SeedResult(seed, before, after, best, best_step, tasks, steps, round(wall_s, 1), curve, evals)


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "std": None, "median": None, "min": None, "max": None}
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(results: list[SeedResult], learned_gain: float) -> dict[str, Any]:
    """Across seeds: the final success's and the gain's mean, std (sample), median, min and max; seeds learned."""
    gains = [r.gain for r in results if r.gain is not None]
    return {
        "seeds": [r.seed for r in results],
        "after": _stats([r.after for r in results if r.after is not None]),
        "gain": _stats(gains),
        "learned": sum(g >= learned_gain - 1e-9 for g in gains),
        "learned_gain": learned_gain,
        "wall_s": _stats([r.wall_s for r in results]),
        "per_seed": [{k: v for k, v in asdict(r).items() if k not in ("curve", "evals")} | {"gain": r.gain}
                     for r in results],
    }


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def summary_markdown(summary: dict[str, Any], title: str) -> str:
    rows = ["| seed | before | after | gain | best (step) | held-out tasks | steps | wall time |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in summary["per_seed"]:
        best = f"{_pct(r['best'])} ({r['best_step']})" if r["best"] is not None else "–"
        gain = "–" if r["gain"] is None else f"{100 * r['gain']:+.1f}"
        rows.append(f"| {r['seed']} | {_pct(r['before'])} | {_pct(r['after'])} | {gain} | {best} | "
                    f"{r['eval_tasks'] if r['eval_tasks'] is not None else '–'} | {r['steps']} | {r['wall_s']:.0f} s |")
    a, g, w = summary["after"], summary["gain"], summary["wall_s"]
    n = len(summary["per_seed"])
    lines = [f"# {title}", "",
             f"**{summary['learned']} of {n} seeds learned** (held-out greedy success up by at least "
             f"{100 * summary['learned_gain']:.0f} points).", ""]
    if a["mean"] is not None:
        lines += [f"- held-out success after training: mean {_pct(a['mean'])} ± {_pct(a['std'])} (std over seeds), "
                  f"median {_pct(a['median'])}, min {_pct(a['min'])}, max {_pct(a['max'])}"]
    if g["mean"] is not None:
        lines += [f"- gain: mean {100 * g['mean']:+.1f} ± {100 * g['std']:.1f} points, median "
                  f"{100 * g['median']:+.1f}, min {100 * g['min']:+.1f}"]
    if w["mean"] is not None:
        lines += [f"- wall time per seed: median {w['median']:.0f} s (min {w['min']:.0f}, max {w['max']:.0f})"]
    return "\n".join(lines + ["", *rows, ""])


def plot_curves(results: list[SeedResult], path: Path, title: str) -> None:
    """Every seed's training success per step (lines) and held-out evaluations (points, same colour)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    cmap = plt.get_cmap("tab10")
    for i, r in enumerate(results):
        colour = cmap(i % 10)
        if r.curve:
            ax.plot(*zip(*r.curve), color=colour, alpha=0.55, lw=1.2, label=f"seed {r.seed}")
        if r.evals:
            ax.plot(*zip(*r.evals), color=colour, marker="o", ls="--", lw=0.8, ms=5)
    ax.set_xlabel("step")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{title}\nlines: training rollouts · dashed with dots: held-out greedy evaluation", fontsize=9)
    ax.grid(alpha=0.3)
    if results:
        ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@dataclass
class SweepSpec:
    seeds: list[int]
    parallel: int
    out_dir: Path
    learned_gain: float
    file: str | None
    overrides: list[str]  # the train overrides (no sweep.* keys, no seed, no train.out_dir)


def _done(run_dir: Path, overrides: list[str], file: str | None) -> dict | None:
    """A finished seed's record, or None; a record made with other settings is an error, not a skip."""
    path = run_dir / DONE
    if not path.is_file():
        return None
    try:
        done = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if done.get("overrides") != overrides or done.get("file") != file:
        raise ConfigError(f"{run_dir} was trained with other settings ({done.get('overrides')}); use another "
                          f"sweep.out_dir, or remove that folder")
    return done


def _command(spec: SweepSpec, seed: int) -> list[str]:
    run_dir = spec.out_dir / f"seed-{seed}"
    return [sys.executable, "-m", "selfevolve", "train", *([spec.file] if spec.file else []), *spec.overrides,
            f"seed={seed}", f"train.out_dir={run_dir}", "train.resume=true", "train.progress=false"]


def run_sweep(spec: SweepSpec, console=None, env=None) -> dict[str, Any]:
    """Train every seed not finished yet, then write the summary and the curves; returns the summary."""
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    say = console.print if console is not None else print
    todo = [s for s in spec.seeds if _done(spec.out_dir / f"seed-{s}", spec.overrides, spec.file) is None]
    if len(todo) < len(spec.seeds):
        say(f"sweep: {len(spec.seeds) - len(todo)} seed(s) already finished, skipped")
    if env is not None:
        _run_in_process(spec, todo, env, say)
    else:
        _run_processes(spec, todo, say)
    results = []
    for s in spec.seeds:
        done = _done(spec.out_dir / f"seed-{s}", spec.overrides, spec.file)
        if done is not None:
            results.append(read_run(spec.out_dir / f"seed-{s}", s, done["wall_s"]))
    title = f"sweep of {len(results)} seeds: {' '.join(spec.overrides) or 'the defaults'}"
    summary = summarize(results, spec.learned_gain) | {"overrides": spec.overrides, "file": spec.file,
                                                       "missing": [s for s in spec.seeds
                                                                   if s not in {r.seed for r in results}]}
    (spec.out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (spec.out_dir / "summary.md").write_text(summary_markdown(summary, title))
    plot_curves(results, spec.out_dir / "curves.png", title)
    return summary


def _record(spec: SweepSpec, seed: int, wall_s: float) -> None:
    run_dir = spec.out_dir / f"seed-{seed}"
    spent = run_dir / "sweep_wall.json"  # time of earlier, interrupted attempts
    before = json.loads(spent.read_text()).get("wall_s", 0.0) if spent.is_file() else 0.0
    (run_dir / DONE).write_text(json.dumps({"seed": seed, "wall_s": before + wall_s, "overrides": spec.overrides,
                                            "file": spec.file}) + "\n")


def _add_wall(spec: SweepSpec, seed: int, wall_s: float) -> None:
    run_dir = spec.out_dir / f"seed-{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    spent = run_dir / "sweep_wall.json"
    before = json.loads(spent.read_text()).get("wall_s", 0.0) if spent.is_file() else 0.0
    spent.write_text(json.dumps({"wall_s": before + wall_s}) + "\n")


def _run_processes(spec: SweepSpec, todo: list[int], say) -> None:
    """``sweep.parallel`` seeds at a time, each ``selfevolve train`` in its own process, its output in
    ``OUT/seed-N/train.log``; each process gets an equal share of the CPU threads unless OMP_NUM_THREADS is set."""
    env = dict(os.environ)
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, min(spec.parallel, len(todo) or 1))))
    running: dict[int, tuple[subprocess.Popen, float, Any]] = {}
    queue = list(todo)
    t0 = time.monotonic()
    failed = []
    try:
        while queue or running:
            while queue and len(running) < spec.parallel:
                seed = queue.pop(0)
                run_dir = spec.out_dir / f"seed-{seed}"
                run_dir.mkdir(parents=True, exist_ok=True)
                log = (run_dir / "train.log").open("a")
                proc = subprocess.Popen(_command(spec, seed), stdout=log, stderr=subprocess.STDOUT, env=env)
                running[seed] = (proc, time.monotonic(), log)
                say(f"sweep: seed {seed} started ({len(todo) - len(queue)}/{len(todo)}, log {run_dir / 'train.log'})")
            time.sleep(0.5)
            for seed, (proc, start, log) in list(running.items()):
                if proc.poll() is None:
                    continue
                log.close()
                del running[seed]
                took = time.monotonic() - start
                if proc.returncode == 0:
                    _record(spec, seed, took)
                    say(f"sweep: seed {seed} finished in {took / 60:.1f} min ({_elapsed(t0)} elapsed)")
                else:
                    _add_wall(spec, seed, took)
                    failed.append(seed)
                    say(f"sweep: seed {seed} failed (exit {proc.returncode}); see "
                        f"{spec.out_dir / f'seed-{seed}' / 'train.log'} — re-run the sweep to resume it")
    except KeyboardInterrupt:
        for seed, (proc, start, log) in running.items():
            proc.terminate()  # SIGTERM: each run stops cleanly at its last checkpoint (train/signals.py)
        for seed, (proc, start, log) in running.items():
            proc.wait()
            log.close()
            _add_wall(spec, seed, time.monotonic() - start)
        raise
    if failed:
        say(f"sweep: {len(failed)} seed(s) failed: {', '.join(map(str, failed))}")


def _run_in_process(spec: SweepSpec, todo: list[int], env, say) -> None:
    from selfevolve.config import load_config
    from selfevolve.train.trainer import Trainer

    for seed in todo:
        run_dir = spec.out_dir / f"seed-{seed}"
        cfg = load_config(spec.file, [*spec.overrides, f"seed={seed}", f"train.out_dir={run_dir}",
                                      "train.resume=true", "train.progress=false"])
        start = time.monotonic()
        try:
            Trainer(cfg, env=env).train()
        except KeyboardInterrupt:
            _add_wall(spec, seed, time.monotonic() - start)
            raise
        _record(spec, seed, time.monotonic() - start)
        say(f"sweep: seed {seed} finished in {(time.monotonic() - start) / 60:.1f} min")


def _elapsed(t0: float) -> str:
    m = (time.monotonic() - t0) / 60
    return f"{m:.1f} min" if m < 90 else f"{m / 60:.1f} h"


def split_sweep_args(args: list[str]) -> tuple[str | None, list[str], dict[str, str]]:
    """``[FILE] KEY=VALUE...`` → the YAML file, the train overrides, and the sweep's own keys (``sweep.*``, and
    ``seeds=`` for ``sweep.seeds``)."""
    file = args[0] if args and "=" not in args[0] else None
    own, rest = {}, []
    for a in args[1:] if file else args:
        key, eq, value = a.partition("=")
        key = key.strip()
        if key == "seeds":
            key = "sweep.seeds"
        if key.startswith("sweep."):
            if key not in SWEEP_KEYS:
                raise ConfigError(f"unknown sweep key {key!r}; allowed: {', '.join(SWEEP_KEYS)}")
            own[key] = value
        elif key in ("seed", "train.out_dir", "train.resume"):
            raise ConfigError(f"{key} is set by the sweep for each seed (use sweep.seeds and sweep.out_dir)")
        else:
            rest.append(a)
    return file, rest, own


SWEEP_KEYS = {"sweep.seeds": "0-9", "sweep.parallel": "1", "sweep.out_dir": "runs/sweep",
              "sweep.learned_gain": "0.2"}


def make_spec(args: list[str]) -> SweepSpec:
    """A sweep from command-line words; the train overrides are checked (a wrong key fails before any run)."""
    from selfevolve.config import load_config

    file, overrides, own = split_sweep_args(args)
    values = {**SWEEP_KEYS, **own}
    seeds = parse_seeds(values["sweep.seeds"])
    try:
        parallel = int(values["sweep.parallel"])
        gain = float(values["sweep.learned_gain"])
    except ValueError:
        raise ConfigError("sweep.parallel must be an integer and sweep.learned_gain a number") from None
    if not 1 <= parallel <= 64:
        raise ConfigError(f"sweep.parallel must be from 1 to 64, got {parallel}")
    if not (math.isfinite(gain) and 0 < gain <= 1):
        raise ConfigError(f"sweep.learned_gain must be in (0, 1], got {gain}")
    load_config(file, [*overrides, f"seed={seeds[0]}"])  # the train settings, checked once here
    return SweepSpec(seeds, parallel, Path(values["sweep.out_dir"]), gain, file, overrides)
