"""Where the time of finished ``selfevolve evolve`` runs went: each stage's share of a run, then the mean and range
over the runs given (issue 41 item 5, the loop's cost against the default run).

The split is ``selfevolve.evolve.report.seconds_by_stage`` (the table of each run's ``evolve.md``). A round's
held-out evaluation seconds are read again from its ``metrics.jsonl`` (``time/eval``), so runs recorded before the
report summed them still split it; in runs made before commit ``b06986b`` the cloning is not timed on its own and
counts under "the rest of training". No model is loaded.

    python benchmarks/bench_evolve_time.py --runs runs/evolve-s0 runs/evolve-s1 runs/evolve-s2

Prints one line per stage and a final SUMMARY line.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from selfevolve.evolve.report import seconds_by_stage, train_figures


def shares(run: Path) -> tuple[float, dict[str, float]]:
    """``(seconds in all, {stage: share of them})`` for one run folder."""
    state = json.loads((run / "evolve.json").read_text())
    for rec in state["rounds"]:
        if "trained" in rec.get("stages", []) and "time/eval" not in rec.get("train", {}):
            figures = train_figures(run / f"round-{rec['round']}" / "train")
            rec.setdefault("train", {})["time/eval"] = figures["time/eval"]
    stages = seconds_by_stage(state)
    whole = sum(t for _, t in stages)
    if whole <= 0:
        raise SystemExit(f"{run}: no round of this run is trained yet")
    return whole, {name: t / whole for name, t in stages}


def main(argv=None) -> dict[str, list[float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", type=Path, required=True, help="evolve run folders (each with evolve.json)")
    args = ap.parse_args(argv)
    by_stage: dict[str, list[float]] = {}
    for run in args.runs:
        whole, split = shares(run)
        print(f"{run}: {whole:.0f} s recorded")
        for name, share in split.items():
            by_stage.setdefault(name, []).append(share)
    for name, vals in by_stage.items():
        print(f"  {name:55s} {100 * statistics.mean(vals):5.1f} %  ({100 * min(vals):.1f}-{100 * max(vals):.1f} %)")
    top = max(by_stage, key=lambda n: statistics.mean(by_stage[n]))
    print(f"SUMMARY evolve time ({len(args.runs)} runs): the largest stage is {top}, "
          f"{100 * statistics.mean(by_stage[top]):.1f} % of a run on average")
    return by_stage


if __name__ == "__main__":
    main()
