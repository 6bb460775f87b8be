"""``selfevolve bench SUITE_OR_LIST``: one table comparing an agent with the untrained model and the random valid
policy on a list of environments (``docs/environments.md``, "Benchmarking an agent").

The agent is a run folder (its latest checkpoint), an exported model folder (``selfevolve export``), or a served
model (``openai:MODEL`` with ``llm_api.base_url``: any OpenAI-compatible server, so other systems compare on the
same tasks). Per game it reports the agent's greedy success and pass@k, the untrained model's greedy success (the
run's base model with its adapter switched off; else ``model.name``) and the random valid policy's success (a
uniform draw from ``valid_actions()``, where the world can list them). Every player meets the same held-out tasks:
the evaluation seeds of ``eval.seed_offset`` on the environment's test split (``eval_env_options``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from selfevolve.bench.players import chat_builder, chat_chooser, play_text, random_chooser
from selfevolve.bench.report import markdown_table
from selfevolve.bench.suites import Game, games_of
from selfevolve.config import Config
from selfevolve.envs import env_class, make_env
from selfevolve.envs.suites import Unavailable
from selfevolve.errors import ConfigError, SelfEvolveError
from selfevolve.tasks.source import eval_tasks
from selfevolve.train.evaluate import eval_env_options, evaluate


@dataclass
class Agent:
    """What plays the "agent" column: a local policy (with its config) or a served model."""

    label: str
    cfg: Config
    policy: object = None  # a models.policy.Policy, or None for a served model
    backend: object = None  # models.openai_backend.OpenAIBackend for openai:MODEL
    has_base: bool = False  # the policy is a run's adapter on its base model: "untrained" switches it off


def load_agent(spec: str | None, cfg: Config) -> Agent | None:
    """The agent of ``--agent``: None (only the baselines), ``openai:MODEL``, a run folder or a model folder."""
    if spec is None:
        return None
    from selfevolve.models.openai_backend import is_openai

    if is_openai(spec):
        from selfevolve.models.openai_backend import OpenAIBackend

        return Agent(spec, cfg, backend=OpenAIBackend(spec, cfg.llm_api))
    path = Path(spec)
    if not path.is_dir():
        raise ConfigError(f"--agent {spec!r}: not a run folder, a model folder or openai:MODEL")
    from selfevolve.build import build_policy

    if (path / "config.json").is_file():  # a Hugging Face folder (selfevolve export)
        model_cfg = cfg.model_copy(deep=True)
        model_cfg.model.name = str(path)
        return Agent(str(path), model_cfg, policy=build_policy(model_cfg))
    from selfevolve.train.run import load_run

    run_cfg, policy, _ = load_run(path)
    return Agent(str(path), run_cfg, policy=policy, has_base=True)


def _score(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 4)


class Bench:
    """Plays each game with each player; one row per game."""

    def __init__(self, cfg: Config, agent: Agent | None, console: Console):
        self.cfg, self.agent, self.console = cfg, agent, console
        self.base = None  # the untrained policy, loaded on first use

    # ---- players ------------------------------------------------------------------------------------------------
    def untrained(self):
        """(policy, its config, a context that switches a run's adapter off)."""
        import contextlib

        if self.agent is not None and self.agent.has_base:
            return self.agent.policy, self.agent.cfg, self.agent.policy.reference
        if self.base is None:
            from selfevolve.build import build_policy

            self.base = build_policy(self.cfg)
        return self.base, self.cfg, contextlib.nullcontext

    def _local(self, policy, cfg: Config, env_cls, options: dict, pass_k: int) -> dict:
        from selfevolve.build import build_prompt

        probe = make_env(env_cls, **options)
        builder = build_prompt(cfg, policy, probe)
        budget = policy.max_new_tokens
        policy.max_new_tokens = reply_budget(policy.tokenizer, probe, cfg.agent.max_new_tokens)
        try:
            e = self.cfg.eval
            res = evaluate(policy, env_cls, options, builder, episodes=e.episodes, pass_k=pass_k,
                           seed_offset=e.seed_offset, sample_seed=self.cfg.seed, batch=e.batch)
        finally:
            policy.max_new_tokens = budget
            probe.close()
        return {"success": res["eval/success"], "pass@k": res.get(f"eval/pass@{pass_k}")}

    def _served(self, env_cls, options: dict, tasks, pass_k: int) -> dict:
        probe = make_env(env_cls, **options)
        builder = chat_builder(self.agent.cfg, probe)
        budget = reply_budget(None, probe, self.agent.cfg.agent.max_new_tokens)
        probe.close()
        greedy = play_text(env_cls, options, tasks, chat_chooser(self.agent.backend, builder, budget, 0.0))
        out = {"success": sum(greedy) / len(greedy), "pass@k": None}
        if pass_k > 0:
            rep = [t for t in tasks for _ in range(pass_k)]
            sampled = play_text(env_cls, options, rep, chat_chooser(self.agent.backend, builder, budget,
                                                                    self.agent.cfg.agent.temperature))
            solved = {t.id for t, ok in zip(rep, sampled) if ok}
            out["pass@k"] = sum(t.id in solved for t in tasks) / len(tasks)
        return out

    def _random(self, env_cls, options: dict, tasks) -> dict:
        choose, listed = random_chooser(self.cfg.seed)
        turns: list[int] = []
        won = play_text(env_cls, options, tasks, choose, turns)
        if not all(listed):  # the world cannot list its valid actions: no random valid policy
            return {"success": None, "note": "no valid-action list"}
        return {"success": sum(won) / len(won), "win_turns": [t for t, w in zip(turns, won) if w]}

    # ---- one game -------------------------------------------------------------------------------------------------
    def columns(self) -> list[str]:
        return (["agent", "untrained", "random"] if self.agent is not None else ["untrained", "random"])

    def row(self, game: Game, resolved: tuple | str, progress: Progress, bar) -> dict:
        row: dict = {"game": game.name, "options": game.options}
        if isinstance(resolved, str):  # a game this machine cannot run: the reason
            row["error"] = resolved
            progress.advance(bar, len(self.columns()))
            return row
        env_cls, options = resolved
        row["held_out"] = options.get("split") != "all"
        e = self.cfg.eval
        tasks = None
        for column in self.columns():
            progress.update(bar, description=f"{game.name} · {column}")
            try:  # the held-out tasks first: the split's first eval.episodes distinct contents (tasks/source.py)
                tasks = tasks or held_out_tasks(env_cls, options, e.episodes, e.seed_offset)
                row[column] = self._play(column, env_cls, options, tasks)
            except SelfEvolveError as err:  # TextWorldExpress refusing env.config at the first reset, a broken game
                row["error"] = str(err)
                progress.advance(bar, len(self.columns()) - self.columns().index(column))
                return row
            progress.advance(bar)
        return row

    def _play(self, column: str, env_cls, options: dict, tasks) -> dict:
        pass_k = self.cfg.eval.pass_k
        if column == "random":
            return self._random(env_cls, options, tasks)
        if column == "agent" and self.agent.backend is not None:
            return self._served(env_cls, options, tasks, pass_k)
        if column == "agent":
            return self._local(self.agent.policy, self.agent.cfg, env_cls, options, pass_k)
        policy, cfg, mode = self.untrained()
        with mode():
            return self._local(policy, cfg, env_cls, options, 0 if self.agent is not None else pass_k)


def resolve(game: Game) -> tuple | str:
    """``(environment class, evaluation options)`` of a game, or the reason it cannot run on this machine. An
    unknown name or a bad option is the user's to fix: a ConfigError, before anything is played."""
    try:
        env_cls = env_class(game.name)
    except Unavailable as e:
        return str(e)
    options = eval_env_options(env_cls, game.options, game.eval)
    make_env(env_cls, **options).close()  # bad options fail here
    return env_cls, options


def reply_budget(tokenizer, env, configured: int) -> int:
    """Tokens one reply may take: the configured budget, raised to fit the longest few-shot answer (a
    reasoning-gym answer can be a whole grid) plus 2. Without a tokenizer (a served model), 1 token per 2
    characters is assumed."""
    answers = [action for _, action in (env.examples or [])]
    if not answers:
        return configured
    longest = max(len(tokenizer.encode(a, add_special_tokens=False)) if tokenizer is not None else len(a) // 2 + 1
                  for a in answers)
    return max(configured, longest + 2)


def run_bench(spec: str, cfg: Config, agent_spec: str | None = None, out_dir: str | Path | None = None,
              console: Console | None = None) -> dict:
    """Benchmark ``agent_spec`` on the games of ``spec``; write ``bench.md`` and ``bench.json`` to ``out_dir``
    (when given) and return the JSON report."""
    console = console or Console(stderr=True)
    games = games_of(spec)
    resolved = [resolve(game) for game in games]
    agent = load_agent(agent_spec, cfg)
    bench = Bench(cfg, agent, console)
    rows = []
    progress = Progress(TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.description}"), console=console, disable=not cfg.train.progress)
    with progress:
        bar = progress.add_task("", total=len(games) * len(bench.columns()))
        for game, res in zip(games, resolved):
            rows.append(bench.row(game, res, progress, bar))
    report = {"agent": agent.label if agent is not None else None,
              "untrained": (agent.cfg.model.name if agent is not None and agent.has_base else cfg.model.name),
              "episodes": cfg.eval.episodes, "pass_k": cfg.eval.pass_k, "seed_offset": cfg.eval.seed_offset,
              "columns": bench.columns(), "rows": [_rounded(r) for r in rows]}
    report["markdown"] = markdown_table(report)
    if out_dir is not None:
        out = Path(out_dir)
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / "bench.md").write_text(report["markdown"] + "\n", encoding="utf-8")
            (out / "bench.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        except OSError as e:
            raise SelfEvolveError(f"cannot write the bench report to {out} ({e.strerror or e})") from None
    return report


def _rounded(row: dict) -> dict:
    out = dict(row)
    for column in ("agent", "untrained", "random"):
        if isinstance(out.get(column), dict):
            # scores rounded; a note (text) and the random policy's turns of its wins (a list) kept as they are
            out[column] = {k: (_score(v) if v is None or isinstance(v, (int, float)) else v)
                           for k, v in out[column].items()}
    return out


def held_out_tasks(env_cls, options: dict, n: int, seed_offset: int):
    """The evaluation's tasks of a game (``tasks.source.eval_tasks`` over a probe that is closed after)."""
    probe = make_env(env_cls, **options)
    try:
        return eval_tasks(probe, n, seed_offset)
    finally:
        probe.close()
