"""benchmarks/bench_evolve_time.py: the stages' shares of hand-made runs, one recorded before the cloning was timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_evolve_time as bench  # noqa: E402


def a_run(folder: Path, bc_seconds: float | None) -> Path:
    """One trained round: 25 s exploring, a training stage of 60 s (10 s rollouts, 20 s updates, an evaluation of
    5 s logged only in metrics.jsonl, and ``bc_seconds`` of cloning when the run timed it), 5 s of validation."""
    train = folder / "round-0" / "train"
    train.mkdir(parents=True)
    rows = [{"step": 0}, {"step": 1, "time/rollout": 4.0, "time/update": 8.0},
            {"step": 2, "time/rollout": 6.0, "time/update": 12.0, "time/eval": 5.0}]
    (train / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rec = {"round": 0, "stages": ["explored", "written", "trained"], "explore": {"seconds": 25.0},
           "train": {"seconds": 60.0, "time/rollout": 10.0, "time/update": 20.0}, "validation": {"seconds": 5.0}}
    if bc_seconds is not None:
        rec["bc"] = {"bc/seconds": bc_seconds}
    (folder / "evolve.json").write_text(json.dumps({"rounds": [rec]}))
    return folder


def test_shares_by_hand(tmp_path):
    whole, split = bench.shares(a_run(tmp_path / "old", None))
    assert whole == 90  # 25 + 60 + 5
    assert split["held-out evaluation after each round"] == pytest.approx(5 / 90)  # read back from metrics.jsonl
    assert split["the rest of training (loading, checkpoints)"] == pytest.approx(25 / 90)  # 60 - 10 - 20 - 5
    assert split["behaviour cloning"] == 0
    _, split = bench.shares(a_run(tmp_path / "new", 20.0))
    assert split["behaviour cloning"] == pytest.approx(20 / 90) and \
        split["the rest of training (loading, checkpoints)"] == pytest.approx(5 / 90)


def test_the_command_prints_the_mean_share(tmp_path):
    runs = [a_run(tmp_path / "a", None), a_run(tmp_path / "b", 20.0)]
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_evolve_time.py"), "--runs", *map(str, runs)],
                         capture_output=True, text=True, check=True).stdout
    # the rest: 25/90 and 5/90, mean 16.7 %; exploring 25/90 = 27.8 % on both, the largest (RL updates 22.2 %)
    assert "16.7 %  (5.6-27.8 %)" in out
    assert out.strip().splitlines()[-1] == \
        "SUMMARY evolve time (2 runs): the largest stage is exploring, 27.8 % of a run on average"
