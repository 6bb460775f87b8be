"""benchmarks/bench_detours.py: a round's detoured references counted by hand, and the rank correlation."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from selfevolve import load_config
from selfevolve.config import save_config
from selfevolve.envs import FrozenLakeEnv
from selfevolve.questioning.explore import ExplorationRecord, save_explorations
from selfevolve.questioning.games import GameExploration

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_detours as bench  # noqa: E402

# training seed 0's map is SFFF / HFFF / FFHH / FFFG; this walk turns back Left onto (1, 1) after Right, Right, Down
DETOUR = ["Right", "Right", "Down", "Left", "Down", "Down", "Right", "Right"]


def a_run(folder: Path, moves=DETOUR) -> Path:
    """An evolve run folder as far as the benchmark reads it: round 0's config and one exploration."""
    env = GameExploration(FrozenLakeEnv(split="train"), breadth_steps=4, max_turns=8)
    env.reset(0)
    for m in moves:
        if env.step(m).done:
            break
    (folder / "round-0" / "train").mkdir(parents=True)
    save_config(load_config(overrides=["env.name=frozenlake"]), folder / "round-0" / "train" / "config.yaml")
    save_explorations(folder / "round-0", [ExplorationRecord(seed=0, turns=env.log)])
    return folder


def test_a_rounds_detours_by_hand(tmp_path):
    # references 1, 2, 3, 4, 5, 6, 7, 8 moves; the five after the turn back are two moves too long each (the
    # shortest: Right, Down to (1, 1), then on down). The longest third: ceil(8/3) = 3 references (6, 7, 8 moves).
    run = a_run(tmp_path / "run")
    cfg = load_config(run / "round-0" / "train" / "config.yaml")
    counts = bench.round_counts(cfg, FrozenLakeEnv, run / "round-0" / "explorations.jsonl")
    assert counts == {"references": 8, "detoured": 5, "extra_moves": 10, "longest": 3, "longest_detoured": 3,
                      "longest_extra": 6}


def test_spearman_by_hand():
    assert bench.ranks([3.0, 1.0, 1.0, 2.0]) == [4.0, 1.5, 1.5, 3.0]
    assert bench.spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    # ranks 1, 2, 3 against 2, 1, 3: 1 - 6 * (1 + 1 + 0) / (3 * 8) = 0.5
    assert bench.spearman([1, 2, 3], [5, 4, 6]) == pytest.approx(0.5)
    assert math.isnan(bench.spearman([1, 2, 3], [0, 0, 0]))  # every run kept the same: no correlation to give


def test_the_command_prints_a_table_and_a_summary(tmp_path):
    run = a_run(tmp_path / "run")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_detours.py"), "--runs", str(run)],
                         capture_output=True, text=True, check=True).stdout
    assert "| run | 0 | 8 | 5 | 10 | 3 | 3 | 6 |" in out
    assert out.strip().splitlines()[-1] == "SUMMARY: 1 run; round 0's longest third holds 3-3 detoured references"
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_detours.py"), "--runs", str(run),
                          "--held-out", "1", "2"], capture_output=True, text=True)
    assert bad.returncode != 0 and "2 figures for 1 runs" in bad.stderr
