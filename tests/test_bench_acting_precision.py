"""benchmarks/bench_acting_precision.py on the tiny model: both precisions explore and evaluate, and the summary
gives both ratios (their size is the benchmark's business, not a test's)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_acting_precision as bench  # noqa: E402


def test_it_times_exploring_and_an_evaluation_in_both_precisions(capsys):
    ratios = bench.main(["--repeats", "1", "model.name=tiny", "env.size=3", "questioning.explorations=2",
                         "questioning.steps=2", "eval.episodes=2", "env.max_turns=3"])
    assert set(ratios) == {"explore", "evaluate"} and all(r > 0 for r in ratios.values())
    out = capsys.readouterr().out
    assert "repeat 0: fp32 exploring" in out and "repeat 0: bf16 exploring" in out
    assert "SUMMARY acting precision (1 repeats, medians)" in out
