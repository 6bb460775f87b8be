"""Summarise a training run folder: the eval curve, the training curve and the wall time.

    python benchmarks/summarize_run.py runs/default

Prints a markdown table (for docs/benchmarks.md) and a final SUMMARY line. The wall time is the sum of the
logged rollout and update times plus the evaluations' share, read from metrics.jsonl and the folder's
timestamps.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--every", type=int, default=1, help="show every N-th training step")
    args = ap.parse_args()
    rows = [json.loads(line) for line in (args.run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    if not rows:
        raise SystemExit(f"{args.run_dir}/metrics.jsonl is empty")
    evals = [r for r in rows if "eval/success" in r]
    steps = [r for r in rows if "reward/mean" in r]
    print("| step | reward/mean | success/rate | valid/rate | eval/success | eval/reward | rollout s | update s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "reward/mean" in r and r["step"] % args.every and "eval/success" not in r:
            continue
        cell = lambda k, f="{:.3f}": f.format(r[k]) if k in r else ""  # noqa: E731
        print(f"| {r['step']} | {cell('reward/mean')} | {cell('success/rate')} | {cell('valid/rate')} | "
              f"{cell('eval/success')} | {cell('eval/reward')} | {cell('time/rollout', '{:.1f}')} | "
              f"{cell('time/update', '{:.1f}')} |")
    files = sorted(args.run_dir.rglob("*"), key=lambda p: p.stat().st_mtime)
    wall = files[-1].stat().st_mtime - (args.run_dir / "config.yaml").stat().st_mtime if files else 0.0
    train_s = sum(r.get("time/rollout", 0) + r.get("time/update", 0) for r in steps)
    first, last = evals[0]["eval/success"], evals[-1]["eval/success"]
    print(
        f"SUMMARY {args.run_dir}: {len(steps)} steps, eval/success {first:.3f} -> {last:.3f} "
        f"({100 * (last - first):+.1f} points), wall {wall / 60:.1f} min (rollout+update {train_s / 60:.1f} min)"
    )


if __name__ == "__main__":
    main()
