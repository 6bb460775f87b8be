"""``selfevolve bench`` (issue 42, item 2): suites and lists, the table, the random valid policy, a run folder
and a served model as the agent, and bad input as one-line errors. Tiny model, small settings."""

from __future__ import annotations

import json
import random

import pytest

from conftest import assert_user_error, invoke
from served_run import NAME, make_run, serve_run
from selfevolve.bench import reply_budget, run_bench
from selfevolve.bench.players import chat_builder, chat_chooser, play_text, random_chooser
from selfevolve.bench.report import markdown_table
from selfevolve.bench.suites import SUITES, Game, games_of
from selfevolve.config import load_config
from selfevolve.config_sections import LlmApiConfig
from selfevolve.envs import env_class, make_env
from selfevolve.errors import ConfigError
from selfevolve.models.openai_backend import OpenAIBackend
from selfevolve.rollout.runner import rollout
from selfevolve.tasks.source import eval_tasks
from selfevolve.build import build_prompt

TINY = ["model.name=tiny", "model.dtype=fp32", "eval.episodes=2", "train.progress=false", "agent.max_new_tokens=8"]


def test_suite_names_lists_and_files(tmp_path):
    assert games_of("rg") == SUITES["rg"]
    assert games_of("twx:coin, frozenlake,rg") == [Game("twx:coin"), Game("frozenlake"), *SUITES["rg"]]
    good = tmp_path / "mine.yaml"
    good.write_text("- rg:maze\n- name: textarena:TowerOfHanoi-v0\n  options: {split: all}\n  eval: {split: all}\n")
    assert games_of(str(good)) == [Game("rg:maze"), Game("textarena:TowerOfHanoi-v0", {"split": "all"}, {"split": "all"})]
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: rg:maze\n  optons: {}\n")
    with pytest.raises(ConfigError, match=r"entry 1 must be a name or a mapping with name, options"):
        games_of(str(bad))
    with pytest.raises(ConfigError, match="suite file not found"):
        games_of(str(tmp_path / "none.yaml"))


def test_the_table_shows_every_player_and_why_a_game_did_not_run():
    report = {"agent": "runs/x", "untrained": "smollm2-135m", "episodes": 4, "pass_k": 2, "seed_offset": 1000000,
              "columns": ["agent", "untrained", "random"], "rows": [
                  {"game": "rg:maze", "held_out": True, "agent": {"success": 0.5, "pass@k": 0.75},
                   "untrained": {"success": 0.25}, "random": {"success": None, "note": "no valid-action list"}},
                  {"game": "twx:coin", "error": "env 'twx:coin' needs Java"}]}
    assert markdown_table(report) == "\n".join([
        "runs/x on 4 held-out tasks per game (eval seeds from 1000000):", "",
        "| game | held out | agent greedy | agent pass@2 | untrained (smollm2-135m) greedy | random valid |",
        "|---|---|---|---|---|---|",
        "| rg:maze | yes | 50% | 75% | 25% | — (no valid-action list) |",
        "| twx:coin | — | not run: env 'twx:coin' needs Java | | | |"])


def test_the_random_valid_policy_draws_from_the_valid_actions():
    """On rg:maze (one answer) the random policy wins exactly when its seeded draw from the distances the
    config allows (5..10) is the task's answer."""
    cls = env_class("rg:maze")
    tasks = eval_tasks(make_env(cls, split="test"), 12)
    choose, listed = random_chooser(seed=3)
    won = play_text(cls, {"split": "test"}, tasks, choose)
    env = make_env(cls, split="test")
    expected = []
    for t in tasks:
        env.reset(t.seed)
        expected.append(random.Random(f"3/{t.id}/0").choice([str(d) for d in range(5, 11)]) == env.expert_action())
    assert won == expected and all(listed) and any(expected)


def test_play_text_counts_each_episodes_turns():
    """rg:maze with 2 retries: the random policy's k-th try (seeded by task and turn) is a uniform distance in
    5..10; an episode ends at its first right answer (turn k + 1) or after its third wrong one (3 turns)."""
    cls = env_class("rg:maze")
    tasks = eval_tasks(make_env(cls, split="test"), 12)
    turns: list[int] = []
    won = play_text(cls, {"split": "test", "retries": 2}, tasks, random_chooser(seed=3)[0], turns)
    env = make_env(cls, split="test")
    expected_won, expected_turns = [], []
    for t in tasks:
        env.reset(t.seed)
        answer = env.expert_action()
        tries = [random.Random(f"3/{t.id}/{k}").choice([str(d) for d in range(5, 11)]) for k in range(3)]
        expected_won.append(answer in tries)
        expected_turns.append(tries.index(answer) + 1 if answer in tries else 3)
    assert won == expected_won and turns == expected_turns
    assert any(n < 3 for n in turns) and 3 in turns  # wins before the last try, and episodes played to the end


