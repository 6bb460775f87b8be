"""Evaluation on held-out tasks: greedy success rate (overall and per intent), and pass@k from k sampled
rollouts per task.

Held out means never seen, by content (``envs/holdout.py``). Evaluation plays the environment's ``test`` split
(:func:`eval_env_options` switches to it unless ``eval.env`` says otherwise), whose content — a map, a room, a
request — no training episode ever has, and takes the first ``eval.episodes`` distinct contents from the seeds
at ``eval.seed_offset`` on (``tasks/source.py``). When a run's evaluation plays something else (``eval.env``
naming another split), the tasks whose content the run trained on are counted as seen and scored apart.
"""

from __future__ import annotations

from selfevolve.envs import env_options, make_env
from selfevolve.envs.pool import close_all
from selfevolve.rollout.runner import rollout
from selfevolve.tasks.source import eval_tasks
from selfevolve.train.metrics import intent_success


def eval_env_options(env_cls, train_options: dict, eval_env: dict | None) -> dict:
    """The environment options of evaluation: ``eval_env`` (``cfg.eval.env``) merged onto the training
    options; ``None`` means ``{"split": "test"}`` for an environment with a ``split`` option, else nothing."""
    if eval_env is None:
        eval_env = {"split": "test"} if "split" in env_options(env_cls) else {}
    return {**train_options, **eval_env}


def greedy_rollouts(policy, env_cls, env_options: dict, builder, *, episodes: int, seed_offset: int,
                    experience=None, accumulate: bool = False, chunk: int = 8, batch: int = 32):
    """The held-out tasks and their greedy episodes (what :func:`evaluate` scores).

    Without experience the episodes are played in batches of ``batch``: the generation cache grows with the
    rows played at once (64 rows of SmolLM2's default FrozenLake episode held 2.3 GB, the run's peak), while a
    decode step's cost per row barely changes once a batch is a few dozen rows.
    ``experience`` (an ``experience.guide.Experience``): play with recall / insights, in batches of ``chunk``
    episodes (recalled examples make prompts long; this bounds the caches' memory). ``accumulate``: SEER's
    test-time accumulation — each chunk's verified successes join a scratch copy of the pool before the next
    chunk (the run's own pool never sees test tasks)."""
    probe = make_env(env_cls, **env_options)  # the split's contents (closed: a suite's game may hold an engine)
    try:
        tasks = eval_tasks(probe, episodes, seed_offset)
    finally:
        probe.close()
    envs = [make_env(env_cls, **env_options) for _ in tasks]
    try:
        return _greedy(policy, envs, tasks, builder, experience, accumulate, chunk, batch)
    finally:
        close_all(envs)


def _greedy(policy, envs, tasks, builder, experience, accumulate: bool, chunk: int, batch: int):
    if experience is None:  # greedy: an episode is the same whichever batch plays it
        return tasks, [t for start in range(0, len(tasks), batch)
                       for t in rollout(policy, envs[start:start + batch], tasks[start:start + batch], builder,
                                        max_turns=envs[0].max_turns, greedy=True)]
    pool = experience.pool.scratch_copy() if accumulate else experience.pool
    trajs = []
    for start in range(0, len(tasks), chunk):
        part, part_envs = tasks[start:start + chunk], envs[start:start + chunk]
        guide = experience.guide(part, 1, training=False, pool=pool)
        done = rollout(policy, part_envs, part, builder, max_turns=envs[0].max_turns, greedy=True, guide=guide)
        if accumulate:
            experience.absorb(done, pool, step=0, origin="eval")
        trajs += done
    return tasks, trajs


