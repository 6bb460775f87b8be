"""Issue 41's cost target as it is stated: a 3-round FrozenLake ``selfevolve evolve`` run against the default run
(``selfevolve train``) on the machine's cores, each run alone, in turn (evolve, train, evolve, train, ...), so that
a drift of the machine's speed falls on both; the ratio is taken pair by pair.

    python benchmarks/bench_evolve_cost.py --pairs 2                                        # today's defaults
    python benchmarks/bench_evolve_cost.py --pairs 2 --evolve evolve.imitation_weight=0      # a setting of the loop

Nothing limits the threads (unless ``OMP_NUM_THREADS`` is set outside): both commands use every core, as a user's
run does. Per run: wall seconds, CPU seconds and peak resident memory (the kernel's accounting of the finished
process, ``os.wait4``) and the held-out success it ended with (``evolve``: the kept round's); per ``evolve`` run
also where its time went (``evolve/report.py``'s split). Each run keeps its folder and log under ``--out``.
Final line: ``SUMMARY evolve cost: ...`` with the median of the pairs' ratios and each ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from selfevolve.evolve import report  # noqa: E402

TARGET = 1.5  # issue 41, item 5: at most 1.5x the default run's wall time on 2 cores


def run(command: list[str], folder: Path) -> dict:
    """One run of ``python -m selfevolve COMMAND`` in ``folder`` (overwritten), timed by the kernel's accounting."""
    argv = [sys.executable, "-m", "selfevolve", *command, "train.progress=false", "train.overwrite=true",
            f"train.out_dir={folder}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    with open(f"{folder}.log", "w") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    if proc.returncode != 0:
        raise SystemExit(f"{command[0]} failed (exit {proc.returncode}); its output: {folder}.log")
    # ru_maxrss is in KiB on Linux
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_gb": usage.ru_maxrss * 1024 / 1e9,
            **held_out(command[0], folder)}


def held_out(command: str, folder: Path) -> dict:
    """The held-out success the run ended with and, for ``evolve``, its split by stage."""
    if command == "evolve":
        state = json.loads((folder / "evolve.json").read_text())
        return {"held_out": report.summary(state)["final"],
                "stages": {name: round(s, 1) for name, s in report.seconds_by_stage(state)}}
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    last = [r["eval/success"] for r in rows if "eval/success" in r]
    return {"held_out": last[-1] if last else None}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2, choices=range(1, 101), metavar="N",
                    help="evolve/train pairs, run in turn (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--evolve", nargs="*", default=[], help="config overrides of the evolve run only")
    ap.add_argument("--train", nargs="*", default=[], help="config overrides of the default run only")
    ap.add_argument("--common", nargs="*", default=[], help="config overrides of both (e.g. a smaller model)")
    ap.add_argument("--out", default="runs/bench_evolve_cost", help="folder of the runs and results.json")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()  # the runs start in the repository root
    out.mkdir(parents=True, exist_ok=True)
    commands = {"evolve": ["evolve", "env.name=frozenlake", f"seed={args.seed}", *args.common, *args.evolve],
                "train": ["train", f"seed={args.seed}", *args.common, *args.train]}
    pairs = []
    for k in range(args.pairs):
        pair = {}
        for name, command in commands.items():
            pair[name] = run(command, out / f"{name}-{k}")
            r = pair[name]
            print(f"pair {k}: {name} {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, peak {r['peak_gb']:.2f} GB, "
                  f"held out {r['held_out']}" + (f"; stages {r['stages']}" if "stages" in r else ""), flush=True)
        pair["ratio"] = pair["evolve"]["wall"] / pair["train"]["wall"]
        pairs.append(pair)
        (out / "results.json").write_text(json.dumps({"commands": commands, "pairs": pairs}, indent=1))
    ratios = [p["ratio"] for p in pairs]
    median = statistics.median(ratios)
    print(f"SUMMARY evolve cost: evolve / default run wall = {median:.3f}x (median of {len(ratios)} pairs: "
          f"{', '.join(f'{r:.3f}' for r in ratios)}; target {TARGET}x: {'met' if median <= TARGET else 'not met'}; "
          f"{os.cpu_count()} cores)")
    return {"ratios": ratios, "median": median, "pairs": pairs}


if __name__ == "__main__":
    main()