def test_bench_of_the_untrained_model_writes_one_table(tmp_path):
    cfg = load_config(overrides=[*TINY, "eval.pass_k=2"])
    suite = tmp_path / "small.yaml"  # episodes of 2 turns: the tiny model is slow on TextWorldExpress's rooms
    suite.write_text("- textarena:TowerOfHanoi-v0\n- name: rg:maze\n  options: {config: {max_grid_size: 6}}\n"
                     "- name: twx:coin\n  options: {max_turns: 2, config: {numLocations: 3, includeDoors: 0}}\n"
                     "- textarena:TicTacToe-v0\n")
    report = run_bench(str(suite), cfg, None, tmp_path)
    # TowerOfHanoi is listed without split=all: evaluation asks for its test split, which a game with one
    # instance does not have; the row says why
    rows = {r["game"]: r for r in report["rows"]}
    assert report["columns"] == ["untrained", "random"] and report["untrained"] == "tiny"
    assert "every seed starts the same game" in rows["textarena:TowerOfHanoi-v0"]["error"]
    assert "is not a single-player game" in rows["textarena:TicTacToe-v0"]["error"]
    for game in ("rg:maze", "twx:coin"):
        assert rows[game]["held_out"] is True
        assert 0.0 <= rows[game]["untrained"]["success"] <= rows[game]["untrained"]["pass@k"] <= 1.0
        assert 0.0 <= rows[game]["random"]["success"] <= 1.0
    assert json.loads((tmp_path / "bench.json").read_text())["rows"] == report["rows"]
    assert (tmp_path / "bench.md").read_text() == report["markdown"] + "\n"
    assert "| rg:maze | yes |" in report["markdown"]


def test_a_served_model_gets_the_messages_a_local_one_is_prompted_with(tmp_path):
    """The chat player sends the messages the prompt builder renders for a local policy: the served run's
    greedy first moves equal the same run's local greedy first moves."""
    server, reference = serve_run(tmp_path / "run")
    try:
        cfg = load_config(overrides=[*TINY, f"llm_api.base_url={server.url}/v1"])
        cls = env_class("textarena:FrozenLake-v0")
        env = make_env(cls, split="test")
        tasks = eval_tasks(env, 3)
        budget = reply_budget(reference.tokenizer, env, cfg.agent.max_new_tokens)
        assert budget == cfg.agent.max_new_tokens  # "[down]" is shorter than 8 tokens
        local = rollout(reference, [make_env(cls, split="test", max_turns=1) for _ in tasks], tasks,
                        build_prompt(cfg, reference, env), max_turns=1, greedy=True)
        backend = OpenAIBackend(f"openai:{NAME}", LlmApiConfig(base_url=f"{server.url}/v1", retries=0))
        first: list[str] = []

        def once(envs, observations, actions, tasks_):
            chosen = chat_chooser(backend, chat_builder(cfg, env), budget, 0.0)(envs, observations, actions, tasks_)
            first.extend(chosen)
            return chosen

        play_text(cls, {"split": "test", "max_turns": 1}, tasks, once)
        assert first == [t.steps[0].action_text.strip() for t in local]
        report = run_bench("textarena:FrozenLake-v0", cfg, f"openai:{NAME}", None)
        assert report["columns"] == ["agent", "untrained", "random"] and report["agent"] == f"openai:{NAME}"
        assert 0.0 <= report["rows"][0]["agent"]["success"] <= 1.0
    finally:
        server.stop()


def test_a_run_folder_is_benchmarked_against_its_own_base_model(tmp_path):
    root, _ = make_run(tmp_path / "run")
    report = run_bench("rg:maze", load_config(overrides=TINY), str(root), tmp_path / "out")
    row = report["rows"][0]
    assert report["agent"] == str(root) and report["untrained"] == "tiny"
    assert {"agent", "untrained", "random"} <= set(row) and "error" not in row


@pytest.mark.parametrize("args, needles", [
    (["bench", "nosuch:game"], ["unknown env suite 'nosuch'"]),
    (["bench", "rg:maze", "--agent", "/no/such/run"], ["--agent '/no/such/run'", "openai:MODEL"]),
    (["bench", "rg:maze", "--agent", "openai:m"], ["llm_api.base_url"]),
    (["bench", "x.yaml"], ["suite file not found: x.yaml"]),
])
def test_bench_bad_input_is_one_line(args, needles, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err, output = invoke(*args, "model.name=tiny")
    assert_user_error(code, err, output, *needles)


def test_bench_cli_prints_the_table(tmp_path):
    code, err, output = invoke("bench", "rg:maze", *TINY, "--out", str(tmp_path))
    assert code == 0, err
    assert "| rg:maze | yes |" in output and (tmp_path / "bench.json").is_file()