def evaluate(policy, env_cls, env_options: dict, builder, *, episodes: int, pass_k: int = 0,
             seed_offset: int = 1_000_000, sample_seed: int = 0, experience=None, accumulate: bool = False,
             chunk: int = 8, batch: int = 32, seen: set[str] | frozenset[str] = frozenset(),
             episodes_out: list | None = None, general: bool = False, adapter_scale: float = 1.0
             ) -> dict[str, float]:
    """Greedy success on ``episodes`` held-out tasks (``eval/tasks``: how many distinct ones the split held);
    with ``pass_k`` > 0 also pass@k (any of k samples solves) and ``eval/sample_success`` (the success rate of
    those samples). ``experience``/``accumulate``/``chunk``: see :func:`greedy_rollouts` (pass@k samples get
    recall / insights too, without accumulation). ``batch``: episodes played at once without experience.

    ``seen``: the content digests the run trained on. Tasks among them (none on the test split) are counted in
    ``eval/seen``, and then success is also reported apart: ``eval/success/seen`` and ``eval/success/unseen``.
    ``episodes_out``: a list that receives the greedy trajectories (for the run's log and the viewer).
    ``general``: also ``eval/general``, the share of the fixed general questions still answered (``train/general.py``).
    ``adapter_scale``: the LoRA update's weight while evaluating (``Policy.adapter_scaled``; 1: as trained).

    pass@k sampling uses its own generator, so evaluating never changes the training run's random stream.
    """
    with policy.adapter_scaled(adapter_scale):
        return _evaluate(policy, env_cls, env_options, builder, episodes, pass_k, seed_offset, sample_seed,
                         experience, accumulate, chunk, batch, seen, episodes_out, general)


def _evaluate(policy, env_cls, env_options, builder, episodes, pass_k, seed_offset, sample_seed, experience,
              accumulate, chunk, batch, seen, episodes_out, general) -> dict[str, float]:
    tasks, trajs = greedy_rollouts(policy, env_cls, env_options, builder, episodes=episodes, seed_offset=seed_offset,
                                   experience=experience, accumulate=accumulate, chunk=chunk, batch=batch)
    if episodes_out is not None:
        episodes_out.extend(trajs)
    out = {
        "eval/success": sum(t.success for t in trajs) / len(trajs),
        "eval/reward": sum(t.reward for t in trajs) / len(trajs),
        "eval/valid": sum(s.valid for t in trajs for s in t.steps) / max(1, sum(len(t.steps) for t in trajs)),
        "eval/tasks": len(trajs),
        **intent_success(trajs, "eval/success/intent/"),
        **seen_apart(trajs, seen),
    }
    if general:
        from selfevolve.train.general import general_knowledge

        out["eval/general"] = general_knowledge(policy)["correct"]
    if experience is not None:
        from selfevolve.experience.guide import guide_metrics

        out.update(guide_metrics(trajs, "eval/experience/"))
    if pass_k > 0:
        rep = [t for t in tasks for _ in range(pass_k)]
        envs = [make_env(env_cls, **env_options) for _ in rep]
        gen = policy.stream(sample_seed)
        guide = experience.guide(rep, pass_k, training=False) if experience is not None else None
        try:
            sampled = rollout(policy, envs, rep, builder, max_turns=envs[0].max_turns, generator=gen, guide=guide)
        finally:
            close_all(envs)
        solved = {t.task.id for t in sampled if t.success}
        out[f"eval/pass@{pass_k}"] = sum(t.id in solved for t in tasks) / len(tasks)
        # the sampled policy's own success rate (pass@1 estimated from all k samples): moves before greedy does
        out["eval/sample_success"] = sum(t.success for t in sampled) / len(sampled)
    return out


def seen_apart(trajs, seen) -> dict[str, float]:
    """``eval/seen`` (how many evaluation tasks have a content the run trained on) and, when any has, greedy
    success on the seen and on the unseen tasks apart."""
    hit = [t for t in trajs if t.task.content in seen]
    if not hit:
        return {"eval/seen": 0}
    rest = [t for t in trajs if t.task.content not in seen]
    out = {"eval/seen": len(hit), "eval/success/seen": sum(t.success for t in hit) / len(hit)}
    if rest:
        out["eval/success/unseen"] = sum(t.success for t in rest) / len(rest)
    return out
