"""benchmarks/bench_suites.py: GuessTheNumber's hint-reading diagnostic, on hand-made games and real ones."""

from __future__ import annotations

import sys
from pathlib import Path

from selfevolve.envs import env_class, make_env
from selfevolve.tasks.source import eval_tasks

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_suites as bench  # noqa: E402


def test_hint_reading_counts_the_guesses_inside_the_range_the_hints_leave():
    # 50 "lower" leaves 1..49: 25 is inside; 25 "higher" leaves 26..49: 37 is inside; 37 "lower" leaves 26..36:
    # 40 is not. The first guess of a game is not counted, nor a reply without [number]: 2 of 3.
    game = [("[50]", "The target number is lower."), ("[25]", "The target number is higher."),
            ("no guess", "Invalid move format."), ("[37]", "The target number is lower."), ("[40]", "")]
    assert bench.hint_reading([game], 1, 100) == 2 / 3
    assert bench.hint_reading([[("[7]", "")]], 1, 100) is None  # one guess: nothing to count


def test_binary_search_reads_every_hint_and_the_random_policy_does_not():
    cls = env_class("textarena:GuessTheNumber-v0")
    options = {"split": "test", "config": {"max_number": 100}}
    probe = make_env(cls, **options)
    tasks = eval_tasks(probe, 6)
    env, expert_games = make_env(cls, **options), []
    for task in tasks:
        env.reset(task.seed)
        game = []
        while (action := env.expert_action()) is not None:
            result = env.step(action)
            game.append((action, result.observation))
            if result.done:
                break
        expert_games.append(game)
    assert bench.hint_reading(expert_games, 1, 100) == 1.0
    random_games = bench.random_guess_games(cls, options, tasks, seed=0)
    assert [len(g) for g in random_games] and bench.hint_reading(random_games, 1, 100) < 0.8
