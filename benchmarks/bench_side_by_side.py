"""Two code trees side by side on the same short runs: is a change behaviour-preserving, and is it slower?

The runs are the recorded ones of ``tests/test_recorded_runs.py`` (20 two-step runs on the tiny model through
every estimator, update, reward stage, search strategy and experience mode). Each repeat starts both trees at
once, each in its own process with one torch thread, so that both see the same load; the order of the two
processes alternates between repeats. On the tiny model the Python around the model dominates, so this is where
a restructuring's overhead would show.

Per tree: the wall and CPU seconds of all runs; per run: whether its logged files and metrics are the same in
both trees (digests and every number, wall-clock fields left out). Issue 40's restructuring was measured with

    python benchmarks/bench_side_by_side.py --before /tmp/before --after . --repeats 3

where ``/tmp/before`` is a checkout of the code before it (``git worktree add /tmp/before be3cfd4``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"

DRIVER = """
import json, resource, sys, tempfile, time
from pathlib import Path
import torch
torch.set_num_threads(1)
import test_recorded_runs as R
out = {}
with tempfile.TemporaryDirectory() as tmp:
    for name in R.RUNS:
        t0, c0 = time.perf_counter(), time.process_time()
        seen = R.observe(name, Path(tmp) / name)
        out[name] = {**seen, "wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
Path(sys.argv[1]).write_text(json.dumps(out))
"""


def start(tree: Path, out: Path) -> subprocess.Popen:
    # each tree's own recorded runs when it has them (their imports follow its layout), else this tree's
    tests = tree / "tests" if (tree / "tests" / "test_recorded_runs.py").is_file() else TESTS
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{tests}", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(out)], cwd=tree, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def same(a: dict, b: dict) -> bool:
    return a["digests"] == b["digests"] and a["metrics"] == b["metrics"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="the code tree before the change")
    ap.add_argument("--after", type=Path, default=Path("."), help="the code tree after the change")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    totals = {k: {"wall": [], "cpu": []} for k in trees}
    differ: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            t0 = time.perf_counter()
            procs = {k: start(trees[k], Path(tmp) / f"{k}-{r}.json") for k in order}
            for k, p in procs.items():
                if p.wait() != 0:
                    sys.exit(f"the {k} tree's runs failed (exit {p.returncode})")
            seen = {k: json.loads((Path(tmp) / f"{k}-{r}.json").read_text()) for k in trees}
            for k in trees:
                totals[k]["wall"].append(sum(v["wall"] for v in seen[k].values()))
                totals[k]["cpu"].append(sum(v["cpu"] for v in seen[k].values()))
            differ |= {n for n in seen["before"] if not same(seen["before"][n], seen["after"][n])}
            print(f"repeat {r + 1}: " + ", ".join(f"{k} {totals[k]['wall'][-1]:.1f} s wall, {totals[k]['cpu'][-1]:.1f} s "
                                                 f"CPU" for k in trees) + f" ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
    n = len(seen["before"])
    best = {k: (min(v["wall"]), min(v["cpu"])) for k, v in totals.items()}
    print(f"runs whose files or metrics differ: {sorted(differ) or 'none'} (of {n})")
    print(f"SUMMARY: {n - len(differ)}/{n} runs identical; after/before, best of {args.repeats}: wall "
          f"{best['after'][0] / best['before'][0]:.3f}x ({best['before'][0]:.1f} -> {best['after'][0]:.1f} s), CPU "
          f"{best['after'][1] / best['before'][1]:.3f}x ({best['before'][1]:.1f} -> {best['after'][1]:.1f} s)")


if __name__ == "__main__":
    main()
