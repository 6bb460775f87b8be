"""What issue 43's memory measures cost the whole default run: with and without them, side by side.

*Without* (``before``): every activation of the training forward kept for the backward (``models/recompute.py``'s
``ENABLED`` off), the heap grown by every block in the update (``models/allocator.py``'s update context left out),
micro-batches bounded by ``algo.micro_batch_tokens`` alone (``algo.micro_batch_gb=null``) and the evaluation's 64
episodes played at once (``eval.batch=64``). *With* (``after``): today's defaults, plus ``--after`` overrides (for
example ``algo.micro_batch_gb=3.5``). Everything else is the same code and the same ``selfevolve train`` run.

The two runs start at once, each a process of its own with ``--threads`` torch threads (default 1: each a core of
the 2-core CPU, so both see the same load). Reported per run: the wall time, the peak resident memory (the child's
``ru_maxrss`` from ``os.wait4``, as ``/usr/bin/time -v`` reports it), the held-out greedy success at the start and
the end, and the phases' seconds from ``metrics.jsonl``; then the wall-time ratio after ÷ before, and whether every
training rollout took the same actions in both runs.

    python benchmarks/bench_memory_run.py --out runs/memcost --seed 0
    python benchmarks/bench_memory_run.py --out runs/memcost35 --seed 0 --after algo.micro_batch_gb=3.5

``--off`` switches off only some of the measures in the before way (``recompute``, ``heap``, ``bound``; the default
is all three, and ``eval.batch=64`` goes with ``bound``), to see which one a phase pays for; with ``--both
train.steps=0 eval.at_start=false eval.episodes=8`` the runs are the warm start alone:

    python benchmarks/bench_memory_run.py --out runs/ws-bound --seed 0 --off bound \
        --both train.steps=0 eval.at_start=false eval.episodes=8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

WAYS = ("before", "after")
MEASURES = ("recompute", "heap", "bound")

# The before way: the same CLI with the update's memory measures named in BENCH_MEMORY_OFF switched off in this
# process (bench_memory.switch_off; the bound is switched off by overrides, in launch).
DRIVER = f"""
import os, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from bench_memory import switch_off
switch_off(*os.environ["BENCH_MEMORY_OFF"].split(","))
from selfevolve.cli import main
sys.argv = ["selfevolve", *sys.argv[1:]]
main()
"""


def launch(way: str, out: Path, seed: int, threads: int, after: list[str], both: list[str],
           off: tuple[str, ...] = MEASURES) -> subprocess.Popen:
    args = ["train", f"seed={seed}", f"train.out_dir={out / way}", "train.overwrite=true", "train.progress=false",
            *both]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    if way == "before":
        bound = ["algo.micro_batch_gb=null", "eval.batch=64"] if "bound" in off else []
        cmd = [sys.executable, "-c", DRIVER, *args, *bound]
        env["BENCH_MEMORY_OFF"] = ",".join(off)
    else:
        cmd = [sys.executable, "-m", "selfevolve.cli", *args, *after]
    log = open(out / f"{way}.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def summary(run: Path) -> dict:
    """Held-out success at the start and the end, and the seconds of each phase, from the run's metrics."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [r["eval/success"] for r in rows if "eval/success" in r]
    phases: dict[str, float] = {}
    for r in rows:
        for k, v in r.items():
            if k.startswith("time/") and isinstance(v, (int, float)):
                phases[k] = phases.get(k, 0.0) + v
    return {"held_out": evals, "phases": phases}


def actions(run: Path) -> list:
    """Every training rollout's action texts, in the order they were logged (none without RL steps)."""
    path = run / "trajectories.jsonl"
    if not path.is_file():
        return []
    return [[s["action_text"] for s in json.loads(line)["steps"]] for line in path.read_text().splitlines() if line]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the two run folders and their logs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--after", nargs="*", default=[], help="overrides for the after way (KEY=VALUE)")
    ap.add_argument("--both", nargs="*", default=[], help="overrides for both runs (e.g. train.steps=1 for a try)")
    ap.add_argument("--off", nargs="+", choices=MEASURES, default=list(MEASURES),
                    help="the measures the before way switches off (default: all)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    procs = {way: launch(way, args.out, args.seed, args.threads, args.after, args.both, tuple(args.off))
             for way in WAYS}
    results: dict[str, dict] = {}
    by_pid = {proc.pid: way for way, proc in procs.items()}
    while by_pid:  # whichever run ends first: each wall is its own end
        pid, status, usage = os.wait4(-1, 0)
        way = by_pid.pop(pid, None)
        if way is None:
            continue
        if os.waitstatus_to_exitcode(status):
            for proc in procs.values():  # the other run would go on without anyone waiting for it
                if proc.poll() is None:
                    proc.kill()
            sys.exit(f"the {way} run failed (exit {os.waitstatus_to_exitcode(status)}); see {args.out / way}.log")
        results[way] = {"wall_s": time.perf_counter() - start, "peak_gb": usage.ru_maxrss / 1e6,
                        **summary(args.out / way)}
        print(f"{way}: {results[way]['wall_s']:.1f} s, peak {results[way]['peak_gb']:.2f} GB, held out "
              f"{results[way]['held_out']}, phases "
              + ", ".join(f"{k[5:]} {v:.1f}" for k, v in sorted(results[way]["phases"].items())), flush=True)
    same = actions(args.out / "before") == actions(args.out / "after")
    (args.out / "summary.json").write_text(json.dumps({"after_overrides": args.after, "off": args.off,
                                                       "seed": args.seed,
                                                       "same_actions": same, **results}, indent=1))
    b, a = results["before"], results["after"]
    what = "memory measures" if set(args.off) == set(MEASURES) else "memory measure(s) " + "+".join(args.off)
    where = "the run" if args.both else "the whole default run"
    print(f"SUMMARY {what} on {where} (seed {args.seed}, side by side, {args.threads} "
          f"thread(s) each{', after: ' + ' '.join(args.after) if args.after else ''}"
          f"{', both: ' + ' '.join(args.both) if args.both else ''}): wall {a['wall_s']:.0f} s "
          f"with against {b['wall_s']:.0f} s without = {a['wall_s'] / b['wall_s']:.3f}x (target <= 1.05x); peak "
          f"{a['peak_gb']:.2f} against {b['peak_gb']:.2f} GB (target <= 4 GB); held out {a['held_out']} against "
          f"{b['held_out']}; same training actions: {same}")


if __name__ == "__main__":
    main()
