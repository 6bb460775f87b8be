"""Behaviour-cloning warm start: imitate the environment's expert for a few steps before reinforcement learning.

Why: a 135M model barely plays FrozenLake at first (about half its sampled replies are not moves, and it
prefers "Down" and "Up" by far), so RL from scratch spends its budget on the answer format and then collapses
onto the model's favourite move (we watched "Down, Down, Down, ..." win twice). A few steps of maximum
likelihood on expert episodes — the environment's ``expert_action()``, e.g. a breadth-first-search solver —
teach the format and a sensible prior; RL then improves on that with the environment's own reward. RAGEN
reports the same effect on Sokoban (SFT on BFS solutions beat RL from scratch).

The expert's episodes are laid out exactly like the model's: the same prompt builder and context template
(``agent.context``; a self-managed context over budget slides, as the expert makes no context call). The expert's reply is its action text tokenised once, plus the end-of-turn id — the only
place where text becomes training ids, because there is no model output to reuse (an expert is not a model).
Training tasks come from the same seed stream as RL (never from the held-out evaluation seeds).
"""

from __future__ import annotations

import contextlib

from selfevolve.agent.context import EpisodeContext
from selfevolve.agent.prompt import end_of_turn_ids
from selfevolve.agent.special_tokens import encode_literal
from selfevolve.envs import make_env
from selfevolve.envs.holdout import content_digest
from selfevolve.envs.pool import EnvPool
from selfevolve.objectives.samples import build_rows
from selfevolve.objectives.update import ppo_update
from selfevolve.types import Step, Task, Trajectory


def clone_step(policy, optimizer, trajs: list[Trajectory], algo, rng, minibatches: int,
               lr: float | None = None) -> dict[str, float]:
    """One behaviour-cloning step on ``trajs``: maximum likelihood of their actions, split into ``minibatches``
    optimizer steps (``train.warm_start_minibatches``, ``evolve.bc_minibatches``); the rest of ``algo``
    (micro-batches, and the learning rate unless ``lr`` is given: ``train.warm_start_lr``) as RL's;
    ``algo.epochs`` and ``algo.minibatches``, which the clone followed before 2026-11-27, are not used. Why split:
    one optimizer step per 16 episodes left the 135M model at 0/64 held-out on FrozenLake after 10 steps, 4 steps on
    the same episodes at 26/64 (docs/benchmarks.md)."""
    bc = algo.model_copy(update={"epochs": 1, "minibatches": minibatches})
    with learning_rate(optimizer, lr):
        return ppo_update(policy, optimizer, build_rows(trajs, [0.0] * len(trajs)), bc, rng, objective="nll")


@contextlib.contextmanager
def learning_rate(optimizer, lr: float | None):
    """The optimizer at learning rate ``lr`` inside the block (None: unchanged), its own rates back after it, so
    that RL's steps and a checkpoint's optimizer state keep ``algo.lr``."""
    before = [group["lr"] for group in optimizer.param_groups]
    if lr is not None:
        for group in optimizer.param_groups:
            group["lr"] = lr
    try:
        yield optimizer
    finally:
        for group, rate in zip(optimizer.param_groups, before):
            group["lr"] = rate


def expert_episodes(env_cls, options: dict, tasks: list[Task], builder, tokenizer, act=None) -> list[Trajectory]:
    """Play each task with the environment's expert; stop when it has no action (or the episode ends).
    ``act(env, k)``: the ``k``-th action from another source instead (``selfevolve evolve`` plays the verified
    reference of a task the agent wrote: ``evolve/imitation.py``)."""
    eot = builder.eot_id()
    stops = end_of_turn_ids(tokenizer)
    trajs = []
    pool = EnvPool(env_cls, options)  # one environment plays every task in turn (reset starts each afresh)
    try:
        for task in tasks:
            trajs.append(_expert_episode(pool.take(1)[0], task, builder, tokenizer, eot, stops, act))
    finally:
        pool.close()
    return trajs


def _expert_episode(env, task: Task, builder, tokenizer, eot: int, stops: set[int], act=None) -> Trajectory:
    """One task played by the environment's expert (or ``act``), laid out as the model's episodes are."""
    ctx = EpisodeContext(builder, task.instruction, env.reset(task.seed))
    task.content = content_digest(env)
    traj = Trajectory(task=task, group_id=task.id)
    for k in range(env.max_turns):
        action = env.expert_action() if act is None else act(env, k)
        if action is None:
            break
        # literal: a synthesized task's reference call may hold any text, and the model must learn to write
        # it, not to end its turn in the middle of it (agent/special_tokens.py)
        ids = encode_literal(tokenizer, action) + [eot]
        key = env.state_key()
        obs, reward, done, info = env.step(action)
        traj.steps.append(Step(prompt_ids=ctx.prompt, action_ids=ids, logprobs=[0.0] * len(ids), action_text=action,
                               observation=obs, reward=float(reward), done=bool(done), valid=True,
                               state_key=str(key)))
        traj.success = bool(info.get("success", False))
        if done:
            break
        ctx.advance(ids, action, obs)
        if ctx.pending:  # an expert has no context call to make: the sliding window stands in
            ctx.resolve(None, {})
    assert not traj.steps or traj.steps[-1].action_ids[-1] in stops
    return traj


def has_expert(env_cls, options: dict) -> bool:
    """Whether the environment has an expert, asked without starting a game (``TextEnv.has_expert``)."""
    env = make_env(env_cls, **options)
    try:
        return bool(env.has_expert())
    finally:
        env.close()
