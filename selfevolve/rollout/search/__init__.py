"""Trajectory-search rollouts (TSR): spend extra generation at rollout time to build better training
trajectories; the loss is untouched (``rollout.search``, ``docs/search.md``).

- ``best_of_n`` (``best_of_n.py``): N full rollouts per kept trajectory, keep the best score (the seed's
  τ* = argmax R(τ)).
- ``beam`` (``beam.py``): per turn, every live beam samples M candidate actions; each child (action + the world's
  answer) is scored, and the B best children of a search (finished beams compete too) are kept.
- ``lookahead`` (``beam.py``): the same beam, but a child's score is that of the state reached after D more policy
  turns from it (one sampled continuation, discarded afterwards).

What a search is asked and returns is in ``spec.py``; the tree's nodes and the scorers (``search.scorer``:
reward, progress, value, weighted) in ``scoring.py``.

What becomes training data: the best final beam of each search (``search.keep=best``) or all surviving beams
(``all``). Each kept step carries the log-probs its action was sampled with, so any advantage estimator
applies; kept beams share their early steps' states, which GiGPO's anchor groups pick up by state key.
"""

from __future__ import annotations

import random
import time
from typing import Callable

from selfevolve.agent.prompt import PromptBuilder
from selfevolve.envs.base import TextEnv
from selfevolve.models.sampler import Sampler, Stream
from selfevolve.rollout.runner import rollout
from selfevolve.rollout.search.beam import beam_search
from selfevolve.rollout.search.best_of_n import best_of_n_search
from selfevolve.rollout.search.scoring import Node, node_scores, score, top
from selfevolve.rollout.search.spec import SCORERS, SEARCHES, SearchResult, SearchSpec, SearchStats
from selfevolve.types import Task

__all__ = ["SCORERS", "SEARCHES", "Node", "SearchResult", "SearchSpec", "SearchStats", "node_scores", "score",
           "search_rollouts", "top"]


def search_rollouts(
    policy: Sampler,
    make_env: Callable[[], TextEnv],
    tasks: list[Task],
    builder: PromptBuilder,
    spec: SearchSpec,
    *,
    max_turns: int,
    group_ids: list[str] | None = None,
    generator: Stream | list[Stream] | None = None,
    rng: random.Random | list[random.Random] | None = None,
    critic_suffix: list[int] | None = None,
    greedy: bool = False,
    guide=None,
) -> SearchResult:
    """Run one search per ``tasks[i]``; return the kept trajectories (``spec.kept_per_search()`` per search, in
    task order), the search trees and the generation counts. ``make_env()`` builds a fresh environment (one per
    rollout for best-of-N, one scratch environment per search for beam and lookahead).

    ``critic_suffix``: the ids appended to a state before its value is read (Self-AC's critic prompt; empty for
    PPO's head). ``rng`` breaks score ties. ``greedy`` decodes greedily (tests: every candidate is the same).
    ``guide``: the experience's hook for the batch of searches (``Experience.guide`` over ``tasks``), or None.
    ``generator`` and ``rng``: one random stream and tie-breaking RNG for the whole batch, or a list with one of
    each per search (a search's samples and ties then depend on that search alone, whatever batch it is played
    in: Ray workers, ``rollout/collect.py``).
    """
    rng = rng if rng is not None else random.Random(0)
    t0 = time.perf_counter()
    gid = (lambda i: group_ids[i]) if group_ids else (lambda i: tasks[i].id)
    if spec.needs_value and spec.name not in ("beam", "lookahead"):
        raise ValueError(f"search.scorer={spec.scorer} reads the value head of partial trajectories: it applies to "
                         f"beam and lookahead, not {spec.name} (use reward or progress)")
    if spec.name == "sample":
        stats = SearchStats()
        trajs = rollout(policy, [make_env() for _ in tasks], tasks, builder, max_turns=max_turns, group_ids=group_ids,
                        generator=generator, stats=stats, reuse_cache=spec.reuse_cache, greedy=greedy, guide=guide)
        stats.candidates = sum(len(t.steps) for t in trajs)
        return SearchResult(trajs, [], stats)
    if spec.name == "best_of_n":
        return best_of_n_search(policy, make_env, tasks, builder, spec, max_turns, gid, generator, rng, t0, greedy,
                                guide)
    return beam_search(policy, make_env, tasks, builder, spec, max_turns, gid, generator, rng, critic_suffix, greedy,
                       guide, t0)
