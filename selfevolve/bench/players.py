"""Who plays in ``selfevolve bench`` besides the project's own policies: the random valid policy, and a model
served by an OpenAI-compatible server (``openai:MODEL``), played through the chat API.

Both play the environments by text (observation in, action text out), with the same held-out tasks, the same
episodes and the same turn limit as the local policies, which ``train/evaluate.py`` plays by token ids. A served
model sees the chat messages the prompt builder would render for a local one (system rules, few-shot turns,
history), so the comparison differs in the model only.
"""

from __future__ import annotations

import random
from typing import Callable

from selfevolve.agent.parsing import parse_action
from selfevolve.agent.prompt import PromptBuilder
from selfevolve.envs import make_env
from selfevolve.envs.pool import close_all
from selfevolve.types import Task

Chooser = Callable[[list, list[list[str]], list[list[str]], list[Task]], list[str]]


def play_text(env_cls, options: dict, tasks: list[Task], choose: Chooser,
              turns: list[int] | None = None, games: list | None = None) -> list[bool]:
    """Play ``tasks`` side by side; each turn ``choose(envs, observations, actions, tasks)`` gives the actions of
    the episodes still running (their past observations and actions, one list per episode). Returns whether
    each episode succeeded; ``turns``, when given, is extended with the turns each episode played, ``games``
    with each episode's (action, the observation that answered it) pairs."""
    envs = [make_env(env_cls, **options) for _ in tasks]
    try:
        observations = [[env.reset(t.seed)] for env, t in zip(envs, tasks)]
        actions: list[list[str]] = [[] for _ in tasks]
        success = [False] * len(tasks)
        active = list(range(len(tasks)))
        for _ in range(envs[0].max_turns if envs else 0):
            if not active:
                break
            chosen = choose([envs[i] for i in active], [observations[i] for i in active],
                            [actions[i] for i in active], [tasks[i] for i in active])
            still = []
            for i, action in zip(active, chosen):
                obs, _, done, info = envs[i].step(action)
                success[i] = bool(info.get("success", False))
                observations[i].append(obs)
                actions[i].append(action)
                if not done:
                    still.append(i)
            active = still
        if turns is not None:
            turns.extend(len(a) for a in actions)
        if games is not None:
            games.extend(list(zip(a, o[1:])) for a, o in zip(actions, observations))
        return success
    finally:
        close_all(envs)


def random_chooser(seed: int) -> tuple[Chooser, list[bool]]:
    """The random valid policy: a uniform draw from ``env.valid_actions()`` (the built-in games: their ``moves``;
    seeded per task and turn).
    The second value collects, per call, whether every environment could list its valid actions."""
    listed: list[bool] = []

    def choose(envs, observations, actions, tasks):
        out = []
        for env, acts, task in zip(envs, actions, tasks):
            valid = env.valid_actions() or list(getattr(env, "moves", None) or [])  # the built-in games' moves
            listed.append(bool(valid))
            rng = random.Random(f"{seed}/{task.id}/{len(acts)}")
            out.append(rng.choice(valid) if valid else "")
        return out

    return choose, listed


def chat_chooser(backend, builder: PromptBuilder, max_new_tokens: int, temperature: float) -> Chooser:
    """A served model's actions: the chat messages of each episode so far, sent in one concurrent batch."""

    def choose(envs, observations, actions, tasks):
        conversations = [builder.messages(obs, acts, task.instruction)
                         for obs, acts, task in zip(observations, actions, tasks)]
        replies = backend.chat(conversations, max_new_tokens, temperature=temperature)
        return [parse_action(reply) for reply, _ in replies]

    return choose


def chat_builder(cfg, env) -> PromptBuilder:
    """The prompt builder of a served model: the environment's rules and examples, the run's agent settings.
    The server applies its own chat template, so no tokenizer is needed here."""
    return PromptBuilder(None, instructions=env.instructions, examples=list(env.examples), history=cfg.agent.history,
                         few_shot=cfg.agent.few_shot, think=cfg.agent.think)
