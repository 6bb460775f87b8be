"""Imitation from the pool: the verified reference paths as demonstrations, the agent's own successes as replay.

- **Demonstrations** (:func:`reference_episodes`): each pool task's reference — the loop-erased path that
  reached its goal during exploration, replayed and verified — is played in the environment and laid out as
  training rows exactly as the policy's own episodes are (the warm start's layout, ``train/warm_start.py``).
  A round's behaviour-cloning steps (``evolve.bc_steps``) train on them by maximum likelihood: a warm start on
  tasks the agent wrote itself, where the default recipe clones the environment's BFS expert.
- **Replay** (:class:`ImitationTerm`): the pool keeps each task's latest successful rollouts as rows with the
  log-probs they were sampled with (``pool.py``). Every RL update adds the imitation term of
  ``algos/imitation.py`` over up to ``evolve.imitation_rows`` of them (one per task, from tasks drawn uniformly
  among those with a buffered success from an earlier draw), with weight ``evolve.imitation_weight`` and the
  off-policy ratio truncated at ``evolve.imitation_clip``.
"""

from __future__ import annotations

import math
import random

import torch

from selfevolve.algos.imitation import imitation_loss
from selfevolve.envs.tools.calls import format_tool_call
from selfevolve.objectives.samples import Row, build_rows, collate, micro_batches, shared_prefix_len, turn_cuts
from selfevolve.train.warm_start import expert_episodes
from selfevolve.types import Task, Trajectory


def reference_action(step) -> str:
    """A reference step as the action text the environment reads: a game's move as it is, a tool call in the
    world's call format."""
    if isinstance(step, dict):
        return format_tool_call(step["name"], step.get("arguments", {}))
    return str(step)


def reference_episodes(env_cls, options: dict, tasks: list[Task], references: list[list], builder,
                       tokenizer) -> list[Trajectory]:
    """The reference of each task played from its start (``options``: the round's environment, which plays
    the pool's tasks), as trajectories with the policy's prompt layout; a reference step the environment
    refuses ends the episode there (verified references never do)."""
    out = []
    for task, ref in zip(tasks, references):
        actions = [reference_action(s) for s in ref]
        out += expert_episodes(env_cls, options, [task], builder, tokenizer,
                               act=lambda env, k, actions=actions: actions[k] if k < len(actions) else None)
    return out


def buffer_rows(traj: Trajectory) -> list[dict]:
    """A successful rollout as the rows the pool keeps: ids, loss mask, the log-probs it was sampled with and
    its turns' value positions (the update's tree of turns)."""
    return [{"ids": r.ids, "mask": r.mask, "logprobs": [round(x, 6) for x in r.old_logprobs],
             "value_pos": r.value_pos} for r in build_rows([traj], [0.0])]


def as_row(stored: dict) -> Row:
    n = sum(stored["mask"])
    return Row(ids=list(stored["ids"]), mask=list(stored["mask"]), old_logprobs=list(stored["logprobs"]),
               advantages=[0.0] * n, value_pos=list(stored.get("value_pos", [])))


class ImitationTerm:
    """The replay term of one RL update: ``prepare(pool, draw)`` picks its rows, then the update calls the
    term once per optimizer step (``objectives/update.py``'s ``extra``), which runs its forwards and backward."""

    def __init__(self, policy, weight: float, clip: float, rows: int, micro_batch_tokens: int):
        self.policy, self.weight, self.clip, self.max_rows = policy, weight, clip, rows
        self.micro_batch_tokens = micro_batch_tokens
        self.rows: list[Row] = []
        self.steps = 1  # optimizer steps of the update (the rows are split over them)

    def prepare(self, pool, draw: int, rng: random.Random, steps: int = 1) -> int:
        """Pick the rows: one buffered success per task (its latest from a draw before ``draw``), from up to
        ``rows`` tasks drawn uniformly with ``rng`` (the pool source's: checkpointed). Returns how many."""
        eligible = [[b for b in e.buffer if b.get("draw", 0) < draw] for e in pool.entries]
        eligible = [b for b in eligible if b]
        picked = rng.sample(eligible, min(self.max_rows, len(eligible))) if self.weight > 0 else []
        self.rows = [as_row(b[-1]) for b in picked]
        self.steps = max(1, steps)
        return len(self.rows)

    def __call__(self, k: int) -> dict[str, float]:
        """Add ∇(weight-scaled L_im) of the ``k``-th optimizer step's share of the rows to the gradients."""
        rows = self.rows[k % self.steps::self.steps]
        if not rows:
            return {}
        n_tokens = sum(sum(r.mask) for r in rows)
        stats: dict[str, float] = {"imitation/rows": float(len(rows))}
        shared = shared_prefix_len(rows)
        for chunk in micro_batches(rows, self.micro_batch_tokens, shared, grouped=True):
            b = collate(chunk, self.policy.pad_id, self.policy.device)
            logp, _, _ = self.policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"],
                                                  prefix_len=shared_prefix_len(chunk),
                                                  cuts=[turn_cuts(r) for r in chunk])
            weights = torch.full_like(logp, self.weight)
            loss, st = imitation_loss(logp, b["old_logprobs"].to(logp.dtype), weights, self.clip)
            share = logp.numel() / n_tokens
            (loss * share).backward()
            for key, v in st.items():
                stats[key] = stats.get(key, 0.0) + share * v
            stats["loss/imitation"] = stats.get("loss/imitation", 0.0) + share * float(loss.detach())
        return {k: v for k, v in stats.items() if math.isfinite(v)}
