"""benchmarks/bench_evolve_cost.py on the tiny model: one evolve/train pair run as the user's commands, each timed,
its held-out success and (evolve) its split recorded, the ratio taken from the two walls."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_evolve_cost as bench  # noqa: E402

COMMON = ["model.name=tiny", "env.size=3", "env.max_turns=3", "eval.episodes=2", "algo.group_size=2",
          "train.tasks_per_step=1"]
EVOLVE = ["evolve.rounds=2", "train.steps=2", "questioning.explorations=3", "questioning.steps=3",
          "evolve.bc_steps=2", "evolve.bc_tasks=2", "evolve.validation_explorations=4", "evolve.validation_min_moves=2"]
TRAIN = ["train.steps=1", "train.warm_start_steps=1", "train.warm_start_tasks=2"]


def test_one_pair_of_the_two_commands_gives_their_ratio(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    got = bench.main(["--pairs", "1", "--out", str(tmp_path), "--common", *COMMON, "--evolve", *EVOLVE,
                      "--train", *TRAIN])
    saved = json.loads((tmp_path / "results.json").read_text())
    (pair,) = saved["pairs"]
    assert pair["ratio"] == pytest.approx(pair["evolve"]["wall"] / pair["train"]["wall"])
    assert got["median"] == pytest.approx(pair["ratio"])
    assert (tmp_path / "evolve-0" / "evolve.json").is_file() and (tmp_path / "train-0" / "metrics.jsonl").is_file()
    assert "behaviour cloning" in pair["evolve"]["stages"] and "stages" not in pair["train"]
    for run in (pair["evolve"], pair["train"]):
        assert 0 <= run["held_out"] <= 1 and run["cpu"] > 0 and run["peak_gb"] > 0.1
    out = capsys.readouterr().out
    assert "pair 0: evolve" in out and "pair 0: train" in out and "SUMMARY evolve cost:" in out


def test_a_failing_run_names_its_log(tmp_path):
    with pytest.raises(SystemExit, match="evolve failed .*evolve-0.log"):
        bench.main(["--pairs", "1", "--out", str(tmp_path), "--common", *COMMON, "--evolve", "evolve.nonsense=1"])
    assert "nonsense" in (tmp_path / "evolve-0.log").read_text()
