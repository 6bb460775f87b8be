"""benchmarks/bench_board_reading.py: the hole-beside counts and the best fixed route, on real held-out maps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from selfevolve import load_config
from selfevolve.config import save_config
from selfevolve.envs import env_class, make_env

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_board_reading as bench  # noqa: E402

# two maps of the test split (seeds 1000003 and 1000006), as the environment draws them today
MAPS = {1000003: ["SFFF", "HFFF", "FFFF", "HFFG"], 1000006: ["SFHH", "FFFF", "HFFF", "HFFG"]}


def episode(env, seed: int, moves: list[str], step: int = 20) -> dict:
    """An evaluation episode as eval_trajectories.jsonl records it, played in the real environment."""
    env.reset(seed)
    steps = []
    for move in moves:
        result = env.step(move)
        steps.append({"action_text": move, "observation": result.observation})
        if result.done:
            break
    return {"step": step, "task": {"seed": seed}, "steps": steps, "success": bool(env.success)}


def run_folder(tmp_path: Path, episodes: list[dict]) -> Path:
    save_config(load_config(overrides=["env.name=frozenlake"]), tmp_path / "config.yaml")
    (tmp_path / "eval_trajectories.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    return tmp_path


def test_counts_the_steps_beside_a_hole_and_the_best_fixed_route(tmp_path):
    env = make_env(env_class("frozenlake"), split="test")
    for seed, desc in MAPS.items():
        env.reset(seed)
        assert env.desc == desc
    start_only = episode(env, 1000003, ["Right"], step=0)  # an earlier evaluation: not counted
    # 1000003: Down from the start walks into the hole below it: 1 step beside a hole, into it.
    # 1000006: R (start: no hole beside), D (at (0,1) Right is a hole: beside, avoided), D (at (1,1): none),
    # R (at (2,1) Left is a hole: beside, avoided), R, D onto G: 2 steps beside a hole, none into it.
    fall, walk = episode(env, 1000003, ["Down"]), episode(env, 1000006, ["Right", "Down", "Down", "Right",
                                                                          "Right", "Down"])
    assert (fall["success"], walk["success"]) == (False, True)
    m = bench.measure(run_folder(tmp_path, [start_only, fall, walk]))
    assert (m["episodes"], m["success"], m["beside"], m["into"], m["sequences"]) == (2, 1, 3, 1, 2)
    assert m["uniform"] == pytest.approx(0.25)  # one hole among the four moves at each of the three steps
    # every route opening with Down falls on 1000003 ((1,0) is a hole); in sorted order the first opening with
    # Right, R D D D R R, solves both maps
    assert bench.best_fixed_route(m["env"], m["seeds"]) == ("R D D D R R", 2)


def test_refuses_an_episode_that_does_not_replay(tmp_path):
    env = make_env(env_class("frozenlake"), split="test")
    walk = episode(env, 1000006, ["Right", "Down"])
    walk["steps"][1]["observation"] = "another board"
    with pytest.raises(SystemExit, match="does not replay"):
        bench.measure(run_folder(tmp_path, [walk]))
